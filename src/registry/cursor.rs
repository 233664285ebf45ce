//! Pagination cursors: opaque to clients, authenticated, bound to the agent and the list.
//!
//! A cursor is base64url (no padding) of `version ‖ last` followed by an HMAC-SHA-256 tag over
//! `version ‖ kind ‖ len(agent) ‖ agent ‖ last`. `last` is the sort key of the last item of the page
//! before (a URI, a name, an id). The agent and the list kind are in the tag, not in the cursor, so a
//! cursor replayed on another agent or another list fails the tag check. The key is a database setting,
//! so every replica accepts every cursor; the admin API and the MCP endpoint share the format.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The format version, first byte of every payload; a new format gets a new number.
const VERSION: u8 = 1;
/// Bytes of the HMAC-SHA-256 tag.
const TAG_BYTES: usize = 32;
/// Longer cursors are refused before any work: no sort key (at most a 2048-byte URI) needs more.
const MAX_CURSOR_CHARS: usize = 4096;

/// Which list a cursor pages through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListKind {
    Agents,
    Keys,
    Resources,
    Templates,
    Prompts,
    Audit,
    OauthSubjects,
}

impl ListKind {
    fn tag(self) -> u8 {
        match self {
            ListKind::Agents => 1,
            ListKind::Keys => 2,
            ListKind::Resources => 3,
            ListKind::Templates => 4,
            ListKind::Prompts => 5,
            ListKind::Audit => 6,
            ListKind::OauthSubjects => 7,
        }
    }
}

/// The cursor was not made by this gateway for this agent and list (or was altered).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid cursor")]
pub struct InvalidCursor;

/// Signs and checks cursors with the key all replicas share.
pub struct CursorCodec {
    key: [u8; 32],
}

impl std::fmt::Debug for CursorCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CursorCodec(redacted)")
    }
}

impl CursorCodec {
    pub fn new(key: [u8; 32]) -> Self {
        Self { key }
    }

    /// The codec for a stored key: 64 hex digits.
    pub fn from_hex(hex_key: &str) -> Option<Self> {
        let mut key = [0u8; 32];
        hex::decode_to_slice(hex_key.trim(), &mut key).ok()?;
        Some(Self::new(key))
    }

    /// The cursor of the page that follows the item whose sort key is `last`.
    pub fn encode(&self, kind: ListKind, agent: &str, last: &str) -> String {
        let mut token = Vec::with_capacity(1 + last.len() + TAG_BYTES);
        token.push(VERSION);
        token.extend_from_slice(last.as_bytes());
        let tag = self.mac(kind, agent, &token).finalize().into_bytes();
        token.extend_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(token)
    }

    /// The sort key a cursor resumes after; `""` is the first page (`None`).
    pub fn decode(&self, kind: ListKind, agent: &str, cursor: &str) -> Result<Option<String>, InvalidCursor> {
        if cursor.is_empty() {
            return Ok(None);
        }
        if cursor.len() > MAX_CURSOR_CHARS {
            return Err(InvalidCursor);
        }
        let token = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| InvalidCursor)?;
        if token.len() < 1 + TAG_BYTES {
            return Err(InvalidCursor);
        }
        let (payload, tag) = token.split_at(token.len() - TAG_BYTES);
        // `verify_slice` compares in constant time.
        self.mac(kind, agent, payload).verify_slice(tag).map_err(|_| InvalidCursor)?;
        if payload[0] != VERSION {
            return Err(InvalidCursor);
        }
        String::from_utf8(payload[1..].to_vec()).map(Some).map_err(|_| InvalidCursor)
    }

    fn mac(&self, kind: ListKind, agent: &str, payload: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC accepts keys of any length");
        mac.update(&[VERSION, kind.tag()]);
        // The agent's length keeps `agent ‖ payload` unambiguous.
        mac.update(&(agent.len() as u32).to_be_bytes());
        mac.update(agent.as_bytes());
        mac.update(payload);
        mac
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codec() -> CursorCodec {
        CursorCodec::new([7u8; 32])
    }

    #[test]
    fn round_trip() {
        let codec = codec();
        for last in ["test://items/apple", "", "é/ü ☃", "x".repeat(2048).as_str()] {
            let cursor = codec.encode(ListKind::Resources, "bot", last);
            assert!(cursor.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{cursor}");
            assert_eq!(codec.decode(ListKind::Resources, "bot", &cursor), Ok(Some(last.to_owned())));
        }
    }

    #[test]
    fn empty_is_the_first_page() {
        assert_eq!(codec().decode(ListKind::Agents, "", ""), Ok(None));
    }

    #[test]
    fn tampered_cursors_are_refused() {
        let codec = codec();
        let cursor = codec.encode(ListKind::Prompts, "bot", "alpha");
        let mut bytes = URL_SAFE_NO_PAD.decode(&cursor).expect("base64url");
        bytes[2] ^= 1;
        let tampered = URL_SAFE_NO_PAD.encode(&bytes);
        assert_eq!(codec.decode(ListKind::Prompts, "bot", &tampered), Err(InvalidCursor));
        let truncated = &cursor[..cursor.len() - 2];
        assert_eq!(codec.decode(ListKind::Prompts, "bot", truncated), Err(InvalidCursor));
    }

    #[test]
    fn cursors_are_bound_to_agent_kind_and_key() {
        let codec = codec();
        let cursor = codec.encode(ListKind::Resources, "bot", "x://a");
        assert_eq!(codec.decode(ListKind::Resources, "other", &cursor), Err(InvalidCursor));
        assert_eq!(codec.decode(ListKind::Templates, "bot", &cursor), Err(InvalidCursor));
        assert_eq!(CursorCodec::new([8u8; 32]).decode(ListKind::Resources, "bot", &cursor), Err(InvalidCursor));
        // The agent's length is authenticated: "bo" + "t..." is not "bot" + "...".
        let shifted = codec.encode(ListKind::Resources, "bo", "tx://a");
        assert_eq!(codec.decode(ListKind::Resources, "bot", &shifted), Err(InvalidCursor));
    }

    #[test]
    fn garbage_is_refused() {
        let codec = codec();
        for garbage in ["not a cursor", "AAAA", "====", "%%%", &"A".repeat(5000)] {
            assert_eq!(codec.decode(ListKind::Agents, "", garbage), Err(InvalidCursor), "{garbage}");
        }
    }

    #[test]
    fn hex_keys() {
        assert!(CursorCodec::from_hex(&"ab".repeat(32)).is_some());
        assert!(CursorCodec::from_hex("abcd").is_none());
        assert!(CursorCodec::from_hex(&"zz".repeat(32)).is_none());
    }
}
