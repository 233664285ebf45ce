//! The stream hub: every SSE stream open on this replica, by agent, and the fan-out of committed changes
//! to them.
//!
//! The hub is a [`BusHook`]: the bus applies every message to it synchronously, in commit order, before
//! anything else can observe the message. A `Change` only wakes the agent's pump; closing streams
//! (revoked key, deleted agent, ended or replaced session) and updating a legacy session's subscriptions
//! happen right in the hook.
//!
//! **Fan-out.** Each agent with open streams here has one pump task. Woken by `Change`, it reads the new
//! event rows from the database once for this replica, serialises their notifications once
//! ([`EventFrames`]) and offers the shared frames to every stream of the agent through the stream's bounded
//! queue. Each stream tracks the last sequence number it delivered: it skips what it already has and fills
//! any gap from the event table itself, so a stream never sees an event twice and never misses one within
//! the retention window. On `Resync` (the listener reconnected) the pump re-reads from the oldest
//! position any of its streams is at.
//!
//! **Slow consumers.** A stream whose queue is full when a change arrives has fallen behind: a legacy
//! stream is closed (its client resumes with `Last-Event-ID` and is replayed from the event table), a
//! modern one is marked lagged and catches up from the event table once it has drained its queue.
//!
//! [`BusHook`]: crate::events::BusHook
//! [`EventFrames`]: crate::mcp::stream::sse::EventFrames

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use dashmap::DashMap;
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use super::fanout::{self, AgentStreams, Handle, Inner, Signal};
use super::sse::{EventFrames, Interest};
use crate::config::StreamsConfig;
use crate::domain::AgentId;
use crate::domain::model::Agent;
use crate::domain::session::SessionDigest;
use crate::events::{BusHook, BusMessage, Meaning, SessionNews, Stale};
use crate::mcp::error::McpError;
use crate::metrics::Metrics;
use crate::store::Store;

/// Events read from the table per query, by pumps and by streams catching up.
pub const EVENT_PAGE: u32 = 500;

/// What a stream shares with the hub and its agent's pump.
#[derive(Debug)]
pub struct StreamState {
    /// The sequence number of the last event the stream has dealt with; -1 until it knows where it starts.
    pub cursor: AtomicI64,
    /// Set when a change could not be queued (the queue was full): catch up from the event table.
    pub lagged: AtomicBool,
    /// Set when the client cancelled the stream (`notifications/cancelled`): it gets nothing more, not even
    /// a final result.
    pub is_cancelled: AtomicBool,
    /// Set once the bus has brought back the stream's own `StreamOpened` (a legacy stream): only then can a
    /// `StreamOpened` of another stream of its session replace it. Messages arrive in commit order, so one
    /// that arrives before this stream's own was sent before it: an older `GET`, which must not close it.
    pub is_announced: AtomicBool,
    /// What the stream wants; a legacy session's subscriptions change under it. Read on every delivery,
    /// written on (un)subscribe: a read-mostly lock, never held across an `.await`.
    pub interest: RwLock<Interest>,
}

impl StreamState {
    pub fn interest(&self) -> std::sync::RwLockReadGuard<'_, Interest> {
        self.interest.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Replaces the subscribed URIs (a legacy stream loads its session's when it opens).
    pub fn set_interest_uris(&self, uris: std::collections::HashSet<String>) {
        self.set_uris(|interest| interest.uris = uris);
    }

    pub(super) fn set_uris(&self, apply: impl FnOnce(&mut Interest)) {
        apply(&mut self.interest.write().unwrap_or_else(|poisoned| poisoned.into_inner()));
    }
}

/// Which kind of stream, and what identifies it beyond its agent.
#[derive(Debug, Clone)]
pub enum StreamKind {
    /// A legacy session's `GET` stream; `stream` is its replica-independent id (a second `GET` on the
    /// session, on any replica, closes every other stream of the session).
    Legacy { session: SessionDigest, stream: String },
    /// A `subscriptions/listen` stream, opened by the request with this id.
    Modern { listen_id: Value },
}

impl StreamKind {
    /// Whether it is a stream of legacy session `session`.
    pub fn is_of_session(&self, session: &SessionDigest) -> bool {
        matches!(self, StreamKind::Legacy { session: s, .. } if s == session)
    }
}

/// One open stream as the console's live page shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StreamView {
    /// `legacy` (a session's `GET` stream) or `modern` (a `subscriptions/listen` stream).
    pub era: &'static str,
    pub key_id: String,
    pub opened_at: crate::domain::time::Timestamp,
    /// Whether it gets the resource and prompt list changes.
    pub resources_list: bool,
    pub prompts_list: bool,
    /// The URIs it gets `notifications/resources/updated` for.
    pub subscriptions: Vec<String>,
}

