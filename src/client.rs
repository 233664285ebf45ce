//! The operator's command line client of the admin API: `hivegate agent|key|resource|template|prompt ...`
//! and `hivegate audit tail`.
//!
//! Each command is one admin API request with the operator token (`--token`, else `HIVEGATE_ADMIN_TOKEN`)
//! to the gateway at `--url` (else `HIVEGATE_URL`, else the configured listen address). The answer's JSON
//! is printed on stdout; an error answer's problem detail goes to stderr and the command fails.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::cli::{AgentCommand, KeyCommand, PromptCommand, ResourceCommand, TemplateCommand};
use crate::config::LimitsConfig;

/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A request body at least this large that the server stops reading was most likely refused for its size.
const LARGE_BODY: usize = 64 * 1024;

/// An admin API client for one gateway and token.
pub struct AdminClient {
    http: reqwest::Client,
    base: String,
    token: String,
    /// `limits.max_body_bytes` and `limits.max_resource_bytes` of the configuration the CLI loaded, checked
    /// before a resource is sent: a server refuses an oversized body before reading it, and the client would
    /// only see the connection closed under it.
    max_body_bytes: usize,
    max_resource_bytes: usize,
}

impl AdminClient {
    pub fn new(base: &str, token: &str, limits: &LimitsConfig) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder().timeout(TIMEOUT).build().context("building the HTTP client")?;
        Ok(Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            max_body_bytes: limits.max_body_bytes,
            max_resource_bytes: limits.max_resource_bytes,
        })
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
        let mut length = 0;
        if let Some(body) = body {
            let bytes = serde_json::to_vec(&body).context("encoding the request body")?;
            length = bytes.len();
            request = request.header(reqwest::header::CONTENT_TYPE, "application/json").body(bytes);
        }
        let response = request.send().await.with_context(|| {
            if length >= LARGE_BODY {
                format!(
                    "{method} {url}: the server closed the connection while the {length}-byte body was sent; it is \
                     most likely larger than the server's limits.max_body_bytes"
                )
            } else {
                format!("{method} {url}")
            }
        })?;
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
            AgentCommand::Get { id } => self.call(Method::GET, &format!("/agents/{}", segment(&id)), &[], None).await,
            AgentCommand::List => self.list("/agents").await,
            AgentCommand::Patch { id, name, description, json } => {
                let mut patch = merge_patch(json.as_deref())?;
                if let Some(name) = name {
                    patch["name"] = Value::String(name);
                }
                if let Some(description) = description {
                    patch["description"] = Value::String(description);
                }
                self.call(Method::PATCH, &format!("/agents/{}", segment(&id)), &[], Some(patch)).await
            }
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
            KeyCommand::Patch { agent, key_id, name, json } => {
                let mut patch = merge_patch(json.as_deref())?;
                if let Some(name) = name {
                    patch["name"] = Value::String(name);
                }
                let path = format!("/agents/{}/keys/{}", segment(&agent), segment(&key_id));
                self.call(Method::PATCH, &path, &[], Some(patch)).await
            }
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
                self.check_size(&body)?;
                self.call(Method::PUT, &format!("/agents/{}/resources", segment(&agent)), &[], Some(body)).await
            }
            ResourceCommand::List { agent } => self.list(&format!("/agents/{}/resources", segment(&agent))).await,
            ResourceCommand::Delete { agent, uri } => {
                let path = format!("/agents/{}/resources", segment(&agent));
                self.call(Method::DELETE, &path, &[("uri", &uri)], None).await
            }
        }
    }

    pub async fn template(&self, command: TemplateCommand) -> anyhow::Result<Value> {
        match command {
            TemplateCommand::Put { agent, file } => {
                let path = format!("/agents/{}/resource-templates", segment(&agent));
                self.call(Method::PUT, &path, &[], Some(json_file(&file)?)).await
            }
            TemplateCommand::List { agent } => {
                self.list(&format!("/agents/{}/resource-templates", segment(&agent))).await
            }
            TemplateCommand::Delete { agent, uri_template } => {
                let path = format!("/agents/{}/resource-templates", segment(&agent));
                self.call(Method::DELETE, &path, &[("uriTemplate", &uri_template)], None).await
            }
        }
    }

    pub async fn prompt(&self, command: PromptCommand) -> anyhow::Result<Value> {
        let path = |agent: &str, name: &str| format!("/agents/{}/prompts/{}", segment(agent), segment(name));
        match command {
            PromptCommand::Put { agent, name, file } => {
                self.call(Method::PUT, &path(&agent, &name), &[], Some(json_file(&file)?)).await
            }
            PromptCommand::Get { agent, name } => self.call(Method::GET, &path(&agent, &name), &[], None).await,
            PromptCommand::List { agent } => self.list(&format!("/agents/{}/prompts", segment(&agent))).await,
            PromptCommand::Delete { agent, name } => self.call(Method::DELETE, &path(&agent, &name), &[], None).await,
        }
    }

    /// `hivegate audit tail`: prints the newest `lines` records that `filter` selects, oldest first, as
    /// NDJSON; with `follow`, then asks every `interval` for records written since and prints the new ones,
    /// until stdout is closed or the process is stopped.
    pub async fn audit_tail(
        &self,
        filter: &[(&str, &str)],
        lines: u32,
        follow: Option<Duration>,
    ) -> anyhow::Result<()> {
        let mut query = filter.to_vec();
        let limit = lines.to_string();
        query.push(("limit", &limit));
        let page = self.call(Method::GET, "/audit", &query, None).await?;
        let mut newest: Vec<Value> = page["items"].as_array().cloned().unwrap_or_default();
        newest.reverse();
        let mut seen = SeenRecords::default();
        for record in &newest {
            seen.insert(record);
        }
        if !print_lines(&newest)? {
            return Ok(());
        }
        let Some(interval) = follow else { return Ok(()) };
        loop {
            tokio::time::sleep(interval).await;
            let since = seen.since();
            let mut query = filter.to_vec();
            if let Some(since) = &since {
                query.push(("since", since));
            }
            let records = self.every(&query).await?;
            let fresh: Vec<Value> = records.into_iter().rev().filter(|record| seen.insert(record)).collect();
            if !print_lines(&fresh)? {
                return Ok(());
            }
        }
    }

    /// Every record of `GET /audit` with `query`, newest first.
    async fn every(&self, query: &[(&str, &str)]) -> anyhow::Result<Vec<Value>> {
        let mut records = Vec::new();
        let mut cursor = String::new();
        loop {
            let mut paged = query.to_vec();
            paged.extend([("limit", "1000"), ("cursor", cursor.as_str())]);
            let page = self.call(Method::GET, "/audit", &paged, None).await?;
            records.extend(page["items"].as_array().cloned().unwrap_or_default());
            match page["nextCursor"].as_str() {
                Some(next) => cursor = next.to_owned(),
                None => return Ok(records),
            }
        }
    }

    /// Refuses a resource the configured limits would refuse, in the server's words, before sending it.
    fn check_size(&self, body: &Value) -> anyhow::Result<()> {
        let content = match (body["text"].as_str(), body["blob"].as_str()) {
            (Some(text), _) => text.len(),
            (None, Some(blob)) => blob.len() / 4 * 3 - blob.bytes().rev().take_while(|b| *b == b'=').count(),
            (None, None) => 0,
        };
        if content > self.max_resource_bytes {
            bail!(
                "the content is {content} bytes; at most {} are allowed (limits.max_resource_bytes)",
                self.max_resource_bytes
            );
        }
        let length = serde_json::to_vec(body).map_or(0, |bytes| bytes.len());
        if length > self.max_body_bytes {
            bail!(
                "the request body is {length} bytes, larger than {} bytes (limits.max_body_bytes)",
                self.max_body_bytes
            );
        }
        Ok(())
    }
}

