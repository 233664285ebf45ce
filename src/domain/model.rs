//! The registry's records. They serialise to the admin API's JSON shapes (camelCase, RFC 3339 times).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::time::Timestamp;
use super::{AgentId, PromptName, ResourceUri, Scope};

/// A request budget: an agent's (all its keys together) or one key's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RateLimit {
    #[schema(minimum = 1, maximum = 4_294_967_295_i64)]
    pub requests_per_second: u32,
    #[schema(minimum = 1, maximum = 4_294_967_295_i64)]
    pub burst: u32,
    /// Counted in the database by every replica together (exact, one database round trip per request)
    /// instead of by each replica on its own. Shown only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
}

/// A merge-patch of a [`RateLimit`]: the members given replace the current ones, the others stay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateLimitPatch {
    pub requests_per_second: Option<u32>,
    pub burst: Option<u32>,
    pub shared: Option<bool>,
}

impl RateLimitPatch {
    /// `current` with this patch applied; `None` when a member is in neither (no limit to merge into).
    pub fn apply_to(self, current: Option<RateLimit>) -> Option<RateLimit> {
        Some(RateLimit {
            requests_per_second: self.requests_per_second.or(current.map(|c| c.requests_per_second))?,
            burst: self.burst.or(current.map(|c| c.burst))?,
            shared: self.shared.or(current.map(|c| c.shared)).unwrap_or(false),
        })
    }
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Agent {
    #[schema(value_type = String)]
    pub id: AgentId,
    pub name: String,
    pub description: Option<String>,
    pub rate_limit: Option<RateLimit>,
    pub cache_ttl_ms: Option<u64>,
    /// Days this agent's audit records are kept (0: forever); absent: the configured retention.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_retention_days: Option<u32>,
    /// Random per creation: SSE event ids carry it so a re-created agent never replays old ids.
    #[serde(skip)]
    pub epoch: i64,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

/// The fields a new agent is created with (already validated).
#[derive(Debug, Clone)]
pub struct NewAgent {
    pub id: AgentId,
    pub name: String,
    pub description: Option<String>,
    pub rate_limit: Option<RateLimit>,
    pub cache_ttl_ms: Option<u64>,
    pub audit_retention_days: Option<u32>,
}

/// A JSON merge-patch of an agent: `None` leaves a field alone, `Some(None)` clears it.
#[derive(Debug, Clone, Default)]
pub struct AgentPatch {
    pub name: Option<String>,
    pub description: Option<Option<String>>,
    /// `Some(None)` removes the agent's limit; `Some(Some(patch))` merges into it.
    pub rate_limit: Option<Option<RateLimitPatch>>,
    pub cache_ttl_ms: Option<Option<u64>>,
    pub audit_retention_days: Option<Option<u32>>,
}

/// A stored API key: never the key itself, only its digest.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyRecord {
    pub id: String,
    #[serde(skip)]
    pub agent_id: AgentId,
    pub name: Option<String>,
    pub prefix: String,
    pub scopes: Vec<Scope>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Timestamp>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub last_used_at: Option<Timestamp>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub revoked_at: Option<Timestamp>,
    /// The key's own request budget; absent: the configured per-key limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
}

/// A merge-patch of a key: its name and its own rate limit (`Some(None)` clears either).
#[derive(Debug, Clone, Default)]
pub struct KeyPatch {
    pub name: Option<Option<String>>,
    pub rate_limit: Option<Option<RateLimitPatch>>,
}

impl KeyRecord {
    /// Whether the key may be used at `now`: not revoked and not expired.
    pub fn is_usable_at(&self, now: Timestamp) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|at| now < at)
    }

    /// [`KeyRecord::is_usable_at`] now; the clock is only read for a key that expires.
    pub fn is_usable_now(&self) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|at| Timestamp::now() < at)
    }

    pub fn has_scope(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
    }
}

