//! Authentication: agent keys (cached, invalidated through the bus) and the operator token.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderName};
use secrecy::{ExposeSecret, SecretString};

use crate::FastMap;
use crate::domain::model::KeyRecord;
use crate::domain::{AgentId, ApiKey, KeyDigest, KeyHasher};
use crate::events::{BusHook, BusMessage, CacheGate};
use crate::guard::Bucketed;
use crate::registry::cache::AgentLink;
use crate::store::{Store, StoreError};

/// The header agent keys travel in; it wins over `Authorization: Bearer`. A `HeaderName`, so that looking it up
/// does not parse the name again on every request.
pub const KEY_HEADER: HeaderName = HeaderName::from_static("x-agent-api-key");
/// `last_used_at` is written at most this often per key, so reads do not turn into writes.
const TOUCH_INTERVAL: Duration = Duration::from_secs(60);
/// How often the keys used since are written ([`KeyCache::write_uses`]): one statement for all of them, so
/// that requests spread over many keys do not cost the database a transaction per key.
pub const TOUCH_WRITE_INTERVAL: Duration = Duration::from_secs(5);

/// Why a presented key was refused.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// No key, an unknown one, or a revoked or expired one: 401.
    #[error("missing, unknown, revoked or expired API key")]
    Unauthenticated,
    #[error(transparent)]
    Store(#[from] StoreError),
}

struct CachedKey {
    /// Shared with every request that presents the key: a hit copies no field of it, and finds the key's
    /// rate-limit bucket with it.
    record: Arc<Bucketed<KeyRecord>>,
    /// When this replica last wrote `last_used_at` (or loaded the key).
    touched: Instant,
    /// The key's agent's row and registry, as its last request found them ([`AgentLink`]).
    link: Option<AgentLink>,
}

impl CachedKey {
    /// Asks for every line a request with this key uses next, side by side ([`crate::prefetch`]): the key's
    /// record and bucket handle, its agent's row and bucket handle, its agent's registry; then, through
    /// those, the two buckets and the key's id and prefix (the audit record copies them).
    fn prefetch(&self) {
        crate::prefetch::arc(&self.record);
        self.record.prefetch();
        if let Some(link) = &self.link {
            link.prefetch();
        }
        self.record.prefetch_bucket();
        crate::prefetch::for_read(self.record.id.as_ptr());
        crate::prefetch::for_read(self.record.prefix.as_ptr());
        if let Some(link) = &self.link {
            link.agent().prefetch_bucket();
        }
    }
}

/// A usable key, what its last request found of its agent, and where to keep what this one finds.
pub struct KeyHit {
    pub key: Arc<Bucketed<KeyRecord>>,
    pub link: Option<AgentLink>,
    /// The presented key's digest, under which [`KeyCache::remember`] keeps a link.
    pub digest: KeyDigest,
}

/// Presented keys, by digest, so a request costs one hash and one map lookup. A presented key's entry also
/// keeps its agent's row and registry as its last request found them ([`AgentLink`]); the registry cache
/// checks the link on every use, and its own bus messages make it stale.
///
/// Entries are dropped by bus messages (revocation, agent deletion, resync), applied synchronously as a
/// [`BusHook`]; expiry is checked on every use. The gate's generation guards against a lookup that read the
/// database before a revocation and would otherwise put the stale key back after the revocation cleared it.
/// While the bus is offline (revocations could be missed) every request reads the database.
pub struct KeyCache {
    store: Arc<dyn Store>,
    hasher: KeyHasher,
    entries: FastMap<KeyDigest, CachedKey>,
    /// The same keys by id, for access tokens ([`KeyCache::by_id`]); only stored keys are ever entered.
    ids: FastMap<String, CachedKey>,
    gate: CacheGate,
    /// Keys used since their use was last written: each once, so at most as many as there are keys.
    used: std::sync::Mutex<std::collections::HashSet<String, foldhash::fast::RandomState>>,
}

impl KeyCache {
    pub fn new(store: Arc<dyn Store>, hasher: KeyHasher) -> Self {
        Self {
            store,
            hasher,
            entries: FastMap::default(),
            ids: FastMap::default(),
            gate: CacheGate::default(),
            used: std::sync::Mutex::default(),
        }
    }

    /// Writes the use of the keys used since the last call (run every [`TOUCH_WRITE_INTERVAL`], and at
    /// shutdown); a failed write is logged and not retried (the next use of the key writes it again).
    pub async fn write_uses(&self) {
        let used: Vec<String> = {
            let mut used = self.used.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if used.is_empty() {
                return;
            }
            std::mem::take(&mut *used).into_iter().collect()
        };
        if let Err(error) = self.store.touch_keys(&used).await {
            tracing::warn!(%error, keys = used.len(), "could not record key use");
        }
    }

