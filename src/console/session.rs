//! Console sessions: who signed in, their CSRF token, when they were last seen.
//!
//! A session id is 32 random bytes (base64url) given to the browser in the `hivegate_console` cookie; the
//! map is keyed by the id's SHA-256, so the ids themselves are kept nowhere on the server. Each session has
//! its own CSRF token (a synchronizer token: every form carries it, every change compares it in constant
//! time). A session ends at sign-out, after `http.console_idle_timeout_secs` without a request, or when the
//! key it was opened with stops being usable (checked on every request).
//!
//! Sessions live in this replica's memory: nothing secret is stored in the database, sign-out and expiry
//! take effect at once, and no migration is needed. Behind several replicas, route `/console/` with session
//! affinity (or sign in again on the other replica); a restart signs everyone out.

use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::FastMap;
use crate::domain::AgentId;

/// Sessions one replica keeps; a sign-in beyond it ends the session seen least recently. Each holds a few
/// hundred bytes, so the map stays under a few megabytes whoever signs in.
pub const MAX_SESSIONS: usize = 10_000;
/// Sessions one credential (the operator token, or one key) keeps; a sign-in beyond it ends that
/// credential's session seen least recently, so that no one can push others' sessions out by signing in
/// again and again.
pub const MAX_SESSIONS_PER_CREDENTIAL: usize = 8;
/// The longest a session lasts however active it is (a page left open refreshes itself).
pub const MAX_SESSION_AGE: Duration = Duration::from_secs(12 * 3600);

/// Who a session belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// Signed in with the operator token: everything, for as long as that token is in force (`token` is
    /// [`crate::http::auth::OperatorToken::fingerprint`] at sign-in).
    Operator { token: String },
    /// Signed in with a `registry` key: that agent only. `digest` is the key's stored digest (hex), looked up
    /// again on every request so that a revoked or expired key ends the session.
    Agent { agent: AgentId, key_id: String, key_prefix: String, digest: String },
}

impl Principal {
    /// How audit records name a change made through the console: the channel, then the credential.
    pub fn actor_name(&self) -> String {
        match self {
            Principal::Operator { .. } => "console:operator".to_owned(),
            Principal::Agent { key_id, .. } => format!("console:key:{key_id}"),
        }
    }

    /// Whether this principal may see and change `agent`.
    pub fn may_manage(&self, agent: &AgentId) -> bool {
        match self {
            Principal::Operator { .. } => true,
            Principal::Agent { agent: own, .. } => own == agent,
        }
    }

    pub fn is_operator(&self) -> bool {
        matches!(self, Principal::Operator { .. })
    }

    /// Whether `other` signed in with the same credential (the operator token, or the same key).
    fn is_same_credential(&self, other: &Principal) -> bool {
        match (self, other) {
            (Principal::Operator { .. }, Principal::Operator { .. }) => true,
            (Principal::Agent { key_id, .. }, Principal::Agent { key_id: other, .. }) => key_id == other,
            _ => false,
        }
    }
}

/// One signed-in browser.
#[derive(Debug, Clone)]
pub struct Session {
    pub principal: Principal,
    /// Compared with the `csrf` field of every form that changes something.
    pub csrf: String,
    last_seen: Instant,
    opened: Instant,
}

impl Session {
    /// Whether `presented` is this session's CSRF token (constant time).
    pub fn is_csrf(&self, presented: &str) -> bool {
        bool::from(self.csrf.as_bytes().ct_eq(presented.as_bytes()))
    }
}

/// The sessions of this replica, by the SHA-256 of their id. A sharded map: every console request looks
/// its session up, and no entry is held across an `.await`.
pub struct ConsoleSessions {
    sessions: FastMap<[u8; 32], Session>,
    idle: Duration,
    /// The overview's last request total, for its rate.
    pub rate: super::overview::RateSample,
}

impl ConsoleSessions {
    pub fn new(idle: Duration) -> Self {
        Self { sessions: FastMap::default(), idle, rate: Default::default() }
    }

    pub fn idle_timeout(&self) -> Duration {
        self.idle
    }

    /// Opens a session for `principal`; returns its id (for the cookie) and the session.
    pub fn open(&self, principal: Principal) -> (String, Session) {
        self.reclaim();
        let mut own: Vec<(Instant, [u8; 32])> = self
            .sessions
            .iter()
            .filter(|entry| entry.principal.is_same_credential(&principal))
            .map(|entry| (entry.last_seen, *entry.key()))
            .collect();
        if own.len() >= MAX_SESSIONS_PER_CREDENTIAL {
            own.sort_unstable();
            for (_, key) in &own[..=own.len() - MAX_SESSIONS_PER_CREDENTIAL] {
                self.sessions.remove(key);
            }
        }
        if self.sessions.len() >= MAX_SESSIONS {
            let oldest = self.sessions.iter().min_by_key(|entry| entry.last_seen).map(|entry| *entry.key());
            if let Some(oldest) = oldest {
                self.sessions.remove(&oldest);
            }
        }
        let id = random_token();
        let now = Instant::now();
        let session = Session { principal, csrf: random_token(), last_seen: now, opened: now };
        self.sessions.insert(digest(&id), session.clone());
        (id, session)
    }

    /// The session with this id, seen now; `None` when there is none or it has been idle too long.
    pub fn touch(&self, id: &str) -> Option<Session> {
        let key = digest(id);
        let mut entry = self.sessions.get_mut(&key)?;
        if entry.last_seen.elapsed() >= self.idle || entry.opened.elapsed() >= MAX_SESSION_AGE {
            drop(entry);
            self.sessions.remove(&key);
            return None;
        }
        entry.last_seen = Instant::now();
        Some(entry.clone())
    }

    /// Ends the session with this id (sign-out, or its key is no longer usable).
    pub fn end(&self, id: &str) {
        self.sessions.remove(&digest(id));
    }

    /// Forgets idle sessions; returns how many are left.
    pub fn reclaim(&self) -> usize {
        self.sessions
            .retain(|_, session| session.last_seen.elapsed() < self.idle && session.opened.elapsed() < MAX_SESSION_AGE);
        self.sessions.len()
    }
}

/// 32 random bytes, base64url without padding.
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

fn digest(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_open_expire_and_end() {
        let sessions = ConsoleSessions::new(Duration::from_millis(50));
        let (id, session) = sessions.open(Principal::Operator { token: "t".to_owned() });
        assert_eq!(id.len(), 43);
        assert!(session.is_csrf(&session.csrf));
        assert!(!session.is_csrf("x"));
        assert!(sessions.touch(&id).is_some());
        assert!(sessions.touch("another").is_none());
        std::thread::sleep(Duration::from_millis(60));
        assert!(sessions.touch(&id).is_none(), "idle too long");
        let (id, _) = sessions.open(Principal::Operator { token: "t".to_owned() });
        sessions.end(&id);
        assert!(sessions.touch(&id).is_none(), "signed out");
    }

    #[test]
    fn a_key_manages_its_own_agent_only() {
        let own = AgentId::parse("a").expect("id");
        let other = AgentId::parse("b").expect("id");
        let key = Principal::Agent {
            agent: own.clone(),
            key_id: "k".to_owned(),
            key_prefix: "bak_x".to_owned(),
            digest: String::new(),
        };
        assert!(key.may_manage(&own) && !key.may_manage(&other) && !key.is_operator());
        assert!(Principal::Operator { token: "t".to_owned() }.may_manage(&other));
        assert_eq!(key.actor_name(), "console:key:k");
    }
}
