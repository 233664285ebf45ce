//! A minimal MCP client for the endpoint stories: legacy (plain) and modern (2026-07-28 envelope and
//! headers) POSTs, plus the fixtures the official conformance suite reads, seeded through the admin API.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Api, TestApp, expect_json};

/// A 1×1 PNG, the binary fixture.
pub const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0d, 0x49,
    0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0xfc, 0xcf, 0xc0, 0x50, 0x0f, 0x00, 0x04, 0x85, 0x01, 0x80, 0x84, 0xa9, 0x8c,
    0x21, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// Every revision served, newest first.
pub const SUPPORTED: [&str; 5] = ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The modern per-request `_meta`.
pub fn envelope() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "hivegate-tests", "version": "1.0.0"},
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

/// One agent's MCP endpoint, seen with one key.
pub struct Mcp<'a> {
    pub app: &'a TestApp,
    pub agent: String,
    pub key: String,
}

/// A decoded answer: HTTP status, headers and JSON body (`Null` when empty).
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Answer {
    pub async fn of(response: Response) -> Self {
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        let body =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        Self { status, headers, body }
    }

    pub fn result(&self) -> &Value {
        assert_eq!(self.status, StatusCode::OK, "expected 200: {}", self.body);
        assert!(self.body.get("error").is_none(), "expected a result: {}", self.body);
        &self.body["result"]
    }

    /// Asserts an error answer with `status` and JSON-RPC `code`; returns the error object.
    pub fn error(&self, status: StatusCode, code: i64) -> &Value {
        assert_eq!(self.status, status, "HTTP status of {}", self.body);
        assert_eq!(self.body["jsonrpc"], "2.0", "{}", self.body);
        assert_eq!(self.body["error"]["code"], code, "{}", self.body);
        assert!(self.body["error"]["message"].is_string(), "{}", self.body);
        &self.body["error"]
    }

    pub fn content_type(&self) -> &str {
        self.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("")
    }
}

impl<'a> Mcp<'a> {
    pub fn new(app: &'a TestApp, agent: &str, key: &str) -> Self {
        Self { app, agent: agent.to_owned(), key: key.to_owned() }
    }

    pub fn path(&self) -> String {
        format!("/{}/mcp", self.agent)
    }

    /// A POST to the endpoint with the key and nothing else.
    pub fn post(&self) -> RequestBuilder {
        self.app.with_key(Method::POST, &self.path(), &self.key)
    }

    /// A plain (legacy, curl-like) request with id 1.
    pub async fn legacy(&self, method: &str, params: Value) -> Answer {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        Answer::of(self.post().header("content-type", "application/json").body(body.to_string()).send().await.unwrap())
            .await
    }

    /// A legacy request naming its version in `MCP-Protocol-Version`.
    pub async fn legacy_at(&self, version: &str, method: &str, params: Value) -> Answer {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let request =
            self.post().header("mcp-protocol-version", version).header("accept", "application/json, text/event-stream");
        Answer::of(request.json(&body).send().await.unwrap()).await
    }

    /// A modern request as an official client sends it: envelope, version, method and name headers.
    pub fn modern_request(&self, method: &str, params: Value) -> RequestBuilder {
        let mut params = params;
        params["_meta"] = envelope();
        let mut request = self
            .post()
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method);
        let name = match method {
            "resources/read" => params["uri"].as_str(),
            "prompts/get" => params["name"].as_str(),
            _ => None,
        };
        if let Some(name) = name {
            let is_plain = name.bytes().all(|b| (0x21..0x7f).contains(&b)) && !name.starts_with("=?base64?");
            let value = if is_plain { name.to_owned() } else { format!("=?base64?{}?=", STANDARD.encode(name)) };
            request = request.header("mcp-name", value);
        }
        request.json(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}))
    }

    pub async fn modern(&self, method: &str, params: Value) -> Answer {
        Answer::of(self.modern_request(method, params).send().await.unwrap()).await
    }
}

