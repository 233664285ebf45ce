//! One agent's streams on this replica ([`AgentStreams`]) and their pump: woken by the hub when a change of
//! the agent commits, the pump reads the new event rows once for the replica, serialises their
//! notifications once ([`EventFrames`]) and offers the shared frames to every stream of the agent.
//!
//! One pump task per agent with open streams here, spawned by the hub when the agent's first stream opens.
//! It holds only a weak reference to the agent's entry and ends when the entry is gone (its last stream here
//! closed, the agent was deleted, or the replica shut down): the entry owns the task's wake-up sender.
//!
//! [`AgentStreams`]: crate::mcp::stream::fanout::AgentStreams
//! [`EventFrames`]: crate::mcp::stream::sse::EventFrames

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::hub::{EVENT_PAGE, StreamKind, StreamState};
use super::sse::EventFrames;
use crate::domain::AgentId;
use crate::domain::session::SessionDigest;
use crate::store::Store;

/// One stream as the hub and the pump see it.
pub(super) struct Handle {
    pub(super) key_id: String,
    pub(super) kind: StreamKind,
    pub(super) shared: Arc<StreamState>,
    /// When the stream opened (the console's live page shows it).
    pub(super) opened_at: crate::domain::time::Timestamp,
    /// Dropping it (removing the handle) closes the stream once it has drained its queue.
    pub(super) queue: mpsc::Sender<Arc<EventFrames>>,
}

/// What wakes a pump: the highest sequence number announced, and how many resyncs were announced.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Signal {
    pub(super) head: i64,
    pub(super) resyncs: u64,
}

/// One agent's streams on this replica.
pub struct AgentStreams {
    pub(super) agent: AgentId,
    /// The agent's epoch when its first stream here opened (a re-created agent gets a fresh entry).
    pub epoch: i64,
    /// Short critical sections only (no `.await` while held): a std mutex.
    pub(super) inner: Mutex<Inner>,
    /// The pump's wake-up: a watch channel, because the pump needs only the latest head and resync count,
    /// so changes announced while it is reading coalesce into one wake-up. The pump ends when this sender
    /// is dropped with the entry.
    pub(super) signal: watch::Sender<Signal>,
}

#[derive(Default)]
pub(super) struct Inner {
    /// Set when the entry leaves the hub: a registration that raced with that must start over.
    pub(super) is_dead: bool,
    pub(super) streams: HashMap<u64, Handle>,
}

impl AgentStreams {
    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Offers `frames` to every stream that does not have them yet.
    pub(super) fn fan_out(&self, frames: &Arc<EventFrames>) {
        let mut inner = self.lock();
        let mut closed = Vec::new();
        for (id, handle) in &inner.streams {
            if handle.shared.cursor.load(Ordering::Acquire) >= frames.seq {
                continue;
            }
            match handle.queue.try_send(frames.clone()) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => match handle.kind {
                    StreamKind::Legacy { .. } => closed.push(*id),
                    StreamKind::Modern { .. } => handle.shared.lagged.store(true, Ordering::Release),
                },
                Err(mpsc::error::TrySendError::Closed(_)) => closed.push(*id),
            }
        }
        for id in closed {
            inner.streams.remove(&id);
        }
    }

    /// The oldest position any stream that knows its position is at.
    pub(super) fn floor(&self) -> Option<i64> {
        self.lock().streams.values().map(|h| h.shared.cursor.load(Ordering::Acquire)).filter(|c| *c >= 0).min()
    }

    /// The legacy streams' sessions and shared state (a pump reloads their subscriptions after a resync).
    pub(super) fn legacy_sessions(&self) -> Vec<(SessionDigest, Arc<StreamState>)> {
        let inner = self.lock();
        let legacy = inner.streams.values().filter_map(|h| match &h.kind {
            StreamKind::Legacy { session, .. } => Some((session.clone(), h.shared.clone())),
            StreamKind::Modern { .. } => None,
        });
        legacy.collect()
    }

    pub(super) fn close_where(&self, matches: impl Fn(&Handle) -> bool) {
        self.lock().streams.retain(|_, handle| !matches(handle));
    }
}

/// How long a pump waits before retrying a failed read; doubled up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(5);

/// One agent's pump: reads the events announced for the agent and offers them to its streams, until the
/// agent's entry is dropped (its last stream here closed).
pub(super) async fn pump(entry: Weak<AgentStreams>, mut wake: watch::Receiver<Signal>, store: Arc<dyn Store>) {
    let mut last: Option<i64> = None;
    let mut resyncs = wake.borrow().resyncs;
    while wake.changed().await.is_ok() {
        let signal = *wake.borrow_and_update();
        let is_resync = signal.resyncs != resyncs;
        resyncs = signal.resyncs;
        let Some(streams) = entry.upgrade() else { return };
        let from = match last {
            Some(last) if !is_resync && last >= signal.head => continue,
            Some(last) if !is_resync => last,
            _ => {
                if is_resync {
                    reload_subscriptions(&streams, store.as_ref()).await;
                }
                // From the oldest position anyone here may still need.
                let announced = (signal.head > 0).then_some(signal.head - 1);
                match [last, streams.floor(), announced].into_iter().flatten().min() {
                    Some(from) => from,
                    None => continue,
                }
            }
        };
        drop(streams);
        if let Some(reached) = catch_up(&entry, store.as_ref(), from).await {
            last = Some(last.map_or(reached, |last| last.max(reached)));
        }
    }
}

/// Reads and fans out every event after `from`, retrying while the database fails and the entry lives;
/// returns the last sequence number fanned out.
async fn catch_up(entry: &Weak<AgentStreams>, store: &dyn Store, mut from: i64) -> Option<i64> {
    let mut retry = FIRST_RETRY;
    loop {
        let streams = entry.upgrade()?;
        match store.events_after(&streams.agent, from, EVENT_PAGE).await {
            Ok(events) => {
                retry = FIRST_RETRY;
                for event in &events {
                    streams.fan_out(&Arc::new(EventFrames::build(event, streams.epoch)));
                    from = event.seq;
                }
                if events.len() < EVENT_PAGE as usize {
                    return Some(from);
                }
            }
            Err(error) => {
                tracing::warn!(%error, agent = %streams.agent, retry_in_ms = retry.as_millis() as u64, "cannot read events");
                drop(streams);
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(MAX_RETRY);
            }
        }
    }
}

/// After a resync, legacy sessions may have missed (un)subscriptions: read them again.
async fn reload_subscriptions(streams: &AgentStreams, store: &dyn Store) {
    for (session, shared) in streams.legacy_sessions() {
        match store.subscriptions(&session).await {
            Ok(uris) => shared.set_uris(|interest| interest.uris = uris.into_iter().collect()),
            Err(error) => tracing::warn!(%error, %session, "cannot reload a session's subscriptions"),
        }
    }
}