    /// The stored key for a presented one, if it is usable now.
    pub async fn authenticate(&self, presented: Option<&str>) -> Result<KeyHit, KeyError> {
        let key = presented.and_then(ApiKey::parse).ok_or(KeyError::Unauthenticated)?;
        let digest = self.hasher.digest(key.expose());
        let (key, link) = self.usable(&self.entries, digest, || self.store.find_key(&digest)).await?;
        Ok(KeyHit { key, link, digest })
    }

    /// Keeps `link` with the presented key of `digest`, for its next request.
    pub fn remember(&self, digest: &KeyDigest, link: AgentLink) {
        if let Some(mut entry) = self.entries.get_mut(digest) {
            entry.link = Some(link);
        }
    }

    /// The key with this id, if it is usable now: how an access token reaches the key it was granted with
    /// ([`crate::oauth`]). Cached and dropped by the same bus messages as presented keys, so a revocation
    /// on any replica refuses the token here at once.
    pub async fn by_id(&self, id: &str) -> Result<Arc<Bucketed<KeyRecord>>, KeyError> {
        Ok(self.usable(&self.ids, id.to_owned(), || self.store.find_key_by_id(id)).await?.0)
    }

    /// The key under `lookup` in `map`, else from `fetch` (cached when no invalidation raced the read). The
    /// store's future is only made on a miss: making it boxes it.
    async fn usable<K: Eq + std::hash::Hash, F>(
        &self,
        map: &FastMap<K, CachedKey>,
        lookup: K,
        fetch: impl FnOnce() -> F,
    ) -> Result<(Arc<Bucketed<KeyRecord>>, Option<AgentLink>), KeyError>
    where
        F: Future<Output = Result<Option<KeyRecord>, StoreError>>,
    {
        let cached = map.get_mut(&lookup).map(|mut entry| {
            entry.prefetch();
            let due = entry.touched.elapsed() >= TOUCH_INTERVAL;
            if due {
                entry.touched = Instant::now();
            }
            (entry.record.clone(), due, entry.link.clone())
        });
        let (record, touch, link) = match cached {
            Some((record, due, link)) => (record, due, link),
            None => {
                let generation = self.gate.generation();
                let loaded = fetch().await?.ok_or(KeyError::Unauthenticated)?;
                // Copied into the caches' arena with the entry that keeps it (src/allocator.rs).
                let record = crate::allocator::in_cache_scope(|| {
                    let record = Arc::new(Bucketed::new(loaded.clone()));
                    // The generation is compared while the entry's shard is locked: a `forget` that began
                    // after the database read has bumped it (and we skip), or it takes the shard lock after
                    // us and its `retain` removes what we insert.
                    if let dashmap::Entry::Vacant(slot) = map.entry(lookup)
                        && self.gate.may_keep(generation)
                    {
                        slot.insert(CachedKey { record: record.clone(), touched: Instant::now(), link: None });
                    }
                    record
                });
                (record, true, None)
            }
        };
        if !record.is_usable_now() {
            return Err(KeyError::Unauthenticated);
        }
        if touch {
            self.used.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(record.id.clone());
        }
        Ok((record, link))
    }

    fn forget(&self, keep: impl Fn(&KeyRecord) -> bool) {
        self.gate.invalidate();
        self.entries.retain(|_, entry| keep(&entry.record));
        self.ids.retain(|_, entry| keep(&entry.record));
    }
}

impl BusHook for KeyCache {
    fn apply(&self, message: &BusMessage) {
        self.gate.apply(
            message,
            || self.forget(|_| false),
            |stale| {
                if let Some(is_stale) = stale.of_keys(true) {
                    self.forget(|record| !is_stale(&record.agent_id, &record.id));
                }
            },
        );
    }
}

/// What every 401 without OAuth carries, on the admin API and on the MCP endpoint.
pub const CHALLENGE: &str = r#"Bearer realm="hivegate""#;

/// A `WWW-Authenticate: Bearer` challenge (RFC 6750 §3): the one place it is spelled, and
/// [`Challenge::put_on`] the one place it is put on a response. With OAuth on, the MCP endpoint adds the
/// agent's metadata document (RFC 9728 §5.1), the scope it needs and the error code.
#[derive(Debug, Clone, Default)]
pub struct Challenge {
    /// The URL of the protected resource metadata document.
    pub resource_metadata: Option<String>,
    /// `scope`: the scopes the request needs.
    pub scope: Option<&'static str>,
    /// `error`: `invalid_token`, `insufficient_scope` or `invalid_request`.
    pub error: Option<&'static str>,
    /// `error_description`, for a person.
    pub description: Option<String>,
}

impl Challenge {
    /// Sets `WWW-Authenticate` in `headers` (a response's) to this challenge, replacing any other.
    pub fn put_on(&self, headers: &mut HeaderMap) {
        headers.insert(axum::http::header::WWW_AUTHENTICATE, self.header());
    }

