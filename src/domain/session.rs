//! Legacy Streamable HTTP sessions (protocol versions 2024-11-05 … 2025-11-25): the id a client holds,
//! the digest the database keys it by, and the stored record.
//!
//! A session id is a bearer value like a key (it is only ever accepted together with the key that created
//! it), so the same care applies: 256 random bits from the operating system's CSPRNG, only a digest stored,
//! never logged.

use std::fmt;

use sha2::{Digest, Sha256};

use super::AgentId;
use super::key::random_token;
use super::time::Timestamp;

/// Every session id starts with this, so that a session id is never mistaken for a key.
pub const SESSION_PREFIX: &str = "hgs_";

/// An `Mcp-Session-Id` as the client holds it: visible ASCII only, as the transport requires.
pub struct SessionToken(String);

impl SessionToken {
    /// A new id: the prefix and 43 random base62 characters (≈ 256 bits).
    pub fn generate() -> Self {
        Self(random_token(SESSION_PREFIX))
    }

    /// A presented id; anything without a session id's shape cannot be one and is refused without a lookup.
    pub fn parse(value: &str) -> Option<Self> {
        let rest = value.strip_prefix(SESSION_PREFIX)?;
        let well_formed = rest.len() >= 32 && rest.len() <= 128 && rest.bytes().all(|b| b.is_ascii_alphanumeric());
        well_formed.then(|| Self(value.to_owned()))
    }

    /// The value for the `Mcp-Session-Id` response header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// What the database keys the session by.
    pub fn digest(&self) -> SessionDigest {
        SessionDigest(crate::domain::hex(Sha256::digest(self.0.as_bytes())))
    }
}

impl fmt::Debug for SessionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionToken(redacted)")
    }
}

/// Hex SHA-256 of a session id: the session's key in the database, in bus messages and in memory.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct SessionDigest(String);

super::id::deserialize_parsed!(SessionDigest, SessionDigest::from_hex);

impl SessionDigest {
    /// A digest as stored; `None` unless it is 64 lowercase hex digits.
    pub fn from_hex(value: &str) -> Option<Self> {
        let is_hex = value.len() == 64 && value.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        is_hex.then(|| Self(value.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A prefix is enough to tell sessions apart in logs.
        f.write_str(&self.0[..self.0.len().min(12)])
    }
}

/// A stored session.
#[derive(Debug, Clone)]
pub struct Session {
    pub digest: SessionDigest,
    pub agent_id: AgentId,
    /// The key that created the session; no other key may use it.
    pub key_id: String,
    /// The version `initialize` negotiated; the default for requests without `MCP-Protocol-Version`.
    pub protocol_version: String,
    /// The last request or keep-alive seen (as far as the database knows).
    pub last_seen_at: Timestamp,
    pub created_at: Timestamp,
}

impl Session {
    /// Whether the session has been idle for longer than `idle_micros` at `now`.
    pub fn is_expired_at(&self, now: Timestamp, idle_micros: i64) -> bool {
        now.as_micros().saturating_sub(self.last_seen_at.as_micros()) > idle_micros
    }
}

/// What [`crate::store::SessionStore::prune`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub events: u64,
    pub sessions: u64,
    /// Idle (full) shared rate-limit buckets.
    pub rate_buckets: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_are_recognised() {
        let token = SessionToken::generate();
        assert!(token.expose().starts_with(SESSION_PREFIX));
        assert!(token.expose().bytes().all(|b| (0x21..0x7f).contains(&b)), "visible ASCII only");
        let parsed = SessionToken::parse(token.expose()).expect("a generated id parses");
        assert_eq!(parsed.digest(), token.digest());
        assert_ne!(SessionToken::generate().digest(), token.digest());
        assert!(SessionToken::parse("bak_0123456789abcdef0123456789abcdef").is_none());
        assert!(SessionToken::parse("hgs_short").is_none());
        assert!(SessionToken::parse("hgs_0123456789abcdef0123456789abcdef!").is_none());
        assert!(!format!("{token:?}").contains(&token.expose()[4..]));
    }

    #[test]
    fn digests_are_checked() {
        let digest = SessionToken::generate().digest();
        assert_eq!(SessionDigest::from_hex(digest.as_str()), Some(digest.clone()));
        assert!(SessionDigest::from_hex("xyz").is_none());
        assert_eq!(digest.to_string().len(), 12);
    }

    #[test]
    fn expiry_is_by_idle_time() {
        let session = Session {
            digest: SessionToken::generate().digest(),
            agent_id: AgentId::parse("bot").expect("id"),
            key_id: "k".to_owned(),
            protocol_version: "2025-11-25".to_owned(),
            last_seen_at: Timestamp::from_micros(1_000_000),
            created_at: Timestamp::from_micros(0),
        };
        assert!(!session.is_expired_at(Timestamp::from_micros(2_000_000), 1_000_000));
        assert!(session.is_expired_at(Timestamp::from_micros(2_000_001), 1_000_000));
    }
}