/// Every stream of this replica.
pub struct Hub {
    store: Arc<dyn Store>,
    /// Streams count what they send and how late it is.
    pub metrics: Arc<Metrics>,
    /// Open streams per key, within `streams.max_per_key`.
    per_key: KeyStreams,
    max_per_agent: u32,
    /// Changes one stream's queue holds (shared frames, a pointer each): how far a reader may fall behind
    /// before the slow-consumer policy applies.
    queue_capacity: usize,
    /// The agents with open streams here. A sharded map: every bus message and every stream opening looks
    /// an agent up, from many tasks at once, and no entry is held across an `.await`.
    agents: DashMap<AgentId, Arc<AgentStreams>>,
    /// Set at shutdown: no new streams.
    is_closing: AtomicBool,
    /// Stream ids, unique on this replica.
    next_id: AtomicU64,
}

/// Open streams per key id, for the per-key limit. A sharded map like the hub's agents; an entry goes when
/// its count reaches zero.
struct KeyStreams {
    counts: DashMap<String, u32>,
    max: u32,
}

impl KeyStreams {
    /// Counts a new stream of `key_id`, unless the key already holds the most it may (429).
    fn open(&self, key_id: &str) -> Result<(), McpError> {
        let mut count = self.counts.entry(key_id.to_owned()).or_insert(0);
        if *count >= self.max {
            return Err(McpError::TooManyStreams { scope: "key", limit: self.max });
        }
        *count += 1;
        Ok(())
    }

    /// Counts a stream of `key_id` gone.
    fn close(&self, key_id: &str) {
        self.counts.remove_if_mut(key_id, |_, count| {
            *count = count.saturating_sub(1);
            *count == 0
        });
    }
}

/// A stream's place in the hub: its queue's receiving end and the state it shares. Dropping it (the
/// stream ended, or its client went away) takes the stream out of the hub.
pub struct Registration {
    hub: Arc<Hub>,
    entry: Arc<AgentStreams>,
    id: u64,
    key_id: String,
    pub shared: Arc<StreamState>,
    pub queue: mpsc::Receiver<Arc<EventFrames>>,
}

impl Registration {
    pub fn epoch(&self) -> i64 {
        self.entry.epoch
    }

    pub fn metrics(&self) -> &Metrics {
        &self.hub.metrics
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        {
            let mut inner = self.entry.lock();
            inner.streams.remove(&self.id);
            if inner.streams.is_empty() {
                inner.is_dead = true;
            }
        }
        self.hub
            .agents
            .remove_if(&self.entry.agent, |_, entry| Arc::ptr_eq(entry, &self.entry) && entry.lock().is_dead);
        self.hub.per_key.close(&self.key_id);
    }
}

impl Hub {
    pub fn new(store: Arc<dyn Store>, config: &StreamsConfig, metrics: Arc<Metrics>) -> Self {
        Self {
            store,
            metrics,
            per_key: KeyStreams { counts: DashMap::new(), max: config.max_per_key },
            max_per_agent: config.max_per_agent,
            queue_capacity: config.queue_capacity as usize,
            agents: DashMap::new(),
            is_closing: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
        }
    }

