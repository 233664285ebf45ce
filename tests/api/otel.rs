//! OpenTelemetry traces (the `otel` feature): a request joins the trace of its `traceparent` header, an MCP
//! message the trace of its `params._meta`, and a request without trace context starts a trace of its own.
//!
//! The global subscriber of this test binary gets an in-memory exporter the first time a story here runs;
//! every story of the binary then produces spans, so each story looks only at the traces it started (or, for
//! a new trace, at the request id it sent).

use std::sync::{Arc, Mutex, OnceLock};

use opentelemetry::trace::{SpanId, SpanKind, TraceId};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{
    Api, Backend, HivegateProcess, OPERATOR_TOKEN, TestApp, TestDatabase, eventually, expect_json, spawn_app,
};
use crate::mcp_client::{Mcp, agent_with_key, envelope};

both!(
    a_traceparent_header_parents_the_request_span,
    meta_trace_context_parents_the_message_span,
    requests_without_trace_context_start_a_trace
);

/// Finished spans, as the SDK exports them.
#[derive(Debug, Clone, Default)]
struct Collected(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Collected {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().expect("the span list").extend(batch);
        Ok(())
    }
}

/// The spans every request of this binary produced; installs the pipeline on first use.
fn collected() -> &'static Collected {
    static PIPELINE: OnceLock<(SdkTracerProvider, Collected)> = OnceLock::new();
    let (_, collected) = PIPELINE.get_or_init(|| {
        let collected = Collected::default();
        let provider = SdkTracerProvider::builder().with_simple_exporter(collected.clone()).build();
        let log = hivegate::config::LogConfig { level: "warn".to_owned(), ..Default::default() };
        assert!(
            hivegate::telemetry::install_with_provider(&log, &provider),
            "another global subscriber was installed first in this test binary"
        );
        (provider, collected)
    });
    collected
}

/// The spans of `trace` once spans of every kind in `kinds` have ended.
async fn spans_of(trace: TraceId, kinds: &[fn(&SpanData) -> bool]) -> Vec<SpanData> {
    eventually(&format!("the spans of trace {trace}"), || async {
        let spans: Vec<SpanData> = collected()
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|span| span.span_context.trace_id() == trace)
            .cloned()
            .collect();
        kinds.iter().all(|kind| spans.iter().any(kind)).then_some(spans)
    })
    .await
}

/// The request span whose request id is `request_id`, once it has ended.
async fn request_span(request_id: &str) -> SpanData {
    eventually(&format!("the span of request {request_id}"), || async {
        let spans = collected().0.lock().unwrap();
        spans.iter().find(|span| attribute(span, "request_id").as_deref() == Some(request_id)).cloned()
    })
    .await
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.to_string())
}

/// The one span of `spans` that `is` picks.
fn one<'a>(spans: &'a [SpanData], what: &str, is: impl Fn(&SpanData) -> bool) -> &'a SpanData {
    let found: Vec<&SpanData> = spans.iter().filter(|span| is(span)).collect();
    assert_eq!(found.len(), 1, "expected one {what} span among {spans:#?}");
    found[0]
}

fn is_request(span: &SpanData) -> bool {
    attribute(span, "request_id").is_some()
}

fn is_message(span: &SpanData) -> bool {
    attribute(span, "mcp.method.name").is_some()
}

fn is_dispatch(span: &SpanData) -> bool {
    span.name == "call"
}

/// A random sampled `traceparent`, and its trace and span ids.
fn traceparent() -> (String, TraceId, SpanId) {
    let trace = *uuid::Uuid::new_v4().as_bytes();
    let span: [u8; 8] = uuid::Uuid::new_v4().as_bytes()[..8].try_into().unwrap();
    let header = format!("00-{}-{}-01", hex::encode(trace), hex::encode(span));
    (header, TraceId::from_bytes(trace), SpanId::from_bytes(span))
}

/// The `traceId` of the audit record of the request `request_id`.
async fn audited_trace(app: &TestApp, agent: &str, method: &str, request_id: &str) -> Value {
    eventually(&format!("the audit record of {request_id}"), || async {
        let query = [("agent", agent), ("method", method)];
        let response = app.op(Method::GET, "/admin/v1/audit").query(&query).send().await.unwrap();
        let page = expect_json(response, StatusCode::OK).await;
        let items = page["items"].as_array().cloned().unwrap_or_default();
        let record = items.into_iter().find(|record| record["requestId"] == request_id)?;
        Some(record.get("traceId").cloned().unwrap_or(Value::Null))
    })
    .await
}

