use axum::http::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

use super::*;
use crate::mcp::jsonrpc::{self, Body};

fn message(body: Value) -> Message {
    match jsonrpc::parse(body.to_string().as_bytes()).expect("json") {
        Body::Single(Ok(message)) => message,
        other => panic!("not a single message: {other:?}"),
    }
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.insert(*name, HeaderValue::from_str(value).expect("header"));
    }
    map
}

fn envelope() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

fn modern_read(uri: &str) -> Message {
    message(json!({"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":uri,"_meta":envelope()}}))
}

fn code(result: Result<Era, McpError>) -> i32 {
    result.expect_err("an error").code()
}

#[test]
fn plain_curl_is_legacy_2025_03_26() {
    let request = message(json!({"jsonrpc":"2.0","id":1,"method":"resources/list"}));
    assert_eq!(detect(&HeaderMap::new(), &request).ok(), Some(Era::Legacy { version: "2025-03-26" }));
}

#[test]
fn legacy_header_selects_its_version() {
    let request = message(json!({"jsonrpc":"2.0","id":1,"method":"resources/list"}));
    let h = headers(&[("mcp-protocol-version", "2025-06-18")]);
    assert_eq!(detect(&h, &request).ok(), Some(Era::Legacy { version: "2025-06-18" }));
    let unsupported = headers(&[("mcp-protocol-version", "1900-01-01")]);
    assert_eq!(code(detect(&unsupported, &request)), -32022);
}

#[test]
fn envelope_selects_modern() {
    let h = headers(&[
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "resources/read"),
        ("mcp-name", "test://static-text"),
    ]);
    assert_eq!(detect(&h, &modern_read("test://static-text")).ok(), Some(Era::Modern));
}

#[test]
fn modern_header_checks() {
    let read = modern_read("test://static-text");
    let missing_version = headers(&[("mcp-method", "resources/read"), ("mcp-name", "test://static-text")]);
    assert_eq!(code(detect(&missing_version, &read)), -32020);
    let disagreeing = headers(&[("mcp-protocol-version", "2025-11-25"), ("mcp-method", "resources/read")]);
    assert_eq!(code(detect(&disagreeing, &read)), -32020);
    let missing_method = headers(&[("mcp-protocol-version", "2026-07-28"), ("mcp-name", "test://static-text")]);
    assert_eq!(code(detect(&missing_method, &read)), -32020);
    let wrong_method =
        headers(&[("mcp-protocol-version", "2026-07-28"), ("mcp-method", "prompts/get"), ("mcp-name", "x")]);
    assert_eq!(code(detect(&wrong_method, &read)), -32020);
    let missing_name = headers(&[("mcp-protocol-version", "2026-07-28"), ("mcp-method", "resources/read")]);
    assert_eq!(code(detect(&missing_name, &read)), -32020);
    let wrong_name =
        headers(&[("mcp-protocol-version", "2026-07-28"), ("mcp-method", "resources/read"), ("mcp-name", "test://x")]);
    assert_eq!(code(detect(&wrong_name, &read)), -32020);
}

#[test]
fn encoded_names_are_decoded_before_comparison() {
    let read = modern_read("test://café");
    let h = headers(&[
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "resources/read"),
        ("mcp-name", "=?base64?dGVzdDovL2NhZsOp?="),
    ]);
    assert_eq!(detect(&h, &read).ok(), Some(Era::Modern));
    let broken = headers(&[
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "resources/read"),
        ("mcp-name", "=?base64?***?="),
    ]);
    assert_eq!(code(detect(&broken, &read)), -32020);
}

#[test]
fn unsupported_modern_version_is_32022() {
    let mut envelope = envelope();
    envelope["io.modelcontextprotocol/protocolVersion"] = json!("v999.0.0");
    let discover = message(json!({"jsonrpc":"2.0","id":301,"method":"server/discover","params":{"_meta":envelope}}));
    let h = headers(&[("mcp-protocol-version", "v999.0.0"), ("mcp-method", "server/discover")]);
    let error = detect(&h, &discover).expect_err("unsupported");
    assert_eq!(error.code(), -32022);
    assert_eq!(error.data().expect("data")["requested"], "v999.0.0");
}

#[test]
fn required_meta_fields_are_32602_at_400() {
    let h = headers(&[("mcp-protocol-version", "2026-07-28"), ("mcp-method", "server/discover")]);
    for params in [
        json!({}),
        json!({"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}}),
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}, "io.modelcontextprotocol/logLevel": "loud"}}),
    ] {
        let discover = message(json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":params}));
        let error = detect(&h, &discover).expect_err("invalid meta");
        assert_eq!((error.code(), error.status().as_u16()), (-32602, 400), "{params}");
    }
}

#[test]
fn modern_notifications_need_no_method_header() {
    let cancelled = message(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}));
    let h = headers(&[("mcp-protocol-version", "2026-07-28")]);
    assert_eq!(detect(&h, &cancelled).ok(), Some(Era::Modern));
}

#[test]
fn batches_only_in_2025_03_26() {
    let Body::Batch(items) = jsonrpc::parse(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#).expect("json") else {
        panic!("batch")
    };
    assert_eq!(detect_batch(&HeaderMap::new(), &items).ok(), Some(Era::Legacy { version: "2025-03-26" }));
    let h = headers(&[("mcp-protocol-version", "2025-03-26")]);
    assert!(detect_batch(&h, &items).is_ok());
    let h = headers(&[("mcp-protocol-version", "2025-06-18")]);
    assert_eq!(code(detect_batch(&h, &items)), -32600);
    let h = headers(&[("mcp-protocol-version", "2026-07-28")]);
    assert_eq!(code(detect_batch(&h, &items)), -32600);
}
