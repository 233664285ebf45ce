//! Subject grants: which subjects of the external authorization server may use an agent, and as which key.

use serde::Serialize;

use crate::domain::AgentId;
use crate::domain::time::Timestamp;

/// A subject (the `sub` of an external issuer's tokens) granted on an agent: its tokens act as `key_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubjectGrant {
    #[serde(skip)]
    pub agent_id: AgentId,
    /// The issuer identifier the subject belongs to (`oauth.issuer` when it was granted).
    pub issuer: String,
    /// The token's `sub`.
    pub subject: String,
    /// The key of the agent the subject's tokens act as: its scopes, rate limit, expiry and revocation apply.
    pub key_id: String,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}