/// A modern request whose `_meta` carries `trace` besides the envelope.
fn modern_with_meta(mcp: &Mcp<'_>, method: &str, mut params: Value, trace: Value) -> reqwest::RequestBuilder {
    let mut meta = envelope();
    for (key, value) in trace.as_object().cloned().unwrap_or_default() {
        meta[key] = value;
    }
    params["_meta"] = meta;
    mcp.post()
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
}

async fn a_traceparent_header_parents_the_request_span(backend: Backend) {
    collected();
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    app.put_text("bot", "test://secret-name", "hello").await;
    let mcp = Mcp::new(&app, "bot", &key);

    let (header, trace, caller) = traceparent();
    let request_id = format!("req-{}", uuid::Uuid::new_v4());
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "test://secret-name"}});
    let response =
        mcp.post().header("traceparent", &header).header("x-request-id", &request_id).json(&body).send().await.unwrap();
    let answer = expect_json(response, StatusCode::OK).await;
    assert_eq!(answer["result"]["contents"][0]["text"], "hello");

    let spans = spans_of(trace, &[is_request, is_message, is_dispatch]).await;
    let request = one(&spans, "request", is_request);
    assert_eq!(request.parent_span_id, caller, "the caller's span is the request span's parent");
    assert!(request.parent_span_is_remote);
    assert_eq!(request.span_kind, SpanKind::Server);
    assert_eq!(request.name, "POST /{agent_id}/mcp");
    assert_eq!(attribute(request, "request_id"), Some(request_id.clone()));
    assert_eq!(attribute(request, "route").as_deref(), Some("/{agent_id}/mcp"));
    assert_eq!(attribute(request, "method").as_deref(), Some("POST"));
    assert_eq!(attribute(request, "status").as_deref(), Some("200"));
    assert_eq!(attribute(request, "agent").as_deref(), Some("bot"));
    assert_eq!(attribute(request, "mcp.method").as_deref(), Some("resources/read"));
    assert_eq!(attribute(request, "mcp.era").as_deref(), Some("legacy"));
    let message = one(&spans, "mcp", is_message);
    assert_eq!(message.parent_span_id, request.span_context.span_id());
    assert_eq!(attribute(message, "mcp.method.name").as_deref(), Some("resources/read"));
    let dispatch = one(&spans, "dispatch", is_dispatch);
    assert_eq!(dispatch.parent_span_id, message.span_context.span_id());
    // Neither the key nor what the call names reaches the request and message spans.
    for span in [request, message] {
        let attributes = format!("{:?}", span.attributes);
        assert!(!attributes.contains(&key[..12]), "a key in {attributes}");
        assert!(!attributes.contains("secret-name"), "a URI in {attributes}");
    }
    assert_eq!(audited_trace(&app, "bot", "resources/read", &request_id).await, json!(hex::encode(trace.to_bytes())));

    // The admin API's requests join their caller's trace the same way.
    let (header, trace, caller) = traceparent();
    let response = app.op(Method::GET, "/admin/v1/agents/bot").header("traceparent", &header).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    let spans = spans_of(trace, &[is_request]).await;
    let request = one(&spans, "request", is_request);
    assert_eq!(request.parent_span_id, caller);
    assert_eq!(attribute(request, "route").as_deref(), Some("/admin/v1/agents/{agent_id}"));

    // A malformed traceparent is ignored: the request starts its own trace.
    let request_id = format!("req-{}", uuid::Uuid::new_v4());
    let malformed = format!("00-{}-0000000000000000-01", hex::encode(trace.to_bytes()));
    let response = mcp
        .post()
        .header("traceparent", malformed)
        .header("x-request-id", &request_id)
        .json(&body)
        .send()
        .await
        .unwrap();
    expect_json(response, StatusCode::OK).await;
    let request = request_span(&request_id).await;
    assert_ne!(request.span_context.trace_id(), trace);
    assert_eq!(request.parent_span_id, SpanId::INVALID);
    assert_eq!(audited_trace(&app, "bot", "resources/read", &request_id).await, Value::Null);
}

