//! DNS-rebinding protection (required by the Streamable HTTP transport): the `Host` and, when present, the
//! `Origin` of every request to the MCP endpoint must be loopback names or on the configured allow-lists
//! (`mcp.allowed_hosts`, `mcp.allowed_origins`; an entry `*` allows any). Anything else is 403, and so is a
//! `Host` or `Origin` given twice or not well-formed ([`single_host`], [`single_origin`]), whatever the
//! allow-lists say: with two values, which one a check saw and which one a proxy or browser acted on could
//! differ. Other routes refuse the same fields with 400 ([`crate::http::request_limits::refuse_head`]).
//!
//! [`single_host`]: crate::mcp::origin::single_host
//! [`single_origin`]: crate::mcp::origin::single_origin

use std::cell::RefCell;

use axum::http::uri::Authority;
use axum::http::{HeaderMap, HeaderName, Uri, header};

use super::error::McpError;
use crate::config::McpConfig;

/// Why a `Host` or `Origin` is refused whatever the allow-lists say; `Display` is the detail the refusal
/// gives.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderFieldError {
    #[error("the {0} header field is given more than once")]
    Repeated(HeaderName),
    #[error("the {0} header field is not visible ASCII")]
    NotVisibleAscii(HeaderName),
    #[error("Host {0:?} is not a host name or address with an optional port")]
    NotAHost(String),
    #[error("Origin {0:?} is not a serialized origin")]
    NotAnOrigin(String),
}

/// Checks `Host` (or the URI authority for HTTP/2) and `Origin`. A request without a `Host` passes: a
/// browser, the only client a rebinding attack can drive, always sends one.
pub fn check(headers: &HeaderMap, uri: &Uri, config: &McpConfig) -> Result<(), McpError> {
    let host = single_host(headers).map_err(|error| McpError::OriginNotAllowed(error.to_string()))?;
    let host = host.or_else(|| uri.authority().map(Authority::as_str));
    if let Some(host) = host
        && !is_allowed_host(host, &config.allowed_hosts)
    {
        return Err(McpError::OriginNotAllowed(format!("Host {host:?} is not allowed")));
    }
    if let Some(origin) = single_origin(headers).map_err(|error| McpError::OriginNotAllowed(error.to_string()))?
        && !is_allowed_origin(origin, &config.allowed_origins)
    {
        return Err(McpError::OriginNotAllowed(format!("Origin {origin:?} is not allowed")));
    }
    Ok(())
}

/// The request's `Host`, if it has one; an error (saying why) when it has several, or one that is not
/// `host[:port]` (RFC 9110 §7.2: no user information, no path, a numeric port).
pub fn single_host(headers: &HeaderMap) -> Result<Option<&str>, HeaderFieldError> {
    let Some(host) = single(headers, header::HOST)? else { return Ok(None) };
    if is_known_authority(host) { Ok(Some(host)) } else { Err(HeaderFieldError::NotAHost(host.to_owned())) }
}

thread_local! {
    /// The last `Host` this thread found to be an authority. A client sends the same `Host` with every
    /// request, and parsing it copies it into an `Authority` of its own: comparing with the last one is a
    /// `memcmp`. Whether a text is an authority depends on the text alone, never on the configuration.
    static LAST_AUTHORITY: RefCell<String> = const { RefCell::new(String::new()) };
}

/// [`is_authority`], answered from [`LAST_AUTHORITY`] when `text` is the last authority this thread saw.
fn is_known_authority(text: &str) -> bool {
    LAST_AUTHORITY.with_borrow_mut(|last| {
        if !last.is_empty() && last == text {
            return true;
        }
        let is_authority = is_authority(text);
        if is_authority {
            last.clear();
            last.push_str(text);
        }
        is_authority
    })
}

