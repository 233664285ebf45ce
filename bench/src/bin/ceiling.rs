//! The ceiling: the least an axum JSON-RPC server can do for the benchmark's requests. It parses each POST
//! body with serde_json and answers with a response precomputed for the method (only the request's `id` is
//! spliced in), so its throughput is the physical limit for an axum server on this machine.
//!
//! For the fan-out workload it serves `GET /sse`: a stream that sends one comment when it opens and then
//! every frame published by `POST /notify`, through one tokio broadcast channel.
//!
//! With `--agents FILE` (lines "agent-id key", as `seed agents` writes them) each agent of the file gets
//! answers of its own, made and kept apart in memory (a list's page as long as hivegate's: its resources
//! carry hivegate's `lastModified` annotation), and a request is answered from its path's agent's: what
//! spreading requests over many agents costs a server that does nothing else, which W5 shows beside
//! hivegate's own many-agent ratio.
//!
//! ```sh
//! ceiling --listen 127.0.0.1:9001 [--agents FILE]
//! ```

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use hivegate_bench::{READ_URI, RESOURCES, render, text, uri};
use serde_json::{Value, json};
use tokio::sync::broadcast;

struct Ceiling {
    /// The `result` of each method, serialised.
    results: HashMap<&'static str, String>,
    /// Each agent's own `results`, when the ceiling serves agents apart (`--agents`).
    agents: HashMap<String, HashMap<&'static str, String>>,
    /// Frames for the SSE streams.
    frames: broadcast::Sender<Bytes>,
}

/// The answers' results; `annotated` gives each listed resource the `lastModified` annotation hivegate lists
/// it with, so that a page is as long as hivegate's (the agents' answers, which W5 compares with hivegate's).
fn results(annotated: bool) -> HashMap<&'static str, String> {
    let resources: Vec<Value> = (0..RESOURCES)
        .map(|i| {
            let mut resource = json!({"uri": uri(i), "name": format!("doc-{i:03}"),
                "title": format!("Benchmark document {i:03}"),
                "description": "A 1 KiB text resource of the benchmark", "mimeType": "text/plain", "size": 1024});
            if annotated {
                resource["annotations"] = json!({"lastModified": "2026-01-01T00:00:00.000Z"});
            }
            resource
        })
        .collect();
    let index = READ_URI.rsplit('/').next().and_then(|n| n.parse().ok()).unwrap_or(0);
    let read = json!({"contents": [{"uri": READ_URI, "mimeType": "text/plain", "text": text(index)}]});
    let prompt = json!({"description": "Research a topic to the requested depth",
        "messages": [{"role": "user", "content": {"type": "text", "text": render("quantum computing", "deep")}}]});
    let initialize = json!({"protocolVersion": "2025-11-25", "capabilities": {"resources": {"listChanged": true},
        "prompts": {"listChanged": true}}, "serverInfo": {"name": "ceiling", "version": "0"}});
    HashMap::from([
        ("resources/list", json!({ "resources": resources }).to_string()),
        ("resources/read", read.to_string()),
        ("prompts/get", prompt.to_string()),
        ("initialize", initialize.to_string()),
        ("ping", "{}".to_owned()),
    ])
}

async fn rpc(State(ceiling): State<Arc<Ceiling>>, Path(agent): Path<String>, body: Bytes) -> Response {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return (
            StatusCode::BAD_REQUEST,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}"#,
        )
            .into_response();
    };
    let Some(id) = request.get("id") else { return StatusCode::ACCEPTED.into_response() };
    let method = request.get("method").and_then(Value::as_str).unwrap_or_default();
    let id = id.to_string();
    // Sessions as a client sees them: `initialize` hands out an id, which later requests carry (and the
    // ceiling ignores).
    let session = if method == "initialize" { "ceiling-session" } else { "" };
    let results = ceiling.agents.get(&agent).unwrap_or(&ceiling.results);
    let answer = match results.get(method) {
        Some(result) => format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#),
        None => format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"method not found"}}}}"#),
    };
    let mut response = ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], answer).into_response();
    if !session.is_empty() {
        response.headers_mut().insert("mcp-session-id", HeaderValue::from_static("ceiling-session"));
    }
    response
}

async fn sse(State(ceiling): State<Arc<Ceiling>>) -> Response {
    let receiver = ceiling.frames.subscribe();
    let opened = futures::stream::once(async { Ok::<_, Infallible>(Bytes::from_static(b": open\n\n")) });
    let frames = futures::stream::unfold(receiver, |mut receiver| async move {
        loop {
            match receiver.recv().await {
                Ok(frame) => return Some((Ok::<_, Infallible>(frame), receiver)),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    let body = Body::from_stream(futures::StreamExt::chain(opened, frames));
    ([(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

async fn notify(State(ceiling): State<Arc<Ceiling>>) -> StatusCode {
    let frame = Bytes::from_static(
        b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/list_changed\"}\n\n",
    );
    let _ = ceiling.frames.send(frame);
    StatusCode::NO_CONTENT
}

#[tokio::main]
async fn main() {
    let mut listen = "127.0.0.1:9001".to_owned();
    let mut agents = HashMap::new();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--listen", Some(value)) => listen = value,
            ("--agents", Some(file)) => {
                let lines = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("cannot read {file}: {e}"));
                for line in lines.lines() {
                    if let Some((agent, _key)) = line.split_once(' ') {
                        agents.insert(agent.to_owned(), results(true));
                    }
                }
            }
            _ => {
                eprintln!("usage: ceiling [--listen ADDRESS] [--agents FILE]");
                std::process::exit(2);
            }
        }
    }
    let (frames, _) = broadcast::channel(256);
    let ceiling = Arc::new(Ceiling { results: results(false), agents, frames });
    let app = Router::new()
        .route("/{agent}/mcp", post(rpc))
        .route("/sse", get(sse))
        .route("/notify", post(notify))
        .route("/readyz", get(|| async { "ok" }))
        .with_state(ceiling);
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