/// How far back `audit tail --follow` looks again on each poll: records are written in batches a moment
/// after the request they record, so one can appear with a time before the newest already printed.
const AUDIT_LOOKBACK: chrono::TimeDelta = chrono::TimeDelta::seconds(10);

/// The ids of the records `audit tail` printed within [`AUDIT_LOOKBACK`] of the newest, so that looking back
/// prints none twice.
#[derive(Default)]
struct SeenRecords {
    ids: HashMap<String, chrono::DateTime<chrono::Utc>>,
    newest: Option<chrono::DateTime<chrono::Utc>>,
}

impl SeenRecords {
    /// Remembers `record`; false when it was printed already.
    fn insert(&mut self, record: &Value) -> bool {
        let id = record["id"].as_str().unwrap_or_default().to_owned();
        let at = record["occurredAt"]
            .as_str()
            .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
            .map(|at| at.with_timezone(&chrono::Utc));
        let Some(at) = at else { return true };
        if self.ids.insert(id, at).is_some() {
            return false;
        }
        let newest = self.newest.map_or(at, |newest| newest.max(at));
        self.newest = Some(newest);
        self.ids.retain(|_, at| *at >= newest - AUDIT_LOOKBACK);
        true
    }

    /// The `since` of the next poll.
    fn since(&self) -> Option<String> {
        self.newest.map(|newest| (newest - AUDIT_LOOKBACK).to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
    }
}

/// Prints `records` one a line on stdout; false when stdout was closed (`| head`).
fn print_lines(records: &[Value]) -> anyhow::Result<bool> {
    let mut out = std::io::stdout().lock();
    for record in records {
        match writeln!(out, "{record}").and_then(|()| out.flush()) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => return Ok(false),
            Err(error) => return Err(error).context("writing to stdout"),
        }
    }
    Ok(true)
}

