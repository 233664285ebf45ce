//! Request headers of the Streamable HTTP transport: reading `Mcp-Method`/`Mcp-Name` (with the
//! `=?base64?…?=` sentinel encoding) and choosing the response format from `Accept`.

use std::borrow::Cow;

use axum::http::{HeaderMap, HeaderName};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::error::McpError;

/// How a 200 answer is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyFormat {
    /// `application/json`: preferred whenever the client accepts it (curl's `*/*` does).
    Json,
    /// `text/event-stream` with the one response as its only event: for clients that accept nothing else.
    EventStream,
}

/// The media ranges that answer with JSON.
const JSON_RANGES: [&str; 3] = ["application/json", "application/*", "*/*"];
/// The media ranges that take an event stream.
const EVENT_STREAM_RANGES: [&str; 3] = ["text/event-stream", "text/*", "*/*"];

/// The response format `Accept` allows; absent means anything. 406 when it allows neither JSON nor SSE.
pub fn reply_format(headers: &HeaderMap) -> Result<ReplyFormat, McpError> {
    let Some(accept) = Accept::of(headers) else {
        return Ok(ReplyFormat::Json);
    };
    match (accept.json, accept.event_stream) {
        (true, _) => Ok(ReplyFormat::Json),
        (false, true) => Ok(ReplyFormat::EventStream),
        (false, false) => Err(McpError::NotAcceptable),
    }
}

/// Whether `Accept` allows an event stream (absent allows anything): a `GET` stream or a listen needs it.
pub fn accepts_event_stream(headers: &HeaderMap) -> bool {
    Accept::of(headers).is_none_or(|accept| accept.event_stream)
}

/// What the `Accept` of a request allows: whether one of the media ranges it names with a `q` above zero
/// answers with JSON, and whether one takes an event stream. The one place `Accept` is parsed; read in
/// place, since every MCP request carries it.
#[derive(Debug, PartialEq, Eq)]
struct Accept {
    json: bool,
    event_stream: bool,
}

impl Accept {
    /// `None` when the request names no media range (no `Accept`, or an empty one): anything goes.
    fn of(headers: &HeaderMap) -> Option<Self> {
        let mut values = headers.get_all(axum::http::header::ACCEPT).iter();
        // One field with a value clients send on every request is answered without parsing it: splitting,
        // trimming and comparing its ranges took about 1,500 instructions a request (bench/README.md).
        if let (Some(value), None) = (values.next(), values.next())
            && let Some(accept) = Self::common(value.as_bytes())
        {
            return Some(accept);
        }
        Self::parse(headers)
    }

    /// What [`Accept::parse`] makes of the values the MCP clients send, spelled exactly as they send them
    /// (a test checks that the two agree); `None` for any other value.
    fn common(value: &[u8]) -> Option<Self> {
        let (json, event_stream) = match value {
            b"application/json, text/event-stream" | b"text/event-stream, application/json" => (true, true),
            b"application/json" => (true, false),
            b"text/event-stream" => (false, true),
            b"*/*" => (true, true),
            _ => return None,
        };
        Some(Self { json, event_stream })
    }

    /// Every media range of every `Accept` field (see [`Accept::of`]).
    fn parse(headers: &HeaderMap) -> Option<Self> {
        let mut named = false;
        let mut accept = Self { json: false, event_stream: false };
        let values = headers.get_all(axum::http::header::ACCEPT).iter().filter_map(|value| value.to_str().ok());
        for (range, quality_allows) in values.flat_map(|value| value.split(',')).filter_map(media_range) {
            named = true;
            if quality_allows {
                let is = |ranges: &[&str]| ranges.iter().any(|known| range.eq_ignore_ascii_case(known));
                accept.json |= is(&JSON_RANGES);
                accept.event_stream |= is(&EVENT_STREAM_RANGES);
            }
        }
        named.then_some(accept)
    }
}

/// One `Accept` member: the media range (compared without regard to case) and whether its `q` is above zero.
fn media_range(member: &str) -> Option<(&str, bool)> {
    let mut parts = member.split(';');
    let range = parts.next()?.trim();
    if range.is_empty() {
        return None;
    }
    let quality_allows = parts
        .filter_map(|param| param.trim().split_once('='))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("q"))
        .is_none_or(|(_, q)| q.trim().parse::<f32>().is_ok_and(|q| q > 0.0));
    Some((range, quality_allows))
}

/// The value of a mirrored header, decoded: `None` when absent; a -32020 error when it is not visible ASCII
/// or a malformed `=?base64?…?=` value. `encoded` says whether the sentinel encoding applies (`Mcp-Name`).
/// Borrowed from the header unless it was encoded.
pub fn mirrored<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
    encoded: bool,
) -> Result<Option<Cow<'a, str>>, McpError> {
    let Some(value) = headers.get(name) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| McpError::HeaderMismatch(format!("{name} header contains characters outside visible ASCII")))?;
    if !encoded {
        return Ok(Some(Cow::Borrowed(text)));
    }
    decode_sentinel(text).map(Some).ok_or_else(|| McpError::HeaderMismatch(format!("{name} header is malformed")))
}

