//! Legacy sessions as requests see them: issuing one on `initialize`, resolving the `Mcp-Session-Id` a
//! request carries, ending one on `DELETE`, and idle expiry.
//!
//! Sessions live in the database, so any replica serves any session. Each replica keeps the sessions it has
//! seen in memory (a [`BusHook`], so an ending or a revoked key is applied here before anyone can observe
//! it) and writes `last_seen_at` at most once per touch interval per session. A session this replica
//! believes idle is re-read before it is declared expired, since another replica may have seen it since.
//!
//! [`BusHook`]: crate::events::BusHook

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;

use super::error::McpError;
use super::types::header;
use crate::FastMap;
use crate::domain::AgentId;
use crate::domain::model::KeyRecord;
use crate::domain::session::{Session, SessionDigest, SessionToken};
use crate::domain::time::Timestamp;
use crate::events::{BusHook, BusMessage, CacheGate, Stale};
use crate::store::{Store, StoreError};

/// Sessions kept in memory at most; beyond this they are dropped and reloaded on demand.
const MAX_CACHED: usize = 100_000;
/// `last_seen_at` is written at most this often per session and replica (less when the idle timeout is short).
const MAX_TOUCH_INTERVAL: Duration = Duration::from_secs(60);

/// The `Mcp-Session-Id` a request carries, read and digested once when the request is admitted: a legacy
/// request's session is found by that digest, and the request's audit record names it (a modern request is
/// audited with it too, and looks up nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionHeader {
    /// No `Mcp-Session-Id`.
    Absent,
    /// A value without a session id's shape: it names no session (a legacy request is refused without a
    /// lookup) and is audited as none.
    Malformed,
    /// A well-formed session id, by its digest (the id itself is not kept).
    Named(SessionDigest),
}

impl SessionHeader {
    pub fn of(headers: &HeaderMap) -> Self {
        match headers.get(&header::SESSION_ID) {
            None => Self::Absent,
            Some(value) => match value.to_str().ok().and_then(SessionToken::parse) {
                Some(token) => Self::Named(token.digest()),
                None => Self::Malformed,
            },
        }
    }

    /// The digest of a well-formed id.
    pub fn digest(&self) -> Option<&SessionDigest> {
        match self {
            Self::Named(digest) => Some(digest),
            Self::Absent | Self::Malformed => None,
        }
    }
}

/// The sessions this replica has seen, by digest.
pub struct Sessions {
    store: Arc<dyn Store>,
    idle: Duration,
    /// Live sessions one key may hold (`sessions.max_per_key`), counted in the database.
    max_per_key: u32,
    touch_every: Duration,
    /// Sessions seen here, by digest: looked up by every request that names one. A sharded map, since many
    /// requests look up at once; no entry is held across an `.await`.
    entries: FastMap<SessionDigest, Arc<Session>>,
    /// When this replica last wrote each session's `last_seen_at`. Kept apart from `entries` so that an open
    /// stream keeps its session alive even while the session is not cached (after a resync, say).
    touched: FastMap<SessionDigest, Instant>,
    /// Closed while the bus may be missing messages (sessions are then read from the database every time);
    /// its generation keeps a load that raced with an invalidation out of `entries`.
    gate: CacheGate,
}

impl Sessions {
    pub fn new(store: Arc<dyn Store>, idle: Duration, max_per_key: u32) -> Self {
        let touch_every = (idle / 4).min(MAX_TOUCH_INTERVAL);
        Self {
            store,
            idle,
            max_per_key,
            touch_every,
            entries: FastMap::default(),
            touched: FastMap::default(),
            gate: CacheGate::default(),
        }
    }

    fn idle_micros(&self) -> i64 {
        i64::try_from(self.idle.as_micros()).unwrap_or(i64::MAX)
    }

    /// Issues a session for `key` on `agent`, negotiated at `version`; the token goes back to the client. A
    /// key that already holds `sessions.max_per_key` live sessions (on any replica) is refused with
    /// [`McpError::TooManySessions`]; ended and expired ones do not count.
    pub async fn create(&self, agent: &AgentId, key: &KeyRecord, version: &str) -> Result<SessionToken, McpError> {
        let token = SessionToken::generate();
        let now = Timestamp::now();
        let session = Session {
            digest: token.digest(),
            agent_id: agent.clone(),
            key_id: key.id.clone(),
            protocol_version: version.to_owned(),
            last_seen_at: now,
            created_at: now,
        };
        let live_since = Timestamp::from_micros(now.as_micros().saturating_sub(self.idle_micros()));
        if !self.store.create_session(&session, self.max_per_key, live_since).await? {
            return Err(McpError::TooManySessions { limit: self.max_per_key });
        }
        self.touched.insert(session.digest.clone(), Instant::now());
        self.entries.insert(session.digest.clone(), Arc::new(session));
        Ok(token)
    }