    /// The header value. Quotes, backslashes and control characters in the parameters are dropped rather
    /// than escaped; a value that still cannot be a header field falls back to [`CHALLENGE`].
    fn header(&self) -> axum::http::HeaderValue {
        let mut text = String::from(CHALLENGE);
        let parameters = [
            ("resource_metadata", self.resource_metadata.as_deref()),
            ("scope", self.scope),
            ("error", self.error),
            ("error_description", self.description.as_deref()),
        ];
        for (name, value) in parameters {
            if let Some(value) = value {
                let value: String = value.chars().filter(|c| !matches!(c, '"' | '\\') && !c.is_control()).collect();
                text.push_str(&format!(", {name}=\"{value}\""));
            }
        }
        axum::http::HeaderValue::from_str(&text).unwrap_or_else(|_| axum::http::HeaderValue::from_static(CHALLENGE))
    }
}

/// The value of `Authorization: Bearer <token>`, if present.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The operator token: either configured (then it is the only one) or generated once and stored as a digest.
///
/// A stored token can be replaced while replicas run (`hivegate admin-token rotate`): each replica re-reads
/// the digest every [`OPERATOR_REFRESH`] ([`OperatorToken::refresh`]), so the old token stops working and
/// the new one starts working everywhere within that time.
pub enum OperatorToken {
    Configured(SecretString),
    Stored { hasher: KeyHasher, digest: std::sync::RwLock<KeyDigest> },
}

/// How often a replica re-reads the stored operator token digest.
pub const OPERATOR_REFRESH: Duration = Duration::from_secs(2);

impl OperatorToken {
    /// A stored token with `digest`.
    pub fn stored(hasher: KeyHasher, digest: KeyDigest) -> Self {
        OperatorToken::Stored { hasher, digest: std::sync::RwLock::new(digest) }
    }

    /// Constant-time check of a presented token.
    pub fn is_valid(&self, presented: &str) -> bool {
        match self {
            OperatorToken::Configured(token) => {
                let hasher = KeyHasher::new(None);
                hasher.digest(token.expose_secret()).ct_eq(&hasher.digest(presented))
            }
            OperatorToken::Stored { hasher, digest } => {
                let digest = digest.read().unwrap_or_else(std::sync::PoisonError::into_inner);
                hasher.digest(presented).ct_eq(&digest)
            }
        }
    }

    /// Re-reads the stored digest (a no-op for a configured token); a failed read keeps the current one.
    pub async fn refresh(&self, store: &dyn Store) {
        let OperatorToken::Stored { digest, .. } = self else { return };
        match store.get_setting(crate::store::setting::OPERATOR_TOKEN_DIGEST).await {
            Ok(Some(stored)) => match KeyDigest::from_hex(&stored) {
                Some(fresh) => *digest.write().unwrap_or_else(std::sync::PoisonError::into_inner) = fresh,
                None => tracing::error!("the stored operator token digest is corrupt; keeping the current one"),
            },
            Ok(None) => {}
            Err(error) => tracing::debug!(%error, "could not re-read the operator token digest"),
        }
    }

    /// The digest of the token in force (hex): a console session opened with an older one ends once the token
    /// was rotated.
    pub fn fingerprint(&self) -> String {
        match self {
            OperatorToken::Configured(token) => KeyHasher::new(None).digest(token.expose_secret()).to_hex(),
            OperatorToken::Stored { digest, .. } => {
                digest.read().unwrap_or_else(std::sync::PoisonError::into_inner).to_hex()
            }
        }
    }

    /// Whether `Authorization: Bearer` in `headers` carries the operator token.
    pub fn is_presented_in(&self, headers: &HeaderMap) -> bool {
        bearer(headers).is_some_and(|token| self.is_valid(token))
    }
}

/// Whether `record` belongs to `agent`.
pub fn is_key_of(record: &KeyRecord, agent: &AgentId) -> bool {
    &record.agent_id == agent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_challenge_is_spelled_once() {
        assert_eq!(Challenge::default().header(), CHALLENGE);
        let full = Challenge {
            resource_metadata: Some("https://h/.well-known/oauth-protected-resource/a/mcp".to_owned()),
            scope: Some("mcp"),
            error: Some("invalid_token"),
            description: Some("a \"quoted\" \\ reason".to_owned()),
        };
        assert_eq!(
            full.header(),
            "Bearer realm=\"hivegate\", resource_metadata=\"https://h/.well-known/oauth-protected-resource/a/mcp\", \
             scope=\"mcp\", error=\"invalid_token\", error_description=\"a quoted  reason\""
        );
        // Control characters, which a header value cannot hold, are dropped.
        let broken = Challenge { description: Some("line\nbreak".to_owned()), ..Challenge::default() };
        assert_eq!(broken.header(), "Bearer realm=\"hivegate\", error_description=\"linebreak\"");
    }
}
