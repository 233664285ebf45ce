//! Era detection and the modern request checks, in the order the specification and the contract give:
//!
//! 1. `params._meta["io.modelcontextprotocol/protocolVersion"]` present, or an `MCP-Protocol-Version` header
//!    that is not a legacy revision → **modern**. Then: the header must be present and agree with `_meta`
//!    (-32020), name a served modern revision (-32022), `Mcp-Method` must mirror `method` (-32020),
//!    `Mcp-Name` must mirror `params.uri`/`params.name` after `=?base64?…?=` decoding (-32020), and `_meta`
//!    must carry the required fields (-32602). All of these answer HTTP 400.
//! 2. Otherwise **legacy**: the header, when present, must be a served legacy revision (-32022); without it
//!    (and without a session) the revision is 2025-03-26, the only one whose requests may be batched.

use std::borrow::Cow;

use axum::http::HeaderMap;
use serde_json::{Map, Value};

use super::error::McpError;
use super::headers::mirrored;
use super::jsonrpc::{Call, Malformed, Message};
use super::types::{
    DEFAULT_LEGACY_VERSION, LEGACY_VERSIONS, LOG_LEVELS, MODERN_VERSION, SUPPORTED_VERSIONS, header, is_legacy_version,
    meta,
};

/// Which protocol generation a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// 2026-07-28: stateless, per-request `_meta`, `resultType` and caching hints on results.
    Modern,
    /// 2024-11-05 … 2025-11-25: `initialize` handshake, no `resultType`.
    Legacy { version: &'static str },
}

impl Era {
    pub fn is_modern(self) -> bool {
        matches!(self, Era::Modern)
    }
}

/// The era of a single message, after the checks that era requires of its envelope and headers.
pub fn detect(headers: &HeaderMap, message: &Message) -> Result<Era, McpError> {
    let protocol = mirrored(headers, &header::PROTOCOL_VERSION, false)?;
    let meta = message.call().and_then(Call::params_object).and_then(|params| params.get("_meta"));
    let meta_version = meta.and_then(|meta| meta.get(meta::PROTOCOL_VERSION));
    let is_modern = meta_version.is_some() || protocol.as_deref().is_some_and(|version| !is_legacy_version(version));
    if !is_modern {
        return legacy(protocol);
    }
    let Some(protocol) = protocol else {
        return Err(McpError::HeaderMismatch("the MCP-Protocol-Version header is required".to_owned()));
    };
    match meta_version {
        None => {}
        Some(Value::String(version)) if *version == *protocol => {}
        Some(Value::String(version)) => {
            return Err(McpError::HeaderMismatch(format!(
                "MCP-Protocol-Version header {protocol:?} does not match _meta protocolVersion {version:?}"
            )));
        }
        Some(_) => return Err(McpError::InvalidMeta(format!("_meta {:?} must be a string", meta::PROTOCOL_VERSION))),
    }
    if protocol != MODERN_VERSION {
        return Err(McpError::UnsupportedVersion { requested: protocol.into_owned() });
    }
    match message {
        Message::Response => Err(McpError::InvalidRequest("2026-07-28 clients send no JSON-RPC responses".to_owned())),
        // Header requirements for notification POSTs are not defined by 2026-07-28; a mirrored header that
        // is present must still agree with the body.
        Message::Notification(call) => {
            if let Some(method) = mirrored(headers, &header::METHOD, false)? {
                check_method_header(&method, call)?;
            }
            Ok(Era::Modern)
        }
        Message::Request(call) => {
            let method = mirrored(headers, &header::METHOD, false)?
                .ok_or_else(|| McpError::HeaderMismatch("the Mcp-Method header is required".to_owned()))?;
            check_method_header(&method, call)?;
            check_name_header(headers, call)?;
            check_meta(meta)?;
            Ok(Era::Modern)
        }
    }
}

