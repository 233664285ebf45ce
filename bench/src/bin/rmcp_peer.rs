//! The peer: the official Rust SDK's (`rmcp`) Streamable HTTP server serving the benchmark's 100 resources
//! and its prompt from memory. Two services on one listener:
//!
//! - `/stateless/mcp`: no sessions, JSON responses (`legacy_session_mode: false`, `json_response: true`);
//! - `/session/mcp`: sessions as SDK clients use them (`initialize` issues an `Mcp-Session-Id`, each
//!   request is answered on its own short SSE stream).
//!
//! ```sh
//! rmcp_peer --listen 127.0.0.1:9002
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use axum::serve::ListenerExt;

use hivegate_bench::{RESOURCES, render, text, uri};
use rmcp::model::{
    GetPromptRequestParams, GetPromptResponse, GetPromptResult, ListResourcesResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};

/// What the peer serves; shared by every service instance.
struct Content {
    list: ListResourcesResult,
    reads: HashMap<String, ReadResourceResult>,
}

#[derive(Clone)]
struct Peer {
    content: Arc<Content>,
}

fn parse<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap_or_else(|e| panic!("fixture does not fit rmcp's model: {e}"))
}

impl Peer {
    fn new() -> Self {
        let resources: Vec<Value> = (0..RESOURCES)
            .map(|i| {
                json!({"uri": uri(i), "name": format!("doc-{i:03}"), "title": format!("Benchmark document {i:03}"),
                "description": "A 1 KiB text resource of the benchmark", "mimeType": "text/plain", "size": 1024})
            })
            .collect();
        let list = parse(json!({ "resources": resources }));
        let reads = (0..RESOURCES)
            .map(|i| {
                let read = json!({"contents": [{"uri": uri(i), "mimeType": "text/plain", "text": text(i)}]});
                (uri(i), parse(read))
            })
            .collect();
        Self { content: Arc::new(Content { list, reads }) }
    }
}

impl ServerHandler for Peer {
    fn get_info(&self) -> ServerConfig {
        let capabilities: ServerCapabilities =
            parse(json!({"resources": {"listChanged": true}, "prompts": {"listChanged": true}}));
        ServerConfig::new(capabilities)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Ok(self.content.list.clone())
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        match self.content.reads.get(&request.uri) {
            Some(read) => Ok(read.clone().into()),
            None => Err(McpError::resource_not_found("resource not found", Some(json!({"uri": request.uri})))),
        }
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        if request.name != hivegate_bench::PROMPT {
            return Err(McpError::invalid_params("unknown prompt", None));
        }
        let arguments = request.arguments.unwrap_or_default();
        let argument = |name: &str| arguments.get(name).and_then(Value::as_str).map(str::to_owned);
        let (Some(topic), Some(depth)) = (argument("topic"), argument("depth")) else {
            return Err(McpError::invalid_params("topic and depth are required", None));
        };
        let result: GetPromptResult = parse(json!({"description": "Research a topic to the requested depth",
            "messages": [{"role": "user", "content": {"type": "text", "text": render(&topic, &depth)}}]}));
        Ok(result.into())
    }
}

#[tokio::main]
async fn main() {
    let mut listen = "127.0.0.1:9002".to_owned();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => {}
        [flag, value] if flag == "--listen" => listen = value.clone(),
        _ => {
            eprintln!("usage: rmcp_peer [--listen ADDRESS]");
            std::process::exit(2);
        }
    }
    let peer = Peer::new();
    let stateless = {
        let peer = peer.clone();
        let config = StreamableHttpServerConfig::default().with_legacy_session_mode(false).with_json_response(true);
        StreamableHttpService::new(move || Ok(peer.clone()), Arc::new(LocalSessionManager::default()), config)
    };
    let session = {
        let peer = peer.clone();
        StreamableHttpService::new(
            move || Ok(peer.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        )
    };
    let app = axum::Router::new()
        .nest_service("/stateless/mcp", stateless)
        .nest_service("/session/mcp", session)
        .route("/readyz", axum::routing::get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .unwrap_or_else(|e| panic!("cannot bind {listen}: {e}"))
        // Streamed answers go out in several writes; without TCP_NODELAY the last one can wait for the
        // client's delayed ACK (40 ms) on a keep-alive connection.
        .tap_io(|stream| {
            let _ = stream.set_nodelay(true);
        });
    axum::serve(listener, app).await.unwrap_or_else(|e| panic!("server failed: {e}"));
}
