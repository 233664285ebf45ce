//! Client ID Metadata Documents: a client whose `client_id` is an `https://` URL publishes its metadata
//! there, and the authorization server fetches it.
//!
//! Fetching is an outbound request a stranger can trigger, so it is guarded:
//! - `https` only, a URL with a path, no credentials, no fragment;
//! - the host's addresses are resolved by `GuardedResolver`, the only resolver the HTTP client uses, and a
//!   name with any loopback, private, link-local, unique-local, CGNAT, multicast, reserved or unspecified
//!   address is refused (an address literal is checked the same way); so is a redirect (none is followed);
//! - the time and the size of the answer are limited, and the document's `client_id` must be its URL;
//! - answers (and refusals) are cached briefly, in a bounded map.
//!
//! Hosts listed in `oauth.builtin.allow_insecure_metadata_hosts` skip the address check and may use `http`:
//! for development and tests only.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipnet::{Ipv4Net, Ipv6Net};

use super::client::{ClientInfo, ClientMetadata};
use super::config::BuiltinConfig;
use crate::FastMap;

/// Why a metadata document could not be used; shown to the user on the authorize page.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct DocumentError(pub String);

/// How long a refusal is remembered, so a page reload does not fetch again at once.
const REFUSAL_TTL: Duration = Duration::from_secs(30);
/// Documents fetched (cache misses) per client address and minute: opening the authorize page costs the
/// server an outbound request, so one address cannot make it fetch without bound.
const FETCHES_PER_MINUTE: u32 = 30;

/// Fetches, checks and caches clients' metadata documents.
pub struct DocumentFetcher {
    client: reqwest::Client,
    config: BuiltinConfig,
    /// URL → when fetched and what was found. Bounded by `max_cached_metadata`: when full, expired entries
    /// go, and if none had, everything (a refetch is cheap; memory is not unbounded).
    cache: FastMap<String, (Instant, Result<ClientInfo, DocumentError>)>,
    /// Fetches per client address (`FETCHES_PER_MINUTE`); idle entries are forgotten by the prune task.
    pub fetches: governor::DefaultKeyedRateLimiter<IpAddr>,
}

impl DocumentFetcher {
    pub fn new(config: &BuiltinConfig) -> anyhow::Result<Self> {
        let resolver = GuardedResolver { allowed: Arc::new(config.allow_insecure_metadata_hosts.clone()) };
        let timeout = Duration::from_millis(config.metadata_timeout_ms);
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .connect_timeout(timeout)
            .dns_resolver(Arc::new(resolver))
            .no_proxy()
            .user_agent(concat!("hivegate/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let quota = governor::Quota::per_minute(
            std::num::NonZeroU32::new(FETCHES_PER_MINUTE).unwrap_or(std::num::NonZeroU32::MIN),
        );
        Ok(Self {
            client,
            config: config.clone(),
            cache: FastMap::default(),
            fetches: governor::RateLimiter::keyed(quota),
        })
    }

    /// Whether `client_id` names a metadata document (rather than a registered client).
    pub fn is_document_url(client_id: &str) -> bool {
        client_id.starts_with("https://") || client_id.starts_with("http://")
    }

    /// The client whose metadata document is at `url`, for a request from `client_ip`.
    pub async fn client(&self, url: &str, client_ip: IpAddr) -> Result<ClientInfo, DocumentError> {
        let ttl = Duration::from_secs(self.config.metadata_cache_secs);
        if let Some(entry) = self.cache.get(url) {
            let (at, found) = &*entry;
            let fresh = if found.is_ok() { ttl } else { REFUSAL_TTL.min(ttl) };
            if at.elapsed() < fresh {
                return found.clone();
            }
        }
        if self.fetches.check_key(&super::rate_key(client_ip)).is_err() {
            return Err(DocumentError(format!(
                "too many client metadata documents fetched for your address: try again in a minute \
                 ({FETCHES_PER_MINUTE} a minute)"
            )));
        }
        let found = self.fetch(url).await;
        if let Err(error) = &found {
            tracing::info!(%error, "client metadata document refused");
        }
        if self.cache.len() >= self.config.max_cached_metadata {
            self.cache.retain(|_, (at, _)| at.elapsed() < ttl);
            if self.cache.len() >= self.config.max_cached_metadata {
                self.cache.clear();
            }
        }
        self.cache.insert(url.to_owned(), (Instant::now(), found.clone()));
        found
    }

    async fn fetch(&self, url: &str) -> Result<ClientInfo, DocumentError> {
        let parsed = self.check_url(url)?;
        let refused = |what: String| DocumentError(format!("the client's metadata document at {url}: {what}"));
        let response = self
            .client
            .get(parsed)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|error| refused(describe(&error)))?;
        let status = response.status();
        if status.is_redirection() {
            return Err(refused(format!("answered {status}; redirects are not followed")));
        }
        if !status.is_success() {
            return Err(refused(format!("answered {status}")));
        }
        let limit = self.config.max_metadata_bytes;
        if response.content_length().is_some_and(|length| length > limit as u64) {
            return Err(refused(format!("is larger than {limit} bytes (oauth.builtin.max_metadata_bytes)")));
        }
        let mut body = Vec::new();
        let mut response = response;
        while let Some(chunk) = response.chunk().await.map_err(|error| refused(describe(&error)))? {
            if body.len() + chunk.len() > limit {
                return Err(refused(format!("is larger than {limit} bytes (oauth.builtin.max_metadata_bytes)")));
            }
            body.extend_from_slice(&chunk);
        }
        let metadata: ClientMetadata =
            serde_json::from_slice(&body).map_err(|error| refused(format!("is not client metadata: {error}")))?;
        if metadata.client_id.as_deref() != Some(url) {
            return Err(refused("its client_id is not its own URL".to_owned()));
        }
        metadata.check(url.to_owned(), &self.config, true).map_err(|error| refused(error.description))
    }

