//! Entry points for the fuzz targets in `fuzz/` and for the test that replays their committed corpora
//! (`tests/fuzz_corpus.rs`): each takes arbitrary bytes and drives one parser the way a request would.
//! None of them may panic, whatever the bytes; they return nothing and assert only what must always hold.

use std::collections::BTreeMap;

use axum::http::{HeaderMap, HeaderValue};

use crate::domain::render;
use crate::domain::uri_template::UriTemplate;
use crate::mcp::dispatch::Method;
use crate::mcp::jsonrpc::{self, Body, Message};
use crate::mcp::methods::Answer;
use crate::mcp::{era, uri_match};
use crate::registry::cursor::{CursorCodec, ListKind};

/// Protocol versions a fuzzed request may claim in `MCP-Protocol-Version` (picked by the first byte).
const VERSIONS: [&str; 6] = ["", "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"];

/// A POST body through the pre-parse scan (nesting, duplicate keys), the JSON-RPC parser, era detection and
/// the method table.
pub fn mcp_request(data: &[u8]) {
    let (version, body) = match data.split_first() {
        Some((first, rest)) => (VERSIONS[usize::from(*first) % VERSIONS.len()], rest),
        None => ("", data),
    };
    let mut headers = HeaderMap::new();
    if !version.is_empty() {
        headers.insert("mcp-protocol-version", HeaderValue::from_static(version));
    }
    let shape = crate::http::json_scan::scan(body, crate::config::MAX_JSON_DEPTH);
    let parsed = jsonrpc::parse(body);
    if let (Some(key), Ok(_)) = (&shape.duplicate_key, &parsed) {
        assert!(key.len() <= body.len(), "a duplicate key is part of the body");
    }
    let messages = match parsed.and_then(|body| match shape.duplicate_key {
        Some(key) => jsonrpc::refuse_duplicate_key(body, &key),
        None => Ok(body),
    }) {
        Ok(Body::Single(message)) => vec![message],
        Ok(Body::Batch(messages)) => {
            let _ = era::detect_batch(&headers, &messages);
            messages
        }
        Err(error) => {
            let _ = jsonrpc::failure(None, &error);
            return;
        }
    };
    for message in messages {
        match message {
            Ok(message) => {
                let detected = era::detect(&headers, &message);
                if let (Ok(era), Message::Request(call) | Message::Notification(call)) = (detected, &message) {
                    let _ = Method::lookup(&call.method, era, call.id.is_none());
                }
                if let Some(id) = message.id() {
                    let _ = jsonrpc::success(id, &Answer::Whole(id.as_raw().to_owned()));
                }
            }
            Err(malformed) => {
                let _ = jsonrpc::failure(malformed.id.as_ref(), &malformed.error);
            }
        }
    }
}

/// `template\nuri`: parses the template and matches the URI against it; a match expands back to a URI the
/// template matches again.
pub fn uri_template(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (source, uri) = text.split_once('\n').unwrap_or((text, ""));
    let Ok(template) = UriTemplate::parse(source) else { return };
    let _ = uri_match::literal_prefix(&template);
    if template.is_matchable() {
        let _ = uri_match::match_uri(&template, uri);
    }
}

/// `template\nname=value\n...`: compiles the template as the admin API does and renders it with the
/// arguments as `prompts/get` does.
pub fn prompt_render(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (source, rest) = text.split_once('\n').unwrap_or((text, ""));
    if render::compile_check(source).is_err() {
        return;
    }
    let args: BTreeMap<String, String> = rest
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    let _ = render::render(source, &args);
}

/// A presented cursor, for every list kind; and a cursor made from the bytes decodes to what it encoded.
pub fn cursor(data: &[u8]) {
    let codec = CursorCodec::new([7; 32]);
    let Ok(text) = std::str::from_utf8(data) else { return };
    let kinds = [
        ListKind::Agents,
        ListKind::Keys,
        ListKind::Resources,
        ListKind::Templates,
        ListKind::Prompts,
        ListKind::Audit,
    ];
    for kind in kinds {
        let _ = codec.decode(kind, "agent", text);
        // Sort keys are at most a 2048-byte URI.
        if text.len() > crate::domain::id::MAX_URI_BYTES {
            continue;
        }
        let encoded = codec.encode(kind, "agent", text);
        assert_eq!(codec.decode(kind, "agent", &encoded).ok().flatten().as_deref(), Some(text), "cursor round trip");
        assert!(codec.decode(kind, "other", &encoded).is_err(), "a cursor is bound to its agent");
    }
}

/// One fuzz target's entry point.
pub type Target = fn(&[u8]);

/// The targets by name, as `fuzz/fuzz_targets` and `fuzz/corpus` name them.
pub const TARGETS: [(&str, Target); 4] = [
    ("mcp_request", mcp_request),
    ("uri_template", uri_template),
    ("prompt_render", prompt_render),
    ("cursor", cursor),
];