/// The request's `Origin`, if it has one; an error (saying why) when it has several, or one that is neither
/// `null` nor `scheme://host[:port]` (RFC 6454 §7).
pub fn single_origin(headers: &HeaderMap) -> Result<Option<&str>, HeaderFieldError> {
    let Some(origin) = single(headers, header::ORIGIN)? else { return Ok(None) };
    let is_origin = origin == "null"
        || origin.split_once("://").is_some_and(|(scheme, authority)| {
            scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
                && is_authority(authority)
        });
    if is_origin { Ok(Some(origin)) } else { Err(HeaderFieldError::NotAnOrigin(origin.to_owned())) }
}

/// The one value of the field `name`, if present; an error when it is given more than once or is not
/// visible ASCII.
fn single(headers: &HeaderMap, name: HeaderName) -> Result<Option<&str>, HeaderFieldError> {
    let mut values = headers.get_all(&name).iter();
    let Some(value) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(HeaderFieldError::Repeated(name));
    }
    value.to_str().map(Some).map_err(|_| HeaderFieldError::NotVisibleAscii(name))
}

/// `host[:port]`: an authority without user information, with a port of at most 5 digits if any.
fn is_authority(text: &str) -> bool {
    let Ok(authority) = text.parse::<Authority>() else { return false };
    let host = authority.host();
    if host.is_empty() || text.contains('@') {
        return false;
    }
    match text.strip_prefix(host) {
        Some("") => true,
        Some(rest) => rest
            .strip_prefix(':')
            .is_some_and(|port| port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u16>().is_ok()),
        None => false,
    }
}

fn is_allowed_host(host: &str, allowed: &[String]) -> bool {
    let (name, _) = split_port(host);
    is_loopback(name)
        || allowed
            .iter()
            .any(|entry| entry == "*" || entry.eq_ignore_ascii_case(host) || entry.eq_ignore_ascii_case(name))
}

/// Whether `origin` is a loopback origin or on `allowed`.
fn is_allowed_origin(origin: &str, allowed: &[String]) -> bool {
    if is_listed_origin(origin, allowed) {
        return true;
    }
    let Some((scheme, authority)) = origin.split_once("://") else {
        return false;
    };
    let (name, _) = split_port(authority);
    matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") && !authority.contains('/') && is_loopback(name)
}

/// Whether `origin` is on `allowed` (`*` allows any): the origins CORS answers ([`crate::http::cors`]).
/// Loopback origins the endpoint accepts without CORS, so that a page served from localhost cannot read
/// answers unless its origin is listed.
pub(crate) fn is_listed_origin(origin: &str, allowed: &[String]) -> bool {
    allowed.iter().any(|entry| entry == "*" || entry.trim_end_matches('/').eq_ignore_ascii_case(origin))
}