/// The JSON merge-patch of `--json`, an object (empty without it).
fn merge_patch(json: Option<&str>) -> anyhow::Result<Value> {
    let Some(json) = json else { return Ok(json!({})) };
    let patch: Value = serde_json::from_str(json).context("--json is not valid JSON")?;
    anyhow::ensure!(patch.is_object(), "--json must be a JSON object (a merge-patch)");
    Ok(patch)
}

/// The JSON object in `file`.
fn json_file(file: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let value: Value = serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", file.display()))?;
    anyhow::ensure!(value.is_object(), "{} must hold a JSON object", file.display());
    Ok(value)
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
/// text), else its bytes as base64. Without `mime_type`, the type is guessed from the file's extension.
fn resource_body(uri: &str, file: &Path, name: Option<String>, mime_type: Option<String>) -> anyhow::Result<Value> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let name =
        name.or_else(|| file.file_name().map(|n| n.to_string_lossy().into_owned())).unwrap_or_else(|| uri.to_owned());
    let mime_type = mime_type.or_else(|| mime_guess::from_path(file).first().map(|guess| guess.to_string()));
    let mut body = json!({"uri": uri, "name": name});
    let is_text_type = mime_type.as_deref().is_none_or(|m| {
        m.starts_with("text/") || ["json", "xml", "javascript", "yaml", "toml"].iter().any(|kind| m.contains(kind))
    });
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
        for (raw, encoded) in [("research-bot", "research-bot"), ("a/b c", "a%2Fb%20c")] {
            assert_eq!(segment(raw), encoded);
        }
    }

    #[test]
    fn text_files_are_text_and_binary_files_are_blobs() {
        let dir = std::env::temp_dir().join(format!("hivegate-client-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let text = dir.join("notes.md");
        std::fs::write(&text, "# notes").expect("write");
        let body = resource_body("file:///notes.md", &text, None, None).expect("body");
        assert_eq!(
            body,
            json!({"uri": "file:///notes.md", "name": "notes.md", "text": "# notes", "mimeType": "text/markdown"})
        );
        let unknown = dir.join("notes.unknown-extension");
        std::fs::write(&unknown, "plain").expect("write");
        let body = resource_body("file:///n", &unknown, None, None).expect("body");
        assert_eq!(body, json!({"uri": "file:///n", "name": "notes.unknown-extension", "text": "plain"}));
        let binary = dir.join("pixel.png");
        std::fs::write(&binary, [0x89, b'P', b'N', b'G', 0xff]).expect("write");
        let body = resource_body("file:///pixel.png", &binary, None, Some("image/png".to_owned())).expect("body");
        assert_eq!(body["blob"], "iVBOR/8=");
        assert_eq!(body["mimeType"], "image/png");
        let _ = std::fs::remove_dir_all(dir);
    }
}