    /// The URL if it may be fetched: `https` (or `http` to an allowed host), with a path, without
    /// credentials or fragment; an address literal must not be a forbidden one.
    fn check_url(&self, url: &str) -> Result<url::Url, DocumentError> {
        let refused = |what: &str| DocumentError(format!("client_id {url:?} {what}"));
        if url.len() > self.config.max_redirect_uri_bytes {
            return Err(refused("is too long"));
        }
        let parsed = url::Url::parse(url).map_err(|_| refused("is not a URL"))?;
        let host = parsed.host_str().ok_or_else(|| refused("has no host"))?.to_owned();
        let allowed = is_allowed(&self.config.allow_insecure_metadata_hosts, &host);
        match parsed.scheme() {
            "https" => {}
            "http" if allowed => {}
            _ => return Err(refused("must be an https URL")),
        }
        if parsed.path() == "/" || parsed.path().is_empty() {
            return Err(refused("must have a path"));
        }
        if parsed.fragment().is_some() || !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(refused("must have no fragment and no credentials"));
        }
        let literal = match parsed.host() {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => None,
        };
        if !allowed && let Some(ip) = literal.filter(|ip| is_forbidden(*ip)) {
            return Err(refused(&format!("points at {ip}, an address that is not publicly routable")));
        }
        Ok(parsed)
    }
}

/// The innermost cause of a request failure, which names a refused address or a timeout plainly.
fn describe(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return "timed out (oauth.builtin.metadata_timeout_ms)".to_owned();
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    let mut last = error.to_string();
    while let Some(cause) = source {
        if let Some(forbidden) = cause.downcast_ref::<ForbiddenAddress>() {
            return forbidden.to_string();
        }
        last = cause.to_string();
        source = cause.source();
    }
    format!("could not be fetched: {last}")
}

fn is_allowed(allowed: &[String], host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    allowed.iter().any(|entry| entry.trim().trim_start_matches('[').trim_end_matches(']').eq_ignore_ascii_case(host))
}

/// A host that resolved to an address hivegate does not fetch from. The address is logged, not shown: the
/// page that reports the refusal is open to anyone, and must not tell what internal names resolve to.
#[derive(Debug, thiserror::Error)]
#[error("its host {host} resolves to an address that is not publicly routable")]
struct ForbiddenAddress {
    host: String,
}

/// The metadata client's resolver: the system's, refusing names with any forbidden address. Being the
/// resolver the connection uses, it also covers a name that resolves differently a second time.
struct GuardedResolver {
    allowed: Arc<Vec<String>>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        let allowed = is_allowed(&self.allowed, &host);
        let resolving: Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(async move {
            let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if !allowed && let Some(address) = addresses.iter().find(|address| is_forbidden(address.ip())) {
                tracing::info!(%host, ip = %address.ip(), "client metadata document host refused: not publicly routable");
                let error: Box<dyn std::error::Error + Send + Sync> = Box::new(ForbiddenAddress { host });
                return Err(error);
            }
            let addresses: reqwest::dns::Addrs = Box::new(addresses.into_iter());
            Ok(addresses)
        });
        resolving
    }
}