/// `localhost`, any `127.x.y.z` and `[::1]` (with or without brackets).
fn is_loopback(name: &str) -> bool {
    let name = name.trim_end_matches('.');
    if name.eq_ignore_ascii_case("localhost") || name == "[::1]" || name == "::1" {
        return true;
    }
    name.parse::<std::net::Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// `host[:port]` → (`host`, port); an IPv6 literal keeps its brackets.
fn split_port(authority: &str) -> (&str, Option<&str>) {
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(end) => (&authority[..=end], authority[end + 1..].strip_prefix(':')),
            None => (authority, None),
        };
    }
    match authority.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') => (name, Some(port)),
        _ => (authority, None),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn request(host: Option<&str>, origin: Option<&str>, config: &McpConfig) -> Result<(), McpError> {
        let mut headers = HeaderMap::new();
        if let Some(host) = host {
            headers.insert(header::HOST, HeaderValue::from_str(host).expect("host"));
        }
        if let Some(origin) = origin {
            headers.insert(header::ORIGIN, HeaderValue::from_str(origin).expect("origin"));
        }
        check(&headers, &Uri::from_static("/a/mcp"), config)
    }

    #[test]
    fn loopback_is_allowed_by_default() {
        let config = McpConfig::default();
        for host in ["localhost", "localhost:8080", "127.0.0.1:3000", "127.1.2.3", "[::1]:80", "LOCALHOST"] {
            assert!(request(Some(host), None, &config).is_ok(), "{host}");
        }
        assert!(request(None, None, &config).is_ok());
        assert!(request(Some("localhost"), Some("http://localhost:5173"), &config).is_ok());
        assert!(request(Some("localhost"), Some("https://[::1]"), &config).is_ok());
    }

    #[test]
    fn rebinding_is_refused() {
        let config = McpConfig::default();
        assert!(request(Some("evil.example.com"), None, &config).is_err());
        assert!(request(Some("localhost:8080"), Some("http://evil.example.com"), &config).is_err());
        assert!(request(Some("localhost"), Some("null"), &config).is_err());
        assert!(request(Some("localhost.evil.com"), None, &config).is_err());
        assert!(request(Some("127.0.0.1.evil.com"), None, &config).is_err());
    }

    #[test]
    fn duplicate_or_malformed_fields_are_refused() {
        let open =
            McpConfig { allowed_hosts: vec!["*".into()], allowed_origins: vec!["*".into()], ..McpConfig::default() };
        for host in ["", "a b", "user@localhost", "localhost:abc", "localhost/x", "[::1", "localhost:99999", "h:"] {
            assert!(request(Some(host), None, &open).is_err(), "{host:?}");
        }
        for origin in ["", "localhost", "http://", "http://a@localhost", "http://localhost/", "1x://localhost"] {
            assert!(request(Some("localhost"), Some(origin), &open).is_err(), "{origin:?}");
        }
        assert!(request(Some("localhost"), Some("null"), &open).is_ok());
        assert!(request(Some("h.example:8080"), Some("https://app.example:8443"), &open).is_ok());
        let config = McpConfig::default();
        let mut headers = HeaderMap::new();
        headers.append(header::HOST, HeaderValue::from_static("localhost"));
        headers.append(header::HOST, HeaderValue::from_static("localhost"));
        assert!(check(&headers, &Uri::from_static("/a/mcp"), &config).is_err(), "Host twice, even the same");
        let mut headers = HeaderMap::new();
        headers.append(header::ORIGIN, HeaderValue::from_static("http://localhost"));
        headers.append(header::ORIGIN, HeaderValue::from_static("http://evil.example"));
        assert!(check(&headers, &Uri::from_static("/a/mcp"), &config).is_err(), "Origin twice");
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_bytes(b"localhost\xff").expect("opaque bytes"));
        assert!(check(&headers, &Uri::from_static("/a/mcp"), &config).is_err(), "not ASCII");
    }

    /// The remembered authority answers only for the same text: a malformed or refused `Host` after it is
    /// judged on its own.
    #[test]
    fn the_last_authority_answers_only_for_itself() {
        let config = McpConfig::default();
        for _ in 0..2 {
            assert!(request(Some("localhost:8080"), None, &config).is_ok());
            assert!(request(Some("localhost:99999"), None, &config).is_err());
            assert!(request(Some("localhost:8080/x"), None, &config).is_err());
            assert!(request(Some("evil.example.com:8080"), None, &config).is_err(), "well-formed, not allowed");
            assert!(request(Some("localhost:8080"), None, &config).is_ok());
            assert!(request(Some("localhost:808"), None, &config).is_ok());
        }
    }

    #[test]
    fn allow_lists() {
        let config = McpConfig {
            allowed_hosts: vec!["mcp.example.com".into()],
            allowed_origins: vec!["https://app.example.com".into()],
            ..McpConfig::default()
        };
        assert!(request(Some("mcp.example.com:443"), Some("https://app.example.com"), &config).is_ok());
        assert!(request(Some("mcp.example.com"), Some("https://other.example.com"), &config).is_err());
        let open =
            McpConfig { allowed_hosts: vec!["*".into()], allowed_origins: vec!["*".into()], ..McpConfig::default() };
        assert!(request(Some("anything"), Some("https://anywhere"), &open).is_ok());
    }
}
