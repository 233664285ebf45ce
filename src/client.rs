//! The operator's command line client of the admin API: `hivegate agent|key|resource ...`.
//!
//! Each command is one admin API request with the operator token (`--token`, else `HIVEGATE_ADMIN_TOKEN`)
//! to the gateway at `--url` (else `HIVEGATE_URL`, else the configured listen address). The answer's JSON
//! is printed on stdout; an error answer's problem detail goes to stderr and the command fails.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::cli::{AgentCommand, KeyCommand, ResourceCommand};

/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// An admin API client for one gateway and token.
pub struct AdminClient {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl AdminClient {
    pub fn new(base: &str, token: &str) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder().timeout(TIMEOUT).build().context("building the HTTP client")?;
        Ok(Self { http, base: base.trim_end_matches('/').to_owned(), token: token.to_owned() })
    }

    /// Sends one request to `/admin/v1{path}`; the answer's JSON (`null` for 204), or the problem as an error.
    async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let url = format!("{}/admin/v1{path}", self.base);
        let mut request = self.http.request(method.clone(), &url).bearer_auth(&self.token).query(query);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.with_context(|| format!("{method} {url}"))?;
        let status = response.status();
        let text = response.text().await.with_context(|| format!("reading the answer to {method} {url}"))?;
        if status == StatusCode::NO_CONTENT {
            return Ok(Value::Null);
        }
        let answer: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if !status.is_success() {
            let detail = answer["detail"]
                .as_str()
                .or(answer["title"].as_str())
                .map_or_else(|| answer.to_string(), str::to_owned);
            bail!("{method} {path}: {status}: {detail}");
        }
        Ok(answer)
    }

    /// Every item of a paginated list.
    async fn list(&self, path: &str) -> anyhow::Result<Value> {
        let mut items = Vec::new();
        let mut cursor = String::new();
        loop {
            let page = self.call(Method::GET, path, &[("limit", "1000"), ("cursor", &cursor)], None).await?;
            items.extend(page["items"].as_array().cloned().unwrap_or_default());
            match page["nextCursor"].as_str() {
                Some(next) => cursor = next.to_owned(),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    pub async fn agent(&self, command: AgentCommand) -> anyhow::Result<Value> {
        match command {
            AgentCommand::Create { id, name, description } => {
                let mut body = json!({"id": id, "name": name.unwrap_or_else(|| id.clone())});
                if let Some(description) = description {
                    body["description"] = Value::String(description);
                }
                self.call(Method::POST, "/agents", &[], Some(body)).await
            }
            AgentCommand::List => self.list("/agents").await,
            AgentCommand::Delete { id } => {
                self.call(Method::DELETE, &format!("/agents/{}", segment(&id)), &[], None).await
            }
        }
    }

    pub async fn key(&self, command: KeyCommand) -> anyhow::Result<Value> {
        match command {
            KeyCommand::Issue { agent, scopes, name, expires_at } => {
                let mut body = json!({"scopes": scopes});
                if let Some(name) = name {
                    body["name"] = Value::String(name);
                }
                if let Some(expires_at) = expires_at {
                    body["expiresAt"] = Value::String(expires_at);
                }
                self.call(Method::POST, &format!("/agents/{}/keys", segment(&agent)), &[], Some(body)).await
            }
            KeyCommand::List { agent } => self.list(&format!("/agents/{}/keys", segment(&agent))).await,
            KeyCommand::Revoke { agent, key_id } => {
                let path = format!("/agents/{}/keys/{}", segment(&agent), segment(&key_id));
                self.call(Method::DELETE, &path, &[], None).await
            }
        }
    }

    pub async fn resource(&self, command: ResourceCommand) -> anyhow::Result<Value> {
        match command {
            ResourceCommand::Put { agent, uri, file, name, mime_type } => {
                let body = resource_body(&uri, &file, name, mime_type)?;
                self.call(Method::PUT, &format!("/agents/{}/resources", segment(&agent)), &[], Some(body)).await
            }
            ResourceCommand::List { agent } => self.list(&format!("/agents/{}/resources", segment(&agent))).await,
            ResourceCommand::Delete { agent, uri } => {
                let path = format!("/agents/{}/resources", segment(&agent));
                self.call(Method::DELETE, &path, &[("uri", &uri)], None).await
            }
        }
    }
}

/// A path segment, percent-encoded (ids are restricted, but a typo should not change the path).
fn segment(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The resource to store for `file`: its text when it is UTF-8 (unless the MIME type says it is not
/// text), else its bytes as base64.
fn resource_body(uri: &str, file: &Path, name: Option<String>, mime_type: Option<String>) -> anyhow::Result<Value> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let name =
        name.or_else(|| file.file_name().map(|n| n.to_string_lossy().into_owned())).unwrap_or_else(|| uri.to_owned());
    let mut body = json!({"uri": uri, "name": name});
    let is_text_type =
        mime_type.as_deref().is_none_or(|m| m.starts_with("text/") || m.contains("json") || m.contains("xml"));
    match String::from_utf8(bytes) {
        Ok(text) if is_text_type => body["text"] = Value::String(text),
        Ok(text) => body["blob"] = Value::String(base64::engine::general_purpose::STANDARD.encode(text.as_bytes())),
        Err(error) => body["blob"] = Value::String(base64::engine::general_purpose::STANDARD.encode(error.as_bytes())),
    }
    if let Some(mime_type) = mime_type {
        body["mimeType"] = Value::String(mime_type);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(segment("research-bot"), "research-bot");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
    }

    #[test]
    fn text_files_are_text_and_binary_files_are_blobs() {
        let dir = std::env::temp_dir().join(format!("hivegate-client-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let text = dir.join("notes.md");
        std::fs::write(&text, "# notes").expect("write");
        let body = resource_body("file:///notes.md", &text, None, None).expect("body");
        assert_eq!(body, json!({"uri": "file:///notes.md", "name": "notes.md", "text": "# notes"}));
        let binary = dir.join("pixel.png");
        std::fs::write(&binary, [0x89, b'P', b'N', b'G', 0xff]).expect("write");
        let body = resource_body("file:///pixel.png", &binary, None, Some("image/png".to_owned())).expect("body");
        assert_eq!(body["blob"], "iVBOR/8=");
        assert_eq!(body["mimeType"], "image/png");
        let _ = std::fs::remove_dir_all(dir);
    }
}