/// Decodes `=?base64?{value}?=` (markers case-sensitive, as the specification says); plain values pass through.
pub fn decode_sentinel(value: &str) -> Option<Cow<'_, str>> {
    match value.strip_prefix("=?base64?").and_then(|rest| rest.strip_suffix("?=")) {
        Some(encoded) => STANDARD.decode(encoded).ok().and_then(|bytes| String::from_utf8(bytes).ok()).map(Cow::Owned),
        None => Some(Cow::Borrowed(value)),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn accept(value: &str) -> Result<ReplyFormat, McpError> {
        reply_format(&with("accept", value))
    }

    #[test]
    fn accept_negotiation() {
        assert_eq!(reply_format(&HeaderMap::new()).ok(), Some(ReplyFormat::Json));
        assert_eq!(accept("*/*").ok(), Some(ReplyFormat::Json));
        assert_eq!(accept("application/json, text/event-stream").ok(), Some(ReplyFormat::Json));
        assert_eq!(accept("text/event-stream").ok(), Some(ReplyFormat::EventStream));
        assert_eq!(accept("application/json;q=0, text/event-stream").ok(), Some(ReplyFormat::EventStream));
        assert!(matches!(accept("text/html"), Err(McpError::NotAcceptable)));
        assert_eq!(accept("Application/JSON; charset=utf-8").ok(), Some(ReplyFormat::Json));
        assert_eq!(accept("TEXT/Event-Stream").ok(), Some(ReplyFormat::EventStream));
        assert_eq!(accept("application/json;q=0, */*;q=0.1").ok(), Some(ReplyFormat::Json));
        assert_eq!(accept(" , text/*").ok(), Some(ReplyFormat::EventStream));
        assert!(matches!(accept("application/json;q=0, text/event-stream;Q=0"), Err(McpError::NotAcceptable)));
        // Named, but nothing with a `q` above zero: neither format, not "anything".
        assert!(matches!(accept("*/*;q=0"), Err(McpError::NotAcceptable)));
        assert_eq!(accept(" , ").ok(), Some(ReplyFormat::Json), "no media range named");
    }

    /// The values answered without parsing are answered as parsing answers them, and a value that only
    /// resembles one of them (case, spaces, a parameter, a second field) is parsed.
    #[test]
    fn common_accept_values_agree_with_the_parser() {
        for value in [
            "application/json, text/event-stream",
            "text/event-stream, application/json",
            "application/json",
            "text/event-stream",
            "*/*",
        ] {
            let headers = with("accept", value);
            let common = Accept::common(value.as_bytes());
            assert!(common.is_some(), "{value}");
            assert_eq!(common, Accept::parse(&headers), "{value}");
            assert_eq!(Accept::of(&headers), Accept::parse(&headers), "{value}");
        }
        for value in ["Application/JSON", "application/json,text/event-stream", "application/json;q=0", "text/*"] {
            assert!(Accept::common(value.as_bytes()).is_none(), "{value}");
        }
        let mut twice = with("accept", "application/json");
        twice.append("accept", HeaderValue::from_static("text/event-stream"));
        assert_eq!(Accept::of(&twice), Some(Accept { json: true, event_stream: true }), "both fields count");
        assert_eq!(accept("application/json;q=0").ok(), None, "a parameter is parsed: q=0 refuses JSON");
    }

    /// Headers holding `name: value`.
    pub(crate) fn with(name: &'static str, value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_str(value).expect("header value"));
        headers
    }

    #[test]
    fn accept_for_streams() {
        assert!(accepts_event_stream(&HeaderMap::new()));
        assert!(accepts_event_stream(&with("accept", "text/event-stream")));
        assert!(accepts_event_stream(&with("accept", "application/json, */*")));
        assert!(!accepts_event_stream(&with("accept", "application/json")));
        assert!(!accepts_event_stream(&with("accept", "text/event-stream;q=0")));
    }

    #[test]
    fn sentinel_values() {
        assert_eq!(decode_sentinel("us-west1").as_deref(), Some("us-west1"));
        assert_eq!(decode_sentinel("=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(), Some("Hello, 世界"));
        assert_eq!(decode_sentinel("=?base64?IHBhZGRlZCA=?=").as_deref(), Some(" padded "));
        assert_eq!(decode_sentinel("=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=").as_deref(), Some("=?base64?literal?="));
        assert_eq!(decode_sentinel("=?base64?!!!?="), None);
        assert_eq!(decode_sentinel("=?base64?/w==?="), None, "not UTF-8");
        assert_eq!(
            decode_sentinel("=?BASE64?SGk=?=").as_deref(),
            Some("=?BASE64?SGk=?="),
            "markers are case-sensitive"
        );
    }

    #[test]
    fn mirrored_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("mcp-name", HeaderValue::from_static("=?base64?dGVzdDovL3N0YXRpYy10ZXh0?="));
        headers.insert("mcp-method", HeaderValue::from_static("resources/read"));
        assert_eq!(
            mirrored(&headers, &HeaderName::from_static("mcp-name"), true).ok().flatten().as_deref(),
            Some("test://static-text")
        );
        assert_eq!(
            mirrored(&headers, &HeaderName::from_static("mcp-method"), false).ok().flatten().as_deref(),
            Some("resources/read")
        );
        assert!(matches!(mirrored(&headers, &HeaderName::from_static("mcp-other"), true), Ok(None)));
        headers.insert("mcp-name", HeaderValue::from_bytes(b"caf\xc3\xa9").expect("obs-text"));
        assert!(matches!(
            mirrored(&headers, &HeaderName::from_static("mcp-name"), true),
            Err(McpError::HeaderMismatch(_))
        ));
    }
}
