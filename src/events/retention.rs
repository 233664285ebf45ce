//! Event retention: the pruning task that keeps the event table (the outbox notifications are sent and
//! replayed from) within the configured time and count, and removes expired legacy sessions.
//!
//! Every replica runs it; the deletes are idempotent and bounded per statement, so replicas pruning at the
//! same time only share the work. A resumption from a position that was pruned is answered with the resync
//! set (see [`crate::mcp::sse::EventFrames::resync`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use crate::config::{AuditConfig, EventsConfig, SessionsConfig};
use crate::domain::AgentId;
use crate::domain::time::Timestamp;
use crate::store::Store;

/// Audit records deleted per agent and transaction at most.
const AUDIT_PRUNE_BATCH: u32 = 10_000;

/// What is kept: events younger than `max_age` and among the agent's latest `max_count`, sessions seen
/// within `session_idle`, audit records as `audit` says.
#[derive(Debug, Clone)]
pub struct Retention {
    pub max_age: Duration,
    pub max_count: u64,
    pub session_idle: Duration,
    pub every: Duration,
    pub audit: Arc<AuditConfig>,
}

impl Retention {
    pub fn from_config(events: &EventsConfig, sessions: &SessionsConfig, audit: &AuditConfig) -> Self {
        Self {
            max_age: Duration::from_secs(events.retention_secs),
            max_count: events.retention_count,
            session_idle: Duration::from_secs(sessions.idle_timeout_secs),
            every: Duration::from_millis(events.prune_interval_ms),
            audit: Arc::new(audit.clone()),
        }
    }
}

/// The running pruning task. It is owned by the application: dropping this (at shutdown, or when the
/// application is dropped) stops it; a prune that fails is logged and tried again at the next tick.
pub struct Pruner {
    task: JoinHandle<()>,
}

impl Pruner {
    /// Prunes now and then every `retention.every`.
    pub fn start(store: Arc<dyn Store>, retention: Retention) -> Self {
        Self { task: tokio::spawn(run(store, retention)) }
    }
}

impl Drop for Pruner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run(store: Arc<dyn Store>, retention: Retention) {
    let mut ticker = tokio::time::interval(retention.every);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let now = Timestamp::now().as_micros();
        let before = |age: Duration| Timestamp::from_micros(now.saturating_sub(micros(age)));
        match store.prune(before(retention.max_age), retention.max_count, before(retention.session_idle)).await {
            Ok(pruned) if pruned.events > 0 || pruned.sessions > 0 || pruned.rate_buckets > 0 => {
                tracing::debug!(
                    events = pruned.events,
                    sessions = pruned.sessions,
                    rate_buckets = pruned.rate_buckets,
                    "pruned"
                );
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "pruning events and sessions failed; retrying at the next tick"),
        }
        if let Err(error) = prune_audit(store.as_ref(), &retention.audit, now).await {
            tracing::warn!(%error, "pruning the audit log failed; retrying at the next tick");
        }
    }
}

/// Prunes each agent's audit chain to its retention (the agent's own `auditRetentionDays`, else the
/// configuration's; a deleted agent's chain by the configuration), oldest records first, keeping the chain
/// verifiable.
async fn prune_audit(store: &dyn Store, audit: &AuditConfig, now: i64) -> Result<(), crate::store::StoreError> {
    for head in store.audit_heads(None).await? {
        let stored = match AgentId::parse(&head.agent_id) {
            Ok(id) => store.get_agent(&id).await?.and_then(|agent| agent.audit_retention_days),
            Err(_) => None,
        };
        let Some(keep) = audit.retention_of(&head.agent_id, stored) else { continue };
        let before = Timestamp::from_micros(now.saturating_sub(micros(keep)));
        loop {
            let deleted = store.prune_audit(&head.agent_id, before, AUDIT_PRUNE_BATCH).await?;
            if deleted > 0 {
                tracing::debug!(agent = %head.agent_id, deleted, "pruned audit records");
            }
            if deleted < u64::from(AUDIT_PRUNE_BATCH) {
                break;
            }
        }
    }
    Ok(())
}

fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}