/// Creates `agent` with a description and returns an `mcp` key for it.
pub async fn agent_with_key(app: &TestApp, agent: &str) -> String {
    let response = app
        .op(Method::POST, "/admin/v1/agents")
        .json(&json!({"id": agent, "name": format!("Agent {agent}"), "description": format!("Serves {agent}.")}))
        .send()
        .await
        .unwrap();
    expect_json(response, StatusCode::CREATED).await;
    app.issue_key(agent, &["mcp"]).await.key
}

async fn put(app: &TestApp, path: &str, body: Value) {
    let response = app.op(Method::PUT, path).json(&body).send().await.unwrap();
    let status = response.status();
    assert!(
        status == StatusCode::CREATED || status == StatusCode::OK,
        "PUT {path}: {status} {}",
        response.text().await.unwrap()
    );
}

/// The conformance suite's fixtures, served by ordinary resources, a template with `text`, and prompts.
pub async fn seed_fixtures(app: &TestApp, agent: &str) {
    let resources = format!("/admin/v1/agents/{agent}/resources");
    put(
        app,
        &resources,
        json!({"uri": "test://static-text", "name": "static-text", "mimeType": "text/plain",
        "text": "This is the content of the static text resource."}),
    )
    .await;
    put(
        app,
        &resources,
        json!({"uri": "test://static-binary", "name": "static-binary", "mimeType": "image/png",
        "blob": STANDARD.encode(PNG)}),
    )
    .await;
    put(
        app,
        &format!("/admin/v1/agents/{agent}/resource-templates"),
        json!({
        "uriTemplate": "test://template/{id}/data", "name": "template", "mimeType": "application/json",
        "text": "{\"id\":\"{{ id }}\",\"templateTest\":true,\"data\":\"Data for ID: {{ id }}\"}"}),
    )
    .await;
    let prompts = format!("/admin/v1/agents/{agent}/prompts");
    put(
        app,
        &format!("{prompts}/test_simple_prompt"),
        json!({"description": "A simple prompt",
        "messages": [{"role": "user", "content": {"type": "text", "text": "This is a simple prompt for testing."}}]}),
    )
    .await;
    put(app, &format!("{prompts}/test_prompt_with_arguments"), json!({"description": "A prompt with arguments",
        "arguments": [
            {"name": "arg1", "description": "First", "required": true, "completions": ["paris", "park", "party", "test"]},
            {"name": "arg2", "description": "Second", "required": true}
        ],
        "messages": [{"role": "user", "content": {"type": "text",
            "text": "Prompt with arguments: arg1='{{ arg1 }}', arg2='{{ arg2 }}'"}}]})).await;
    put(
        app,
        &format!("{prompts}/test_prompt_with_embedded_resource"),
        json!({
        "arguments": [{"name": "resourceUri", "required": true}],
        "messages": [
            {"role": "user", "content": {"type": "resource", "resource": {"uri": "{{ resourceUri }}",
                "mimeType": "text/plain", "text": "Embedded resource content for testing."}}},
            {"role": "user", "content": {"type": "text", "text": "Please process the embedded resource above."}}
        ]}),
    )
    .await;
    put(
        app,
        &format!("{prompts}/test_prompt_with_image"),
        json!({
        "messages": [
            {"role": "user", "content": {"type": "image", "data": STANDARD.encode(PNG), "mimeType": "image/png"}},
            {"role": "user", "content": {"type": "text", "text": "Please analyze the image above."}}
        ]}),
    )
    .await;
}

/// A check made right after an admin write. On SQLite the writing replica's bus has the change before the
/// admin answer, so the very next request must see it; on PostgreSQL the change travels through
/// LISTEN/NOTIFY, so it is given the suite's deadline.
pub async fn after_write<T, F, Fut>(backend: crate::helpers::Backend, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    match backend {
        crate::helpers::Backend::Sqlite => {
            check().await.unwrap_or_else(|| panic!("not seen by the next request: {what}"))
        }
        crate::helpers::Backend::Postgres => crate::helpers::eventually(what, check).await,
    }
}