/// The era of a batch: batches exist only in 2025-03-26 (no protocol header, or that one).
pub fn detect_batch(headers: &HeaderMap, messages: &[Result<Message, Malformed>]) -> Result<Era, McpError> {
    match mirrored(headers, &header::PROTOCOL_VERSION, false)? {
        None => {}
        Some(version) if version == DEFAULT_LEGACY_VERSION => {}
        Some(version) if !SUPPORTED_VERSIONS.contains(&version.as_ref()) => {
            return Err(McpError::UnsupportedVersion { requested: version.into_owned() });
        }
        Some(version) => {
            return Err(McpError::InvalidRequest(format!("protocol version {version} does not allow batches")));
        }
    }
    let has_envelope = messages.iter().flatten().filter_map(Message::call).any(|call| {
        call.params_object()
            .and_then(|params| params.get("_meta"))
            .and_then(|m| m.get(meta::PROTOCOL_VERSION))
            .is_some()
    });
    if has_envelope {
        return Err(McpError::InvalidRequest(format!("protocol version {MODERN_VERSION} does not allow batches")));
    }
    Ok(Era::Legacy { version: DEFAULT_LEGACY_VERSION })
}

/// The era of a request of a session negotiated at `version` that names no version itself.
pub fn of_session(version: &str) -> Option<Era> {
    LEGACY_VERSIONS.iter().find(|known| **known == version).map(|version| Era::Legacy { version })
}

fn legacy(protocol: Option<Cow<'_, str>>) -> Result<Era, McpError> {
    // Without a header the default is 2025-03-26; a session's negotiated version replaces it (`of_session`).
    let Some(protocol) = protocol else {
        return Ok(Era::Legacy { version: DEFAULT_LEGACY_VERSION });
    };
    LEGACY_VERSIONS
        .iter()
        .find(|version| **version == protocol.as_ref())
        .map(|version| Era::Legacy { version })
        .ok_or_else(|| McpError::UnsupportedVersion { requested: protocol.into_owned() })
}

fn check_method_header(method: &str, call: &Call) -> Result<(), McpError> {
    if method == call.method {
        return Ok(());
    }
    Err(McpError::HeaderMismatch(format!(
        "Mcp-Method header value {method:?} does not match body value {:?}",
        call.method
    )))
}

/// The body field `Mcp-Name` mirrors for `method`, if any.
fn named_param(method: &str) -> Option<&'static str> {
    match method {
        "resources/read" => Some("uri"),
        "prompts/get" | "tools/call" => Some("name"),
        _ => None,
    }
}

fn check_name_header(headers: &HeaderMap, call: &Call) -> Result<(), McpError> {
    let Some(field) = named_param(&call.method) else {
        return Ok(());
    };
    // A missing or non-string body value is the method's -32602 to report, not a header mismatch.
    let Some(body) = call.params_object().and_then(|params| params.get(field)).and_then(Value::as_str) else {
        return Ok(());
    };
    match mirrored(headers, &header::NAME, true)? {
        Some(name) if name == body => Ok(()),
        Some(name) => {
            Err(McpError::HeaderMismatch(format!("Mcp-Name header value {name:?} does not match body value {body:?}")))
        }
        None => Err(McpError::HeaderMismatch(format!("the Mcp-Name header is required for {}", call.method))),
    }
}

/// The required per-request fields of `_meta` (a missing one is -32602 with HTTP 400).
fn check_meta(meta: Option<&Value>) -> Result<(), McpError> {
    let Some(meta) = meta.and_then(Value::as_object) else {
        return Err(McpError::InvalidMeta("params._meta is required on 2026-07-28 requests".to_owned()));
    };
    require(meta, meta::PROTOCOL_VERSION, Value::is_string)?;
    require(meta, meta::CLIENT_CAPABILITIES, Value::is_object)?;
    if meta.get(meta::CLIENT_INFO).is_some_and(|info| !info.is_object()) {
        return Err(McpError::InvalidMeta(format!("_meta {:?} must be an object", meta::CLIENT_INFO)));
    }
    if let Some(level) = meta.get(meta::LOG_LEVEL)
        && !level.as_str().is_some_and(|level| LOG_LEVELS.contains(&level))
    {
        return Err(McpError::InvalidMeta(format!("_meta {:?} is not a log level", meta::LOG_LEVEL)));
    }
    Ok(())
}

fn require(meta: &Map<String, Value>, key: &str, is_valid: fn(&Value) -> bool) -> Result<(), McpError> {
    match meta.get(key) {
        Some(value) if is_valid(value) => Ok(()),
        Some(_) => Err(McpError::InvalidMeta(format!("_meta {key:?} has the wrong type"))),
        None => Err(McpError::InvalidMeta(format!("_meta {key:?} is required"))),
    }
}

#[cfg(test)]
#[path = "era_tests.rs"]
mod tests;
