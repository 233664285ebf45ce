//! DNS-rebinding protection (required by the Streamable HTTP transport): the `Host` and, when present, the
//! `Origin` of every request to the MCP endpoint must be loopback names or on the configured allow-lists
//! (`mcp.allowed_hosts`, `mcp.allowed_origins`; an entry `*` allows any). Anything else is 403.

use axum::http::{HeaderMap, Uri, header};

use super::error::McpError;
use crate::config::McpConfig;

/// Checks `Host` (or the URI authority for HTTP/2) and `Origin`. A request without a `Host` passes: a
/// browser, the only client a rebinding attack can drive, always sends one.
pub fn check(headers: &HeaderMap, uri: &Uri, config: &McpConfig) -> Result<(), McpError> {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).or_else(|| uri.authority().map(|a| a.as_str()));
    if let Some(host) = host
        && !is_allowed_host(host, &config.allowed_hosts)
    {
        return Err(McpError::OriginNotAllowed(format!("Host {host:?} is not allowed")));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !is_allowed_origin(origin, &config.allowed_origins) {
            return Err(McpError::OriginNotAllowed(format!("Origin {origin:?} is not allowed")));
        }
    }
    Ok(())
}

fn is_allowed_host(host: &str, allowed: &[String]) -> bool {
    let (name, _) = split_port(host);
    is_loopback(name)
        || allowed
            .iter()
            .any(|entry| entry == "*" || entry.eq_ignore_ascii_case(host) || entry.eq_ignore_ascii_case(name))
}

fn is_allowed_origin(origin: &str, allowed: &[String]) -> bool {
    if allowed.iter().any(|entry| entry == "*" || entry.trim_end_matches('/').eq_ignore_ascii_case(origin)) {
        return true;
    }
    let Some((scheme, authority)) = origin.split_once("://") else {
        return false;
    };
    let (name, _) = split_port(authority);
    matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") && !authority.contains('/') && is_loopback(name)
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