    /// Adds a stream for `key_id` on `agent`, within the per-key and per-agent limits (429 beyond); a
    /// legacy stream replaces any other stream of its session here. Refused while shutting down.
    pub fn register(
        self: &Arc<Self>,
        agent: &Agent,
        key_id: &str,
        kind: StreamKind,
        interest: Interest,
    ) -> Result<Registration, McpError> {
        if self.is_closing.load(Ordering::Acquire) {
            return Err(McpError::ShuttingDown);
        }
        self.per_key.open(key_id)?;
        let shared = Arc::new(StreamState {
            cursor: AtomicI64::new(-1),
            lagged: AtomicBool::new(false),
            is_announced: AtomicBool::new(false),
            is_cancelled: AtomicBool::new(false),
            interest: RwLock::new(interest),
        });
        // The queue holds shared frames (a pointer each); its capacity is how far a reader may fall behind.
        let (sender, receiver) = mpsc::channel(self.queue_capacity);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let handle = Handle {
            key_id: key_id.to_owned(),
            kind,
            shared: shared.clone(),
            opened_at: crate::domain::time::Timestamp::now(),
            queue: sender,
        };
        let entry = loop {
            let entry = self.entry(agent);
            let mut inner = entry.lock();
            if inner.is_dead {
                drop(inner);
                self.agents.remove_if(&agent.id, |_, current| Arc::ptr_eq(current, &entry));
                continue;
            }
            if inner.streams.len() >= self.max_per_agent as usize {
                drop(inner);
                self.per_key.close(key_id);
                return Err(McpError::TooManyStreams { scope: "agent", limit: self.max_per_agent });
            }
            if let StreamKind::Legacy { session, .. } = &handle.kind {
                inner.streams.retain(|_, h| !h.kind.is_of_session(session));
            }
            inner.streams.insert(id, handle);
            drop(inner);
            break entry;
        };
        // A shutdown that began meanwhile has closed every stream but this one: close it too.
        if self.is_closing.load(Ordering::Acquire) {
            entry.close_where(|_| true);
        }
        Ok(Registration { hub: self.clone(), entry, id, key_id: key_id.to_owned(), shared, queue: receiver })
    }

    /// The agent's entry, created (with its pump) when it has none or only one of an earlier epoch.
    fn entry(&self, agent: &Agent) -> Arc<AgentStreams> {
        if let Some(entry) = self.agents.get(&agent.id)
            && entry.epoch == agent.epoch
        {
            return entry.clone();
        }
        let mut slot = self.agents.entry(agent.id.clone()).or_insert_with(|| self.start(agent));
        if slot.epoch != agent.epoch {
            slot.lock().is_dead = true;
            slot.lock().streams.clear();
            *slot = self.start(agent);
        }
        slot.clone()
    }

    /// A new entry and its pump. The pump holds only a weak reference and ends when the entry is dropped.
    fn start(&self, agent: &Agent) -> Arc<AgentStreams> {
        let (signal, wake) = watch::channel(Signal::default());
        let entry = Arc::new(AgentStreams {
            agent: agent.id.clone(),
            epoch: agent.epoch,
            inner: Mutex::new(Inner::default()),
            signal,
        });
        tokio::spawn(fanout::pump(Arc::downgrade(&entry), wake, self.store.clone()));
        entry
    }

    /// Open streams on this replica (for metrics and tests).
    pub fn open_streams(&self) -> usize {
        self.agents.iter().map(|entry| entry.lock().streams.len()).sum()
    }

    /// The agent's streams open on this replica, oldest first: what the console's live page shows.
    pub fn streams_of(&self, agent: &AgentId) -> Vec<StreamView> {
        let Some(entry) = self.agents.get(agent).map(|entry| entry.clone()) else { return Vec::new() };
        let inner = entry.lock();
        let mut streams: Vec<StreamView> = inner
            .streams
            .values()
            .map(|handle| {
                let interest = handle.shared.interest();
                let mut subscriptions: Vec<String> = interest.uris.iter().cloned().collect();
                subscriptions.sort();
                StreamView {
                    era: match &handle.kind {
                        StreamKind::Legacy { .. } => "legacy",
                        StreamKind::Modern { .. } => "modern",
                    },
                    key_id: handle.key_id.clone(),
                    opened_at: handle.opened_at,
                    resources_list: interest.resources_list,
                    prompts_list: interest.prompts_list,
                    subscriptions,
                }
            })
            .collect();
        streams.sort_by_key(|stream| stream.opened_at);
        streams
    }