/// A key to be stored; `digest` is the hex digest of the plain key.
#[derive(Debug, Clone)]
pub struct NewKey {
    pub id: String,
    pub agent_id: AgentId,
    pub name: Option<String>,
    pub prefix: String,
    pub digest: String,
    pub scopes: Vec<Scope>,
    pub expires_at: Option<Timestamp>,
    pub rate_limit: Option<RateLimit>,
}

/// A resource's content: UTF-8 text or raw bytes (base64 only on the wire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    Text(String),
    Blob(Vec<u8>),
}

impl Content {
    pub fn size(&self) -> u64 {
        match self {
            Content::Text(text) => text.len() as u64,
            Content::Blob(bytes) => bytes.len() as u64,
        }
    }
}

/// A resource without its content, as lists show it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    #[schema(value_type = String)]
    pub uri: ResourceUri,
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub mime_type: Option<String>,
    pub size: u64,
    pub annotations: Option<Value>,
    #[serde(rename = "_meta")]
    pub meta: Option<Value>,
    /// Bumped on every replace; starts at 1.
    #[serde(skip)]
    pub version: i64,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

/// A resource to be stored (already validated).
#[derive(Debug, Clone)]
pub struct NewResource {
    pub uri: ResourceUri,
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub mime_type: Option<String>,
    pub annotations: Option<Value>,
    pub meta: Option<Value>,
    pub content: Content,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceTemplate {
    pub uri_template: String,
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub mime_type: Option<String>,
    pub annotations: Option<Value>,
    /// A MiniJinja template rendered with the URI's variables on `resources/read`.
    pub text: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

#[derive(Debug, Clone)]
pub struct NewResourceTemplate {
    pub uri_template: String,
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub mime_type: Option<String>,
    pub annotations: Option<Value>,
    pub text: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromptArgument {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    /// Values `completion/complete` offers for this argument (admin-only, not in `prompts/list`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions: Option<Vec<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PromptMessage {
    pub role: Role,
    /// An MCP content block (`text`, `image`, `audio`, `resource_link`, `resource`); text fields are templates.
    #[schema(value_type = Object)]
    pub content: Value,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Prompt {
    #[schema(value_type = String)]
    pub name: PromptName,
    pub title: Option<String>,
    pub description: Option<String>,
    pub arguments: Vec<PromptArgument>,
    pub messages: Vec<PromptMessage>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

#[derive(Debug, Clone)]
pub struct NewPrompt {
    pub name: PromptName,
    pub title: Option<String>,
    pub description: Option<String>,
    pub arguments: Vec<PromptArgument>,
    pub messages: Vec<PromptMessage>,
}

/// One committed registry change, as the event table keeps it. `seq` is per agent, without gaps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeEvent {
    pub agent_id: AgentId,
    pub seq: i64,
    /// URIs whose content or metadata changed or that were deleted (`notifications/resources/updated`).
    pub updated_uris: Vec<String>,
    /// The resource or template list changed (`notifications/resources/list_changed`).
    pub resources_list_changed: bool,
    /// The prompt list changed (`notifications/prompts/list_changed`).
    pub prompts_list_changed: bool,
    pub created_at: Timestamp,
}

/// Who made an admin change, for the audit record written in the change's transaction.
#[derive(Debug, Clone)]
pub struct Actor {
    /// `operator` or `key:<key id>`.
    pub name: String,
    pub request_id: Option<String>,
}

/// What an admin change did, as its audit record names it (`action`): the subject, a dot, the verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditAction {
    AgentCreate,
    AgentUpdate,
    AgentDelete,
    KeyCreate,
    KeyUpdate,
    KeyRevoke,
    ResourcePut,
    ResourceDelete,
    TemplatePut,
    TemplateDelete,
    PromptPut,
    PromptDelete,
    OAuthSubjectPut,
    OAuthSubjectDelete,
}

impl AuditAction {
    /// The action as audit records store it, e.g. `agent.create`, `template.delete`.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::AgentCreate => "agent.create",
            AuditAction::AgentUpdate => "agent.update",
            AuditAction::AgentDelete => "agent.delete",
            AuditAction::KeyCreate => "key.create",
            AuditAction::KeyUpdate => "key.update",
            AuditAction::KeyRevoke => "key.revoke",
            AuditAction::ResourcePut => "resource.put",
            AuditAction::ResourceDelete => "resource.delete",
            AuditAction::TemplatePut => "template.put",
            AuditAction::TemplateDelete => "template.delete",
            AuditAction::PromptPut => "prompt.put",
            AuditAction::PromptDelete => "prompt.delete",
            AuditAction::OAuthSubjectPut => "oauth_subject.put",
            AuditAction::OAuthSubjectDelete => "oauth_subject.delete",
        }
    }
}

/// Which audit records a query wants; every field narrows the result.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub agent: Option<AgentId>,
    /// Records at or after this time.
    pub since: Option<Timestamp>,
    /// Records before this time.
    pub until: Option<Timestamp>,
    /// The MCP method, or for admin changes the action (e.g. `resource.put`).
    pub method: Option<String>,
    /// MCP requests made with this key: its id or its prefix.
    pub key: Option<String>,
    /// MCP requests with this outcome (`ok` or `error`).
    pub outcome: Option<String>,
}

