//! What the built-in authorization server ([`crate::oauth::server`]) keeps: registered clients, one-time
//! authorization codes and tokens, all secrets as digests. Its own trait beside [`Store`], so the
//! server's tables stay out of the registry's interface; both backends implement it with the same SQL
//! (`super::sql::oauth_server`).
//!
//! [`Store`]: crate::store::Store

use async_trait::async_trait;

use super::StoreResult;
use crate::domain::AgentId;
use crate::domain::time::Timestamp;

/// A client registered through Dynamic Client Registration.
#[derive(Debug, Clone)]
pub struct StoredClient {
    pub id: String,
    pub name: Option<String>,
    pub redirect_uris: Vec<String>,
    pub last_used_at: Timestamp,
    pub created_at: Timestamp,
}

/// An authorization code as issued: the digest of the code and what the grant it starts is bound to.
#[derive(Debug, Clone)]
pub struct NewCode {
    pub digest: String,
    pub family_id: String,
    pub client_id: String,
    pub agent_id: AgentId,
    pub key_id: String,
    pub redirect_uri: String,
    pub resource: String,
    pub scopes: String,
    pub code_challenge: String,
    pub expires_at: Timestamp,
    pub created_at: Timestamp,
}

/// A stored authorization code.
#[derive(Debug, Clone)]
pub struct StoredCode {
    pub code: NewCode,
    /// When it was exchanged, if it was.
    pub used_at: Option<Timestamp>,
}

/// Access or refresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    Access,
    Refresh,
}

impl TokenKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenKind::Access => "access",
            TokenKind::Refresh => "refresh",
        }
    }
}

/// A token as issued.
#[derive(Debug, Clone)]
pub struct NewToken {
    pub digest: String,
    pub kind: TokenKind,
    pub family_id: String,
    pub client_id: String,
    pub agent_id: AgentId,
    pub key_id: String,
    pub resource: String,
    pub scopes: String,
    pub expires_at: Timestamp,
    pub created_at: Timestamp,
}

/// A stored token.
#[derive(Debug, Clone)]
pub struct StoredToken {
    pub token: NewToken,
    pub used_at: Option<Timestamp>,
    pub revoked_at: Option<Timestamp>,
}

/// What exchanging a code or rotating a refresh token found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exchange {
    /// It was unused: it is now used, and the new tokens are stored.
    Done,
    /// It had been used (or revoked) already: nothing was issued, and its whole family is now revoked.
    Replayed,
}

/// How many rows a prune deleted, by table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OAuthPruned {
    pub clients: u64,
    pub codes: u64,
    pub tokens: u64,
}

/// The bound client registration is held to, and which clients go to make room under it.
#[derive(Debug, Clone, Copy)]
pub struct ClientBounds {
    /// Registered clients at most.
    pub max_clients: u64,
    /// Clients unused since then may be deleted.
    pub idle_before: Timestamp,
    /// Clients never used that registered before then may be deleted.
    pub never_used_before: Timestamp,
}

/// The bounds a write is held to.
#[derive(Debug, Clone, Copy)]
pub struct GrantBounds {
    /// Live (unexpired, unused) codes one key may have outstanding.
    pub max_codes_per_key: u32,
    /// Live grants (refresh token families) one key may hold; the oldest is revoked to make room.
    pub max_grants_per_key: u32,
}

#[async_trait]
pub trait OAuthServerStore: Send + Sync {
    /// Stores a new client unless `bounds.max_clients` are registered: then the clients `bounds` names as
    /// stale are deleted first (so that registrations nobody follows up cannot hold the table), and if that
    /// made no room, nothing is stored and the answer is `false`.
    async fn register_client(&self, client: &StoredClient, bounds: ClientBounds) -> StoreResult<bool>;
    async fn get_client(&self, id: &str) -> StoreResult<Option<StoredClient>>;
    /// Records use of a registered client (callers write it at most once a minute per client).
    async fn touch_client(&self, id: &str, at: Timestamp) -> StoreResult<()>;

    /// Stores a code unless its key has `bounds.max_codes_per_key` live ones (`false`, nothing stored).
    /// `NotFound` when the key or its agent no longer exists.
    async fn create_code(&self, code: &NewCode, bounds: GrantBounds) -> StoreResult<bool>;
    async fn find_code(&self, digest: &str) -> StoreResult<Option<StoredCode>>;
    /// Marks the code used and stores `tokens` (a new grant; the key's oldest grants are revoked to keep
    /// within `bounds`), in one transaction; a code used before revokes its family instead.
    async fn exchange_code(
        &self,
        digest: &str,
        at: Timestamp,
        tokens: &[NewToken],
        bounds: GrantBounds,
    ) -> StoreResult<Exchange>;

    async fn find_token(&self, digest: &str) -> StoreResult<Option<StoredToken>>;
    /// Marks the refresh token used and stores `tokens` (its successors in the same family), in one
    /// transaction; a refresh token used or revoked before revokes its family instead.
    async fn rotate_refresh(&self, digest: &str, at: Timestamp, tokens: &[NewToken]) -> StoreResult<Exchange>;
    /// Revokes every token of a grant.
    async fn revoke_family(&self, family_id: &str, at: Timestamp) -> StoreResult<()>;
    /// Revokes one access token.
    async fn revoke_token(&self, digest: &str, at: Timestamp) -> StoreResult<()>;

    /// Deletes codes and tokens that expired before `expired_before`, and registered clients unused since
    /// `idle_before`, in bounded batches.
    async fn prune_oauth(&self, expired_before: Timestamp, idle_before: Timestamp) -> StoreResult<OAuthPruned>;
}