async fn meta_trace_context_parents_the_message_span(backend: Backend) {
    collected();
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);

    // Both: the HTTP request joins the header's trace, the message the trace of its `_meta`.
    let (header, header_trace, header_caller) = traceparent();
    let (meta, meta_trace, meta_caller) = traceparent();
    let request_id = format!("req-{}", uuid::Uuid::new_v4());
    let trace = json!({"traceparent": meta, "tracestate": "rojo=00f067aa0ba902b7"});
    let response = modern_with_meta(&mcp, "resources/list", json!({}), trace)
        .header("traceparent", &header)
        .header("x-request-id", &request_id)
        .send()
        .await
        .unwrap();
    expect_json(response, StatusCode::OK).await;

    let spans = spans_of(header_trace, &[is_request]).await;
    let request = one(&spans, "request", is_request);
    assert_eq!(request.parent_span_id, header_caller);
    assert_eq!(attribute(request, "mcp.era").as_deref(), Some("modern"));
    let spans = spans_of(meta_trace, &[is_message, is_dispatch]).await;
    let message = one(&spans, "mcp", is_message);
    assert_eq!(message.parent_span_id, meta_caller, "the _meta caller's span is the message span's parent");
    assert!(message.parent_span_is_remote);
    assert_eq!(message.span_kind, SpanKind::Server);
    assert_eq!(message.name, "resources/list");
    assert_eq!(attribute(message, "mcp.era").as_deref(), Some("modern"));
    assert_eq!(message.span_context.trace_state().header(), "rojo=00f067aa0ba902b7");
    let links: Vec<_> = message.links.links.iter().map(|link| link.span_context.clone()).collect();
    assert_eq!(links.len(), 1, "{links:?}");
    assert_eq!(links[0].trace_id(), header_trace, "the message span links the HTTP request's span");
    assert_eq!(links[0].span_id(), request.span_context.span_id());
    let dispatch = one(&spans, "dispatch", is_dispatch);
    assert_eq!(dispatch.parent_span_id, message.span_context.span_id());
    assert!(spans.iter().all(|span| !is_request(span)), "the request span stays in the header's trace");
    let audited = audited_trace(&app, "bot", "resources/list", &request_id).await;
    assert_eq!(audited, json!(hex::encode(meta_trace.to_bytes())), "the audit record names the message's trace");

    // `_meta` alone, on the legacy wire too (2025-11-25 clients may send it).
    let (meta, meta_trace, meta_caller) = traceparent();
    let request_id = format!("req-{}", uuid::Uuid::new_v4());
    let body =
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/list", "params": {"_meta": {"traceparent": meta}}});
    let response = mcp.post().header("x-request-id", &request_id).json(&body).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    let spans = spans_of(meta_trace, &[is_message, is_dispatch]).await;
    let message = one(&spans, "mcp", is_message);
    assert_eq!(message.parent_span_id, meta_caller);
    assert_eq!(attribute(message, "mcp.era").as_deref(), Some("legacy"));
    assert_eq!(message.links.links.len(), 1, "linked to the request span of a new trace");
    let request = request_span(&request_id).await;
    assert_ne!(request.span_context.trace_id(), meta_trace);
    assert_eq!(request.parent_span_id, SpanId::INVALID);

    // A malformed `_meta` traceparent is ignored: the message stays in the header's trace.
    let (header, header_trace, _) = traceparent();
    let request_id = format!("req-{}", uuid::Uuid::new_v4());
    let response = modern_with_meta(&mcp, "resources/list", json!({}), json!({"traceparent": "00-garbage"}))
        .header("traceparent", &header)
        .header("x-request-id", &request_id)
        .send()
        .await
        .unwrap();
    expect_json(response, StatusCode::OK).await;
    let spans = spans_of(header_trace, &[is_request, is_message, is_dispatch]).await;
    let request = one(&spans, "request", is_request);
    let message = one(&spans, "mcp", is_message);
    assert_eq!(message.parent_span_id, request.span_context.span_id());
    assert!(message.links.links.is_empty());
    let audited = audited_trace(&app, "bot", "resources/list", &request_id).await;
    assert_eq!(audited, json!(hex::encode(header_trace.to_bytes())));
}

