//! Request headers of the Streamable HTTP transport: reading `Mcp-Method`/`Mcp-Name` (with the
//! `=?base64?…?=` sentinel encoding) and choosing the response format from `Accept`.

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
    match (accept.allows(&JSON_RANGES), accept.allows(&EVENT_STREAM_RANGES)) {
        (true, _) => Ok(ReplyFormat::Json),
        (false, true) => Ok(ReplyFormat::EventStream),
        (false, false) => Err(McpError::NotAcceptable),
    }
}

/// Whether `Accept` allows an event stream (absent allows anything): a `GET` stream or a listen needs it.
pub fn accepts_event_stream(headers: &HeaderMap) -> bool {
    Accept::of(headers).is_none_or(|accept| accept.allows(&EVENT_STREAM_RANGES))
}

/// The `Accept` of a request: the media ranges it names whose `q` is above zero, lower-cased. The one
/// place `Accept` is parsed.
struct Accept {
    allowed: Vec<String>,
}

impl Accept {
    /// `None` when the request names no media range (no `Accept`, or an empty one): anything goes.
    fn of(headers: &HeaderMap) -> Option<Self> {
        let mut ranges = headers
            .get_all(axum::http::header::ACCEPT)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .filter_map(media_range)
            .peekable();
        ranges.peek()?;
        Some(Self { allowed: ranges.filter(|(_, quality_allows)| *quality_allows).map(|(range, _)| range).collect() })
    }

    /// Whether it allows any of `ranges`.
    fn allows(&self, ranges: &[&str]) -> bool {
        self.allowed.iter().any(|range| ranges.contains(&range.as_str()))
    }
}

/// One `Accept` member: the lower-cased media range and whether its `q` is above zero.
fn media_range(member: &str) -> Option<(String, bool)> {
    let mut parts = member.split(';');
    let range = parts.next()?.trim().to_ascii_lowercase();
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
pub fn mirrored(headers: &HeaderMap, name: &HeaderName, encoded: bool) -> Result<Option<String>, McpError> {
    let Some(value) = headers.get(name) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| McpError::HeaderMismatch(format!("{name} header contains characters outside visible ASCII")))?;
    if !encoded {
        return Ok(Some(text.to_owned()));
    }
    decode_sentinel(text).map(Some).ok_or_else(|| McpError::HeaderMismatch(format!("{name} header is malformed")))
}

/// Decodes `=?base64?{value}?=` (markers case-sensitive, as the specification says); plain values pass through.
pub fn decode_sentinel(value: &str) -> Option<String> {
    match value.strip_prefix("=?base64?").and_then(|rest| rest.strip_suffix("?=")) {
        Some(encoded) => STANDARD.decode(encoded).ok().and_then(|bytes| String::from_utf8(bytes).ok()),
        None => Some(value.to_owned()),
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