    /// The session named by the request's `Mcp-Session-Id` ([`SessionHeader`]), if it carries one. A session
    /// that is unknown, ended, expired, of another agent or created by another key, and a malformed id, are
    /// [`McpError::UnknownSession`].
    pub async fn resolve(
        &self,
        presented: &SessionHeader,
        agent: &AgentId,
        key: &KeyRecord,
    ) -> Result<Option<Arc<Session>>, McpError> {
        let digest = match presented {
            SessionHeader::Absent => return Ok(None),
            SessionHeader::Malformed => return Err(McpError::UnknownSession),
            SessionHeader::Named(digest) => digest,
        };
        let now = Timestamp::now();
        let cached = self.entries.get(digest).map(|entry| entry.clone());
        let session = match cached {
            Some(session) if !session.is_expired_at(now, self.idle_micros()) => session,
            _ => self.load(digest).await?.ok_or(McpError::UnknownSession)?,
        };
        if &session.agent_id != agent || session.key_id != key.id {
            return Err(McpError::UnknownSession);
        }
        if session.is_expired_at(now, self.idle_micros()) {
            self.end(&session).await?;
            return Err(McpError::UnknownSession);
        }
        self.touch(&session.digest);
        Ok(Some(session))
    }

    async fn load(&self, digest: &SessionDigest) -> Result<Option<Arc<Session>>, McpError> {
        let generation = self.gate.generation();
        let Some(session) = self.store.get_session(digest).await? else {
            self.entries.remove(digest);
            return Ok(None);
        };
        let session = Arc::new(session);
        if self.gate.may_keep(generation) {
            if self.entries.len() >= MAX_CACHED {
                self.entries.clear();
            }
            self.entries.insert(digest.clone(), session.clone());
        }
        Ok(Some(session))
    }

    /// Ends the session everywhere (its stream closes); `false` when it had already ended.
    pub async fn end(&self, session: &Session) -> Result<bool, McpError> {
        self.forget(|cached| cached.digest != session.digest);
        match self.store.delete_session(&session.agent_id, &session.digest).await {
            Ok(ended) => Ok(ended),
            Err(StoreError::NotFound) => Ok(false),
            Err(error) => Err(error.into()),
        }
    }

    /// Records that the session is in use (a request, or a keep-alive of its open stream); writes
    /// `last_seen_at` at most once per touch interval. The write runs in a task of its own that ends with
    /// it; a failure is logged, and the next touch tries again.
    pub fn touch(&self, digest: &SessionDigest) {
        match self.touched.get_mut(digest) {
            Some(touched) if touched.elapsed() < self.touch_every => return,
            Some(mut touched) => *touched = Instant::now(),
            None => {
                if self.touched.len() >= MAX_CACHED {
                    self.touched.clear();
                }
                self.touched.insert(digest.clone(), Instant::now());
            }
        }
        let now = Timestamp::now();
        if let Some(mut cached) = self.entries.get_mut(digest) {
            let mut session = (**cached).clone();
            session.last_seen_at = now;
            *cached = Arc::new(session);
        }
        let store = self.store.clone();
        let digest = digest.clone();
        tokio::spawn(async move {
            if let Err(error) = store.touch_session(&digest, now).await {
                tracing::warn!(%error, session = %digest, "could not record session use");
            }
        });
    }

    fn forget(&self, keep: impl Fn(&Session) -> bool) {
        self.gate.invalidate();
        self.entries.retain(|digest, cached| {
            let is_kept = keep(cached);
            if !is_kept {
                self.touched.remove(digest);
            }
            is_kept
        });
    }
}

impl BusHook for Sessions {
    fn apply(&self, message: &BusMessage) {
        self.gate.apply(
            message,
            || self.forget(|_| false),
            |stale| match stale {
                Stale::Session { session, .. } => self.forget(|cached| &cached.digest != session),
                // A session holds none of its key's settings: only a revoked key ends it.
                stale => {
                    if let Some(is_stale) = stale.of_keys(false) {
                        self.forget(|cached| !is_stale(&cached.agent_id, &cached.key_id));
                    }
                }
            },
        );
    }
}
