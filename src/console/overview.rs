//! `GET /console/`: the overview, from the figures `/metrics` exports: HTTP and MCP requests (and their
//! rate since the previous look at this page on this replica), errors, open streams, the audit writer.

use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use minijinja::context;

use super::auth::Console;
use super::view::{self, Result};
use crate::state::AppState;

/// Agents the overview counts; past this it says "at least".
const AGENTS_COUNTED: u32 = 1000;

/// The request total last time the overview was shown, to turn two totals into a rate.
#[derive(Debug, Default)]
pub struct RateSample(Mutex<Option<(Instant, u64)>>);

impl RateSample {
    /// Requests per second since the previous sample (none on the first), and takes this one.
    fn rate(&self, total: u64) -> Option<f64> {
        let now = Instant::now();
        let mut last = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let rate = last.and_then(|(at, before)| {
            let secs = now.duration_since(at).as_secs_f64();
            (secs >= 0.5).then(|| total.saturating_sub(before) as f64 / secs)
        });
        if last.is_none_or(|(at, _)| now.duration_since(at).as_secs_f64() >= 0.5) {
            *last = Some((now, total));
        }
        rate
    }
}

/// `GET /console/`: an agent owner goes to their agent's registry.
pub async fn page(State(state): State<AppState>, console: Console) -> Result<Response> {
    if let Some(agent) = console.own_agent() {
        return Ok(Redirect::to(&format!("/console/agents/{agent}/registry")).into_response());
    }
    let agents = state.store.list_agents(None, AGENTS_COUNTED + 1).await?.len();
    let metrics = &state.metrics;
    let http_total = metrics.http_requests.total(|_| true);
    let http_errors = metrics.http_requests.total(|labels| labels.status >= 500);
    let http_refused = metrics.http_requests.total(|labels| (400..500).contains(&labels.status));
    let mcp_total = metrics.mcp_requests.total(|_| true);
    let mcp_errors = metrics.mcp_requests.total(|labels| labels.outcome != "ok");
    let rate = state.console.rate.rate(http_total).map(|rate| format!("{rate:.1}"));
    let audit = state.audit.stats();
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
    Ok(view::page(
        &console,
        "overview.html",
        context! {
            title => "Overview",
            agents => if agents > AGENTS_COUNTED as usize { format!("at least {AGENTS_COUNTED}") } else { agents.to_string() },
            http_total, http_errors, http_refused, mcp_total, mcp_errors, rate,
            open_streams => state.hub.open_streams(),
            audit_queued => load(&audit.queued),
            audit_written => load(&audit.written),
            audit_dropped => load(&audit.dropped),
            audit_rejected => load(&audit.rejected),
            audit_failed_batches => load(&audit.failed_batches),
            audit_backlog => audit.backlog(),
            audit_lag_ms => load(&audit.lag_us) / 1000,
            audit_healthy => load(&audit.dropped) == 0 && load(&audit.failed_batches) == 0,
        },
    ))
}
