//! W3C Trace Context as a request carries it: the `traceparent` and `tracestate` HTTP headers, or the same
//! keys in an MCP message's `params._meta` (reserved there by the MCP specification, 2026-07-28, "OpenTelemetry
//! trace context"). Parsed in every build: the audit log records the trace a request belongs to, and with the
//! `otel` feature the request's spans join it.
//!
//! A malformed `traceparent` is ignored, as W3C Trace Context asks, and so is a `tracestate` without one.
//! Upper-case hex digits are accepted and normalised to lower case.

use axum::http::{HeaderMap, HeaderName};
use serde_json::{Map, Value};

/// The `traceparent` key, in headers and in `_meta`.
pub const TRACEPARENT: &str = "traceparent";
/// The `tracestate` key, in headers and in `_meta`.
pub const TRACESTATE: &str = "tracestate";
/// The header names, as `HeaderName`s: a lookup by one does not parse the name again.
pub const TRACEPARENT_HEADER: HeaderName = HeaderName::from_static(TRACEPARENT);
const TRACESTATE_HEADER: HeaderName = HeaderName::from_static(TRACESTATE);

/// The longest `tracestate` kept (W3C: 32 members of at most 256 characters could be more; vendors may
/// drop what does not fit, and a longer value is not propagated at all).
const MAX_TRACESTATE: usize = 512;

/// A caller's span, from a well-formed `traceparent`, with the `tracestate` that came with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    flags: u8,
    state: Option<String>,
}

impl TraceParent {
    /// Parses a `traceparent` value: `<version>-<32 hex trace id>-<16 hex span id>-<2 hex flags>`. Version
    /// `00` has exactly these four fields; a later version may append more after a `-`, which are ignored;
    /// version `ff` is invalid, and so are all-zero ids.
    pub fn parse(value: &str) -> Option<Self> {
        let value = value.trim_matches([' ', '\t']);
        let bytes = value.as_bytes();
        let version = hex_byte(bytes.get(0..2)?)?;
        let fixed_length = value.len() == 55;
        let is_well_framed = match version {
            0xff => false,
            0x00 => fixed_length,
            _ => fixed_length || (value.len() > 55 && bytes[55] == b'-'),
        };
        if !is_well_framed || bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return None;
        }
        let mut trace_id = [0u8; 16];
        hex::decode_to_slice(&bytes[3..35], &mut trace_id).ok()?;
        let mut span_id = [0u8; 8];
        hex::decode_to_slice(&bytes[36..52], &mut span_id).ok()?;
        let flags = hex_byte(&bytes[53..55])?;
        let is_valid = trace_id.iter().any(|b| *b != 0) && span_id.iter().any(|b| *b != 0);
        is_valid.then_some(Self { trace_id, span_id, flags, state: None })
    }

    /// The trace context of HTTP request headers. Several `tracestate` headers are one list, joined by
    /// commas in order.
    pub fn from_headers(headers: &HeaderMap) -> Option<Self> {
        let mut parents = headers.get_all(&TRACEPARENT_HEADER).iter();
        let parent = parents.next()?.to_str().ok()?;
        if parents.next().is_some() {
            // Two `traceparent` headers: W3C asks to ignore both.
            return None;
        }
        let states: Option<Vec<&str>> = headers.get_all(&TRACESTATE_HEADER).iter().map(|v| v.to_str().ok()).collect();
        let state = states.map(|states| states.join(","));
        Some(Self::parse(parent)?.with_state(state.as_deref()))
    }

    /// The trace context of an MCP message's `params._meta`: the string values of `traceparent` and
    /// `tracestate`.
    pub fn from_meta(params: Option<&Map<String, Value>>) -> Option<Self> {
        let meta = params?.get("_meta")?.as_object()?;
        let parent = meta.get(TRACEPARENT)?.as_str()?;
        let state = meta.get(TRACESTATE).and_then(Value::as_str);
        Some(Self::parse(parent)?.with_state(state))
    }

    fn with_state(mut self, state: Option<&str>) -> Self {
        self.state = state.map(str::trim).filter(|s| !s.is_empty() && s.len() <= MAX_TRACESTATE).map(str::to_owned);
        self
    }

    /// The trace id, as 32 lower-case hex digits (the audit record's `traceId`).
    pub fn trace_id_hex(&self) -> String {
        crate::domain::hex(self.trace_id)
    }

    pub fn trace_id(&self) -> [u8; 16] {
        self.trace_id
    }

    /// The caller's span id: the parent of the span that joins this trace.
    pub fn span_id(&self) -> [u8; 8] {
        self.span_id
    }

    /// Whether the caller recorded its span (the `sampled` flag).
    pub fn is_sampled(&self) -> bool {
        self.flags & 0x01 != 0
    }

    /// The vendors' `tracestate` list, unparsed.
    pub fn state(&self) -> Option<&str> {
        self.state.as_deref()
    }
}