/// Whether `ip` is not a public unicast address: loopback, private, link-local, unique-local, CGNAT,
/// multicast, broadcast, unspecified, documentation, benchmarking or reserved (IPv4-mapped and NAT64 IPv6
/// addresses by the IPv4 address they carry).
pub fn is_forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            const RANGES: [(u32, u8); 6] = [
                (0x0000_0000, 8),  // 0.0.0.0/8 "this network"
                (0x6440_0000, 10), // 100.64.0.0/10 CGNAT
                (0xc000_0000, 24), // 192.0.0.0/24 protocol assignments
                (0xc612_0000, 15), // 198.18.0.0/15 benchmarking
                (0xf000_0000, 4),  // 240.0.0.0/4 reserved
                (0xc058_6300, 24), // 192.88.99.0/24 6to4 relay
            ];
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_unspecified()
                || v4.is_documentation()
                || RANGES.iter().any(|(network, prefix)| {
                    Ipv4Net::new(std::net::Ipv4Addr::from(*network), *prefix).is_ok_and(|net| net.contains(&v4))
                })
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_forbidden(IpAddr::V4(v4));
            }
            let segments = v6.segments();
            if segments[0] == 0x64 && segments[1] == 0xff9b && segments[2..6] == [0, 0, 0, 0] {
                let octets = v6.octets();
                return is_forbidden(IpAddr::V4(std::net::Ipv4Addr::new(
                    octets[12], octets[13], octets[14], octets[15],
                )));
            }
            const RANGES: [(&str, u8); 6] = [
                ("fc00::", 7),      // unique local
                ("fe80::", 10),     // link-local
                ("fec0::", 10),     // site-local (deprecated)
                ("2001:db8::", 32), // documentation
                ("100::", 64),      // discard
                ("2001::", 23),     // IETF protocol assignments (Teredo, benchmarking, ...)
            ];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || RANGES.iter().any(|(network, prefix)| {
                    network
                        .parse()
                        .ok()
                        .and_then(|network| Ipv6Net::new(network, *prefix).ok())
                        .is_some_and(|net| net.contains(&v6))
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCAL: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn private_and_special_addresses_are_forbidden() {
        for forbidden in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2001:db8::1",
            "240.0.0.1",
        ] {
            assert!(is_forbidden(forbidden.parse().expect("an address")), "{forbidden} is allowed");
        }
        for public in ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "8.8.8.8"] {
            assert!(!is_forbidden(public.parse().expect("an address")), "{public} is forbidden");
        }
    }

    #[tokio::test]
    async fn urls_are_checked_before_anything_is_fetched() {
        let fetcher = DocumentFetcher::new(&BuiltinConfig::default()).expect("a client");
        for (url, why) in [
            ("http://client.example/meta.json", "https"),
            ("https://client.example/", "path"),
            ("https://127.0.0.1/meta.json", "not publicly routable"),
            ("https://[::1]/meta.json", "not publicly routable"),
            ("https://u:p@client.example/meta.json", "credentials"),
        ] {
            let error = fetcher.client(url, LOCAL).await.expect_err(url);
            assert!(error.0.contains(why), "{url}: {error}");
        }
        let allowed =
            BuiltinConfig { allow_insecure_metadata_hosts: vec!["127.0.0.1".into()], ..BuiltinConfig::default() };
        let fetcher = DocumentFetcher::new(&allowed).expect("a client");
        assert!(fetcher.check_url("http://127.0.0.1:1/meta.json").is_ok());
        assert!(fetcher.check_url("http://10.0.0.1/meta.json").is_err());
    }

    #[tokio::test]
    async fn fetches_per_address_are_bounded() {
        let fetcher = DocumentFetcher::new(&BuiltinConfig::default()).expect("a client");
        for i in 0..FETCHES_PER_MINUTE {
            let error = fetcher.client(&format!("https://10.0.0.1/{i}.json"), LOCAL).await.expect_err("private");
            assert!(error.0.contains("not publicly routable"), "{error}");
        }
        let error = fetcher.client("https://10.0.0.1/more.json", LOCAL).await.expect_err("bounded");
        assert!(error.0.contains("too many"), "{error}");
        let other = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));
        let error = fetcher.client("https://10.0.0.1/more.json", other).await.expect_err("private");
        assert!(error.0.contains("not publicly routable"), "another address has its own budget: {error}");
        // A cached answer costs nothing.
        let error = fetcher.client("https://10.0.0.1/0.json", LOCAL).await.expect_err("cached");
        assert!(error.0.contains("not publicly routable"), "{error}");
    }

    #[tokio::test]
    async fn a_name_that_resolves_to_loopback_is_refused() {
        let fetcher = DocumentFetcher::new(&BuiltinConfig::default()).expect("a client");
        let error = fetcher.client("https://localhost:9/meta.json", LOCAL).await.expect_err("loopback");
        assert!(error.0.contains("not publicly routable"), "{error}");
    }
}
