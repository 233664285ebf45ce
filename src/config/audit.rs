//! `[audit]`: the audit log of MCP requests, its queue and its retention.

use serde::{Deserialize, Serialize};

section! {
    /// The audit log of MCP requests (admin changes are always audited, in their own transaction).
    #[derive(Clone)]
    pub struct AuditConfig {
        /// Record every MCP request.
        pub mcp_requests: bool = true,
        /// Records waiting to be written at most; beyond this new records are dropped (and counted). Unset:
        /// as many as a sixty-fourth of the memory the process may use holds, at least 65,536 and at most
        /// 1,048,576 ([`AuditConfig::queue_records`]).
        pub queue_capacity: Option<usize> = None,
        /// Records written per transaction at most (a batch that fills few rows is written sooner: from 200
        /// records a row the last batch made, at least 1,000, or a fifth of this when that is fewer).
        pub batch_size: usize = 15_000,
        /// How long a record may wait before its batch is written.
        pub flush_interval_ms: u64 = 200,
        /// Records (admin and MCP) older than this many days are pruned; 0 keeps them forever.
        pub retention_days: u64 = 90,
        /// Per-agent exceptions to `retention_days` (agent id → days; 0 keeps that agent's records forever).
        pub agent_retention_days: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new(),
        /// What an MCP request meets when the queue is full: served and its record dropped, or refused (503).
        pub on_overload: OnOverload = OnOverload::Drop,
    }
}

/// What happens to an MCP request while the audit queue is full.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnOverload {
    /// Serve it; its record is dropped (counted and logged).
    #[default]
    Drop,
    /// Refuse it: 503 with `Retry-After`, JSON-RPC -31503.
    Reject,
}

/// About what a record waiting in the audit queue holds, in bytes (docs/operations.md): what the default
/// queue capacity counts per record.
pub const QUEUED_RECORD_BYTES: u64 = 470;
/// The least queue capacity the default gives: a small container's (0.77 s of records at 85,000 requests a
/// second, about 30 MiB).
pub const MIN_DEFAULT_QUEUE_RECORDS: usize = 65_536;
/// The most queue capacity the default gives, however large the machine (about 470 MiB of records).
pub const MAX_DEFAULT_QUEUE_RECORDS: usize = 1_048_576;

/// The queue capacity when `audit.queue_capacity` is unset, for a process that may use `memory` bytes: the
/// records a sixty-fourth of it holds, within [`MIN_DEFAULT_QUEUE_RECORDS`] and [`MAX_DEFAULT_QUEUE_RECORDS`].
/// The queue holds records only while the writer is behind, so the capacity costs memory only then.
pub fn default_queue_records(memory: Option<u64>) -> usize {
    let records = memory.map_or(0, |bytes| bytes / 64 / QUEUED_RECORD_BYTES);
    usize::try_from(records).unwrap_or(usize::MAX).clamp(MIN_DEFAULT_QUEUE_RECORDS, MAX_DEFAULT_QUEUE_RECORDS)
}

impl AuditConfig {
    /// The audit queue's capacity in records: `queue_capacity`, or when it is unset the share of memory it
    /// defaults to ([`default_queue_records`]).
    pub fn queue_records(&self) -> usize {
        self.queue_capacity.unwrap_or_else(|| default_queue_records(crate::registry::cache::process_memory()))
    }

    /// How long `agent`'s records are kept; `None` is forever. `stored` is the agent's own
    /// `auditRetentionDays` (admin API), which wins over this configuration.
    pub fn retention_of(&self, agent: &str, stored: Option<u32>) -> Option<std::time::Duration> {
        let days = stored
            .map(u64::from)
            .or_else(|| self.agent_retention_days.get(agent).copied())
            .unwrap_or(self.retention_days);
        (days > 0).then(|| std::time::Duration::from_secs(days.saturating_mul(24 * 60 * 60)))
    }
}