fn hex_byte(digits: &[u8]) -> Option<u8> {
    let mut byte = [0u8; 1];
    hex::decode_to_slice(digits, &mut byte).ok()?;
    Some(byte[0])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn well_formed_traceparents_are_read() {
        let parent = TraceParent::parse(PARENT).expect("the W3C example");
        assert_eq!(parent.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(parent.span_id(), [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
        assert!(parent.is_sampled());
        let upper = TraceParent::parse("00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-00").expect("upper case");
        assert_eq!(upper.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(!upper.is_sampled());
        // A later version may carry more fields, which this version ignores.
        let later = TraceParent::parse(&format!("cc{}-what-the-future-holds", &PARENT[2..])).expect("version cc");
        assert_eq!(later.trace_id_hex(), parent.trace_id_hex());
        assert!(TraceParent::parse(&format!(" {PARENT} ")).is_some(), "surrounding blanks are allowed");
    }

    #[test]
    fn malformed_traceparents_are_ignored() {
        for value in [
            "",
            "garbage",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-011",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0é",
            "é0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4é-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47é6-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(value), None, "{value:?}");
        }
    }

    #[test]
    fn headers_carry_the_parent_and_its_state() {
        let mut headers = HeaderMap::new();
        assert_eq!(TraceParent::from_headers(&headers), None);
        headers.insert(TRACESTATE, "rojo=00f067aa0ba902b7".parse().unwrap());
        assert_eq!(TraceParent::from_headers(&headers), None, "a tracestate alone is no context");
        headers.insert(TRACEPARENT, PARENT.parse().unwrap());
        headers.append(TRACESTATE, "congo=t61rcWkgMzE".parse().unwrap());
        let parent = TraceParent::from_headers(&headers).expect("a context");
        assert_eq!(parent.state(), Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"));
        headers.append(TRACEPARENT, PARENT.parse().unwrap());
        assert_eq!(TraceParent::from_headers(&headers), None, "two traceparents are ignored");
    }

    #[test]
    fn meta_carries_the_parent_and_its_state() {
        let params = json!({
            "uri": "a://b",
            "_meta": { "traceparent": PARENT, "tracestate": "rojo=00f067aa0ba902b7" }
        });
        let parent = TraceParent::from_meta(params.as_object()).expect("a context");
        assert_eq!(parent.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(parent.state(), Some("rojo=00f067aa0ba902b7"));
        for params in [
            json!({}),
            json!({ "_meta": null }),
            json!({ "_meta": { "traceparent": 7 } }),
            json!({ "_meta": { "traceparent": "garbage", "tracestate": "rojo=1" } }),
            json!({ "traceparent": PARENT }),
            json!({ "_meta": { "io.modelcontextprotocol/traceparent": PARENT } }),
        ] {
            assert_eq!(TraceParent::from_meta(params.as_object()), None, "{params}");
        }
        assert_eq!(TraceParent::from_meta(None), None);
        let long = json!({ "_meta": { "traceparent": PARENT, "tracestate": "a=".repeat(300) } });
        assert_eq!(TraceParent::from_meta(long.as_object()).expect("a context").state(), None, "too long a state");
    }
}
