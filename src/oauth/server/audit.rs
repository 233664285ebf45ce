//! Audit records of the authorization server: every code issued or refused on the consent page, every token
//! issued, refreshed or refused, in the agent's chain (kind `oauth`), written by the same batching writer
//! as MCP requests. Never a secret: the key appears by id and prefix, the client by id.

use std::net::IpAddr;

use crate::audit::chain::QueuedRecord;
use crate::audit::request::cut;
use crate::domain::AgentId;
use crate::domain::model::{AuditRecord, AuditText, KeyRecord};
use crate::domain::time::Timestamp;
use crate::state::AppState;

/// One event of the authorization server.
pub struct Event<'a> {
    pub agent: &'a AgentId,
    /// The key the event concerns, when known.
    pub key: Option<&'a KeyRecord>,
    /// `oauth/authorize`, `oauth/token`, `oauth/refresh`, `oauth/revoke`.
    pub action: &'static str,
    pub client_id: &'a str,
    /// `ok`, or what was refused (e.g. `code_reused`).
    pub outcome: &'static str,
    pub client_ip: Option<IpAddr>,
}

pub fn record(state: &AppState, event: Event<'_>) {
    let actor = match event.key {
        Some(key) => compact_str::format_compact!("key:{}", key.id),
        None => compact_str::format_compact!("client:{}", cut(event.client_id)),
    };
    let record = AuditRecord {
        id: AuditText::from(uuid::Uuid::now_v7().hyphenated().to_string()),
        agent_id: AuditText::from(event.agent.as_str()),
        occurred_at: Timestamp::now(),
        kind: AuditText::const_new("oauth"),
        actor: cut(&actor),
        action: AuditText::const_new(event.action),
        target: cut(event.client_id),
        key_id: event.key.map(|key| AuditText::from(key.id.as_str())),
        key_prefix: event.key.map(|key| AuditText::from(key.prefix.as_str())),
        method: Some(AuditText::const_new(event.action)),
        outcome: Some(AuditText::const_new(event.outcome)),
        client_ip: event.client_ip.map(|ip| compact_str::ToCompactString::to_compact_string(&ip)),
        ..AuditRecord::default()
    };
    state.audit.record(QueuedRecord::from(&record));
}
