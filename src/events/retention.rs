//! Event retention: the pruning task that keeps the event table (the outbox notifications are sent and
//! replayed from) within the configured time and count, and removes expired legacy sessions.
//!
//! Every replica runs it; the deletes are idempotent and bounded per statement, so replicas pruning at the
//! same time only share the work. A resumption from a position that was pruned is answered with the resync
//! set (see [`crate::mcp::stream::sse::EventFrames::resync`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::MissedTickBehavior;

use crate::audit::stream::RowHead;
use crate::config::{AuditConfig, EventsConfig, SessionsConfig};
use crate::domain::AgentId;
use crate::domain::time::Timestamp;
use crate::store::{Store, StreamRows};
use crate::task::AbortOnDrop;

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
    _task: AbortOnDrop,
}

impl Pruner {
    /// Prunes now and then every `retention.every`.
    pub fn start(store: Arc<dyn Store>, retention: Retention) -> Self {
        Self { _task: AbortOnDrop::spawn(run(store, retention)) }
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
        if let Err(error) = prune_audit_streams(store.as_ref(), &retention.audit, now).await {
            tracing::warn!(%error, "pruning the audit log's streams failed; retrying at the next tick");
        }
    }
}

/// Prunes each agent's own audit chain (admin changes, and MCP records from before the writer streams) to its
/// retention (the agent's own `auditRetentionDays`, else the configuration's; a deleted agent's chain by the
/// configuration), oldest records first, keeping the chain verifiable.
///
/// A sweep's queries do not grow with the number of agents: one query finds the chains holding a record
/// past its retention, reading the records older than the shortest retention in effect (of
/// `retention_days` and the agents' stored ones) by the index on their time; only those chains, and the
/// agents the configuration makes an exception for, are looked at one by one.
async fn prune_audit(store: &dyn Store, audit: &AuditConfig, now: i64) -> Result<(), crate::store::StoreError> {
    let before_days = |days: u64| {
        let age = Duration::from_secs(days.saturating_mul(24 * 60 * 60));
        Timestamp::from_micros(now.saturating_sub(micros(age)))
    };
    // The agents of `audit.agent_retention_days` are checked one by one below: their retention does not
    // widen the query's scan.
    let stored = store.shortest_audit_retention().await?.map(u64::from);
    let mut chains = match std::iter::once(audit.retention_days).chain(stored).filter(|days| *days > 0).min() {
        Some(shortest) => {
            let default_before = (audit.retention_days > 0).then(|| before_days(audit.retention_days));
            store.audit_chains_to_prune(Timestamp::from_micros(now), before_days(shortest), default_before).await?
        }
        None => Vec::new(),
    };
    // The query holds an agent without a retention of its own to `retention_days`; one the configuration
    // makes an exception for is checked by its own.
    for agent in audit.agent_retention_days.keys() {
        if chains.iter().any(|(chain, _)| chain == agent) {
            continue;
        }
        let Ok(id) = AgentId::parse(agent) else { continue };
        let stored = store.get_agent(&id).await?.and_then(|agent| agent.audit_retention_days);
        chains.push((agent.clone(), stored));
    }
    for (agent, stored) in chains {
        // Every chain is an agent's: one whose id does not parse is nobody's to prune.
        let Ok(id) = AgentId::parse(&agent) else { continue };
        let Some(keep) = audit.retention_of(&agent, stored) else { continue };
        let before = Timestamp::from_micros(now.saturating_sub(micros(keep)));
        loop {
            let deleted = store.prune_audit(&id, before, AUDIT_PRUNE_BATCH).await?;
            if deleted > 0 {
                tracing::debug!(%agent, deleted, "pruned audit records");
            }
            if deleted < u64::from(AUDIT_PRUNE_BATCH) {
                break;
            }
        }
    }
    Ok(())
}

/// Prunes each writer stream's oldest rows, as a prefix of its chain of rows: a row goes once every agent
/// whose records it holds is past its retention (so an agent kept longer keeps the rows it shares with
/// others, and their records, as long as its own).
async fn prune_audit_streams(store: &dyn Store, audit: &AuditConfig, now: i64) -> Result<(), crate::store::StoreError> {
    /// Rows looked at per query at most: the first query looks at a few, as the oldest row is usually
    /// not old enough yet.
    const ROWS: u32 = 1_000;
    // Each agent's retention, looked up once per sweep.
    let mut kept: HashMap<String, Option<Duration>> = HashMap::new();
    for head in store.audit_streams().await? {
        let mut after = head.pruned_seq;
        let mut through = None;
        let mut fetch = 8;
        'rows: loop {
            let wanted =
                StreamRows { stream: &head.stream_id, after_seq: after, limit: fetch, records: false, agent: None };
            let rows = store.audit_stream_rows(wanted).await?;
            for row in &rows {
                let heads: Vec<RowHead> = serde_json::from_str(&row.heads).unwrap_or_default();
                for row_head in &heads {
                    let agent = row_head.agent();
                    if !kept.contains_key(agent) {
                        let stored = match AgentId::parse(agent) {
                            Ok(id) => store.get_agent(&id).await?.and_then(|agent| agent.audit_retention_days),
                            Err(_) => None,
                        };
                        kept.insert(agent.to_owned(), audit.retention_of(agent, stored));
                    }
                    let expired = kept[agent].is_some_and(|keep| row.last_at < now.saturating_sub(micros(keep)));
                    if !expired {
                        break 'rows;
                    }
                }
                through = Some(row.seq);
            }
            match rows.last() {
                Some(last) if rows.len() == fetch as usize => after = last.seq,
                _ => break,
            }
            fetch = (fetch * 4).min(ROWS);
        }
        if let Some(through) = through {
            let deleted = store.prune_audit_stream(&head.stream_id, through).await?;
            tracing::debug!(stream = %head.stream_id, deleted, "pruned audit records");
        }
    }
    Ok(())
}

fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}