/// The audit record's text fields: a string of up to 24 bytes (a method, an agent id, an outcome, an
/// address) is held inline, without an allocation of its own. The writer holds thousands of MCP request
/// records between batches, and each heap allocation among them is memory a request later reuses cold.
pub type AuditText = compact_str::CompactString;

/// One audit record: an admin change (`kind` `admin`) or an MCP request (`kind` `mcp`).
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    pub id: AuditText,
    pub agent_id: AuditText,
    #[schema(value_type = String, format = DateTime)]
    pub occurred_at: Timestamp,
    pub kind: AuditText,
    pub actor: AuditText,
    pub action: AuditText,
    pub target: AuditText,
    pub before_digest: Option<AuditText>,
    pub after_digest: Option<AuditText>,
    pub request_id: Option<AuditText>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_id: Option<AuditText>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_prefix: Option<AuditText>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<AuditText>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<AuditText>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<AuditText>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_out: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_ip: Option<AuditText>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<AuditText>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<AuditText>,
    /// Position in the agent's hash chain (from 1); see [`crate::audit::chain`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chain_seq: Option<i64>,
    /// Hash of the record before this one in the chain (`""` for the first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prev_hash: Option<AuditText>,
    /// `hex(SHA-256(prevHash + "\n" + fields))`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash: Option<AuditText>,
}

/// A place in the audit log's order (time desc, id desc): where a page resumes, after the record there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPosition {
    pub occurred_at: Timestamp,
    pub id: String,
}

impl AuditPosition {
    /// The position of `record`.
    pub fn of(record: &AuditRecord) -> Self {
        Self { occurred_at: record.occurred_at, id: record.id.to_string() }
    }

    /// As a cursor carries it: `<occurred_at in microseconds>:<id>`.
    pub fn to_key(&self) -> String {
        format!("{}:{}", self.occurred_at.as_micros(), self.id)
    }

    /// The position a cursor's key names; `None` for anything [`Self::to_key`] cannot have written.
    pub fn from_key(key: &str) -> Option<Self> {
        let (micros, id) = key.split_once(':')?;
        let micros = micros.parse().ok()?;
        (!id.is_empty()).then(|| Self { occurred_at: Timestamp::from_micros(micros), id: id.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_positions_round_trip_through_cursor_keys() {
        let position = AuditPosition {
            occurred_at: Timestamp::from_micros(1_700_000_000_123_456),
            id: "019a1b2c-3d4e-7f00-8123-456789abcdef".to_owned(),
        };
        assert_eq!(position.to_key(), "1700000000123456:019a1b2c-3d4e-7f00-8123-456789abcdef");
        assert_eq!(AuditPosition::from_key(&position.to_key()), Some(position));
        // An id alone (what cursors carried before), or anything malformed, is no position.
        for key in ["019a1b2c-3d4e-7f00-8123-456789abcdef", "", ":", "12:", "x:id", "1.5:id"] {
            assert_eq!(AuditPosition::from_key(key), None, "{key}");
        }
    }
}