async fn requests_without_trace_context_start_a_trace(backend: Backend) {
    collected();
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);

    let mut traces = Vec::new();
    for _ in 0..2 {
        let request_id = format!("req-{}", uuid::Uuid::new_v4());
        let response =
            mcp.modern_request("resources/list", json!({})).header("x-request-id", &request_id).send().await.unwrap();
        expect_json(response, StatusCode::OK).await;
        let request = request_span(&request_id).await;
        assert_eq!(request.parent_span_id, SpanId::INVALID, "a root span");
        let trace = request.span_context.trace_id();
        let spans = spans_of(trace, &[is_request, is_message, is_dispatch]).await;
        let message = one(&spans, "mcp", is_message);
        assert_eq!(message.parent_span_id, request.span_context.span_id());
        assert!(message.links.links.is_empty());
        let dispatch = one(&spans, "dispatch", is_dispatch);
        assert_eq!(dispatch.parent_span_id, message.span_context.span_id());
        assert_eq!(audited_trace(&app, "bot", "resources/list", &request_id).await, Value::Null);
        traces.push(trace);
    }
    assert_ne!(traces[0], traces[1], "each request starts a trace of its own");
}

both!(spans_are_exported_over_otlp_and_flushed_at_shutdown, with_an_export_a_line_in_a_request_names_it);

/// What an OTLP/HTTP collector received: (path, content type, body) of each POST.
type Received = Arc<Mutex<Vec<(String, String, Vec<u8>)>>>;

/// A collector on an ephemeral port that takes every POST; its base URL.
async fn collector() -> (String, Received) {
    let received = Received::default();
    let taken = received.clone();
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let taken = taken.clone();
        async move {
            let path = request.uri().path().to_owned();
            let content_type =
                request.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
            let body = axum::body::to_bytes(request.into_body(), 16 << 20).await.unwrap_or_default();
            taken.lock().unwrap().push((path, content_type, body.to_vec()));
            StatusCode::OK
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}"), received)
}

async fn spans_are_exported_over_otlp_and_flushed_at_shutdown(backend: Backend) {
    let (endpoint, received) = collector().await;
    let db = TestDatabase::new(backend).await;
    let env = [
        ("HIVEGATE_TELEMETRY__OTLP_ENDPOINT", endpoint.as_str()),
        ("HIVEGATE_TELEMETRY__SERVICE_NAME", "hivegate-under-test"),
    ];
    let mut process = HivegateProcess::start_with_env(db.url(), Some(OPERATOR_TOKEN), &env).await;
    let (header, trace, caller) = traceparent();
    let response = process.op(Method::GET, "/admin/v1/agents").header("traceparent", &header).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    // Spans are sent in batches every few seconds; SIGTERM must not lose the last ones.
    assert!(process.terminate().await.success(), "{}", process.logs());

    let received = received.lock().unwrap().clone();
    let contains = |body: &[u8], needle: &[u8]| body.windows(needle.len()).any(|window| window == needle);
    let export = received.iter().find(|(_, _, body)| contains(body, &trace.to_bytes())).unwrap_or_else(|| {
        panic!("no export holds the trace; received {} POST(s)\n{}", received.len(), process.logs())
    });
    let (path, content_type, body) = export;
    assert_eq!(path, "/v1/traces");
    assert_eq!(content_type, "application/x-protobuf");
    assert!(contains(body, &caller.to_bytes()), "the request span's parent is the caller's span");
    assert!(contains(body, b"hivegate-under-test"), "the service name is the configured one");
}

/// With spans exported the log layer has a filter of its own beside the export's layer: a line written while
/// a request is served is still in its span, with the span's fields, and the export's own spans stay out.
async fn with_an_export_a_line_in_a_request_names_it(backend: Backend) {
    let (endpoint, _received) = collector().await;
    let env = [("RUST_LOG", "info"), ("HIVEGATE_TELEMETRY__OTLP_ENDPOINT", endpoint.as_str())];
    let (warning, _) = crate::process::a_failed_render_logged(backend, &env).await;
    crate::process::assert_names_the_request(&warning);
}
