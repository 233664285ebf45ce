//! The client's address, as the contract defines it: the socket peer, unless the peer is a configured
//! trusted proxy; then the rightmost `X-Forwarded-For` entry that is not a trusted proxy.
//!
//! Only the entries appended by trusted proxies can be believed: everything left of the first untrusted
//! entry (counting from the right) was written by the client itself and is ignored.

use std::net::{IpAddr, SocketAddr};

use axum::http::{HeaderMap, HeaderName};
use ipnet::IpNet;

/// The header proxies append the address they received a request from to.
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The client address of a request that came from `peer` with `headers`.
///
/// When every hop is a trusted proxy, the leftmost entry is the client. An entry that is not an address
/// (`unknown`, an obfuscated identifier, garbage) ends the walk: the trusted proxy that wrote it is taken as
/// the client, so such requests share one address instead of choosing their own.
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let peer = peer.to_canonical();
    if !is_trusted(peer, trusted) {
        return peer;
    }
    let mut client = peer;
    let entries = headers
        .get_all(&X_FORWARDED_FOR)
        .iter()
        .rev()
        .flat_map(|value| value.to_str().unwrap_or("").rsplit(','))
        .map(str::trim)
        .filter(|entry| !entry.is_empty());
    for entry in entries {
        let Some(address) = parse_entry(entry) else { return client };
        client = address;
        if !is_trusted(address, trusted) {
            return address;
        }
    }
    client
}

/// An address written in a test.
#[cfg(test)]
pub(crate) fn ip(text: &str) -> IpAddr {
    text.parse().expect("an address")
}

fn is_trusted(address: IpAddr, trusted: &[IpNet]) -> bool {
    trusted.iter().any(|net| net.contains(&address))
}

/// An address as proxies write it: `192.0.2.1`, `2001:db8::1`, and with a port `192.0.2.1:443` or
/// `[2001:db8::1]:443`.
fn parse_entry(entry: &str) -> Option<IpAddr> {
    let address = entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| entry.parse::<SocketAddr>().ok().map(|socket| socket.ip()))
        .or_else(|| entry.strip_prefix('[')?.strip_suffix(']')?.parse().ok())?;
    Some(address.to_canonical())
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|net| net.parse().expect("a network")).collect()
    }

    fn forwarded(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(X_FORWARDED_FOR, HeaderValue::from_str(value).expect("a header value"));
        }
        headers
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_claims() {
        let headers = forwarded(&["198.51.100.7"]);
        assert_eq!(client_ip(ip("203.0.113.9"), &headers, &[]), ip("203.0.113.9"));
        assert_eq!(client_ip(ip("203.0.113.9"), &headers, &nets(&["10.0.0.0/8"])), ip("203.0.113.9"));
    }

    #[test]
    fn behind_a_trusted_proxy_the_rightmost_untrusted_entry_is_the_client() {
        let trusted = nets(&["10.0.0.0/8"]);
        let headers = forwarded(&["1.1.1.1, 198.51.100.7, 10.0.0.2"]);
        assert_eq!(client_ip(ip("10.0.0.1"), &headers, &trusted), ip("198.51.100.7"), "1.1.1.1 is the client's claim");
        let split = forwarded(&["1.1.1.1", "198.51.100.7,10.0.0.2"]);
        assert_eq!(client_ip(ip("10.0.0.1"), &split, &trusted), ip("198.51.100.7"), "several fields are one list");
    }

    #[test]
    fn a_trusted_proxy_without_the_header_is_the_client() {
        assert_eq!(client_ip(ip("10.0.0.1"), &HeaderMap::new(), &nets(&["10.0.0.0/8"])), ip("10.0.0.1"));
    }

    #[test]
    fn when_every_hop_is_trusted_the_leftmost_is_the_client() {
        let headers = forwarded(&["10.0.0.3, 10.0.0.2"]);
        assert_eq!(client_ip(ip("10.0.0.1"), &headers, &nets(&["10.0.0.0/8"])), ip("10.0.0.3"));
    }

    #[test]
    fn garbage_stops_at_the_proxy_that_wrote_it() {
        let trusted = nets(&["10.0.0.0/8"]);
        assert_eq!(client_ip(ip("10.0.0.1"), &forwarded(&["198.51.100.7, unknown"]), &trusted), ip("10.0.0.1"));
        assert_eq!(client_ip(ip("10.0.0.1"), &forwarded(&["unknown, 10.0.0.2"]), &trusted), ip("10.0.0.2"));
    }

    #[test]
    fn ports_brackets_and_mapped_addresses() {
        let trusted = nets(&["127.0.0.0/8", "::1/128"]);
        assert_eq!(client_ip(ip("::1"), &forwarded(&["[2001:db8::5]:4711"]), &trusted), ip("2001:db8::5"));
        assert_eq!(client_ip(ip("::1"), &forwarded(&["[2001:db8::6]"]), &trusted), ip("2001:db8::6"));
        assert_eq!(client_ip(ip("::1"), &forwarded(&["192.0.2.1:80"]), &trusted), ip("192.0.2.1"));
        assert_eq!(
            client_ip(ip("::ffff:127.0.0.1"), &forwarded(&["192.0.2.2"]), &trusted),
            ip("192.0.2.2"),
            "an IPv4 peer on a dual-stack socket is still 127.0.0.1"
        );
    }
}