    /// Shutdown: refuses new streams and closes every open one (legacy streams end, so their clients
    /// resume elsewhere; modern ones end with their final result).
    pub fn close(&self) {
        self.is_closing.store(true, Ordering::Release);
        for entry in self.agents.iter() {
            entry.close_where(|_| true);
        }
    }

    /// `notifications/cancelled` for a listen stream of `key_id` opened by request `listen_id`: closes it
    /// when it is open on this replica (on HTTP, closing the stream is the cancellation that counts).
    pub fn cancel(&self, agent: &AgentId, key_id: &str, listen_id: &Value) {
        if let Some(entry) = self.agents.get(agent) {
            entry.close_where(|h| {
                let is_it =
                    h.key_id == key_id && matches!(&h.kind, StreamKind::Modern { listen_id: id } if id == listen_id);
                if is_it {
                    h.shared.is_cancelled.store(true, Ordering::Release);
                }
                is_it
            });
        }
    }

    fn on_agent(&self, agent: &AgentId, apply: impl FnOnce(&AgentStreams)) {
        if let Some(entry) = self.agents.get(agent).map(|entry| entry.clone()) {
            apply(&entry);
        }
    }

    fn on_session(&self, agent: &AgentId, session: &SessionDigest, apply: impl Fn(&Handle)) {
        self.on_agent(agent, |entry| {
            for handle in entry.lock().streams.values() {
                if handle.kind.is_of_session(session) {
                    apply(handle);
                }
            }
        });
    }
}

impl BusHook for Hub {
    fn apply(&self, message: &BusMessage) {
        match message.meaning() {
            Meaning::Stale(Stale::Registry { agent, seq }) => self.on_agent(agent, |entry| {
                entry.signal.send_modify(|signal| signal.head = signal.head.max(seq));
            }),
            Meaning::Resync => {
                for entry in self.agents.iter() {
                    entry.signal.send_modify(|signal| signal.resyncs += 1);
                }
            }
            Meaning::Stale(Stale::Agent { agent, is_deleted: true }) => {
                self.on_agent(agent, |entry| entry.close_where(|_| true))
            }
            Meaning::Stale(Stale::Key { key, is_revoked: true }) => {
                for entry in self.agents.iter() {
                    entry.close_where(|handle| handle.key_id == key);
                }
            }
            Meaning::Stale(Stale::Session { agent, session }) => {
                self.on_agent(agent, |entry| entry.close_where(|h| h.kind.is_of_session(session)))
            }
            // The session's streams opened before this one (announced before it) are replaced; this one is
            // now announced.
            Meaning::Session(SessionNews::StreamOpened { agent, session, stream }) => self.on_agent(agent, |entry| {
                entry.close_where(|h| match &h.kind {
                    StreamKind::Legacy { session: s, stream: id } if s == session => {
                        if id == stream {
                            h.shared.is_announced.store(true, Ordering::Release);
                            false
                        } else {
                            h.shared.is_announced.load(Ordering::Acquire)
                        }
                    }
                    _ => false,
                });
            }),
            Meaning::Session(SessionNews::Subscription { agent, session, uri, is_subscribed }) => {
                self.on_session(agent, session, |handle| {
                    handle.shared.set_uris(|interest| {
                        if is_subscribed {
                            interest.uris.insert(uri.as_str().to_owned());
                        } else {
                            interest.uris.remove(uri.as_str());
                        }
                    });
                })
            }
            // Settings changes leave open streams as they are; while the bus is offline they get nothing new
            // until the resync; the bus's own bookkeeping is not for them.
            Meaning::Stale(Stale::Agent { .. } | Stale::Key { .. }) | Meaning::Offline | Meaning::Bus => {}
        }
    }
}
