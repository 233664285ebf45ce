//! The event bus: how committed changes reach every part of every replica.
//!
//! Producers are the stores: SQLite publishes to the [`LocalBus`] right after commit (one replica);
//! PostgreSQL issues `pg_notify` inside the change's transaction, so the notification is sent exactly
//! when the change commits, and every replica's listener (including the writer's own) forwards it to its
//! [`LocalBus`]. Consumers (caches, the SSE stream hub) subscribe to the [`LocalBus`] only.
//!
//! Payloads carry ids, never bodies: a consumer that needs an event's details reads the event table. The ids
//! are domain types, checked when a payload is read, so consumers never parse them again.
//!
//! Consumers never match on [`BusMessage`] itself: [`BusMessage::meaning`] says, in one place, what each
//! message means to caches ([`Stale`], applied through [`CacheGate::apply`]) and to streams
//! ([`SessionNews`]), and which messages are the bus's own bookkeeping that nobody else acts on.
//!
//! [`LocalBus`]: crate::events::LocalBus
//! [`BusMessage`]: crate::events::BusMessage
//! [`BusMessage::meaning`]: crate::events::BusMessage::meaning
//! [`Stale`]: crate::events::Stale
//! [`CacheGate::apply`]: crate::events::CacheGate::apply
//! [`SessionNews`]: crate::events::SessionNews

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::domain::session::SessionDigest;
use crate::domain::{AgentId, ResourceUri};
use crate::store::Store;

/// The PostgreSQL LISTEN/NOTIFY side of the bus.
pub mod postgres;
/// The pruning task that keeps the event table within its retention window.
pub mod retention;

/// The PostgreSQL channel all replicas listen on.
pub const CHANNEL: &str = "hivegate_events";

/// One message on the bus. Serialised as the NOTIFY payload, so keep it small (PostgreSQL caps payloads
/// at 8000 bytes; ids are short).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum BusMessage {
    /// A registry change committed with this per-agent sequence number; details are in the event table.
    Change { agent: AgentId, seq: i64 },
    /// The agent's settings (name, rate limit, cache TTL) changed.
    AgentChanged { agent: AgentId },
    /// The agent and everything it owned is gone: its keys stop working, its streams close.
    AgentDeleted { agent: AgentId },
    /// The key (by id) was revoked: refuse it from the next request on, and close its streams.
    KeyRevoked { agent: AgentId, key: String },
    /// The key's (by id) settings (name, own rate limit) changed: look it up again on its next request.
    KeyChanged { agent: AgentId, key: String },
    /// A legacy session ended (`DELETE`, or expiry noticed by a request): forget it, close its stream.
    /// `session` is the session's digest, never the id the client holds.
    SessionEnded { agent: AgentId, session: SessionDigest },
    /// A legacy session subscribed to `uri` (`resources/subscribe`): its stream, wherever it is, starts
    /// receiving `notifications/resources/updated` for it. Carried in the message so that it is applied in
    /// commit order with the changes around it.
    Subscribed { agent: AgentId, session: SessionDigest, uri: ResourceUri },
    /// The opposite of [`BusMessage::Subscribed`].
    Unsubscribed { agent: AgentId, session: SessionDigest, uri: ResourceUri },
    /// A `GET` opened stream `stream` for a legacy session: any other stream of that session, on any replica,
    /// is replaced (closed).
    StreamOpened { agent: AgentId, session: SessionDigest, stream: String },
    /// A marker a replica sends through the bus after its own change and waits to hear back: messages
    /// arrive in commit order, so once the marker is back every message before it has been applied here.
    Barrier { id: String },
    /// Replica `replica` has applied every message up to barrier `barrier` (PostgreSQL: each replica's
    /// listener answers every barrier it hears, so the writer can wait for all of them).
    Ack { barrier: String, replica: String },
    /// A replica's listener heartbeat: it proves to the replica itself that notifications reach it, and
    /// only then is the replica counted as live (see `migrations/postgres/0003_replicas.sql`). Never
    /// published on the local bus.
    Beat { replica: String },
    /// This replica may be missing messages from now on (its listener lost its connection): caches must
    /// forget everything and stop caching until the next [`BusMessage::Resync`]. Local only.
    Offline,
    /// Messages may have been missed (the listener reconnected, or a consumer lagged): drop every cache
    /// and catch up from the event table. Caches that went offline cache again from here on.
    Resync,
}

impl BusMessage {
    /// What the message means on this replica: the one place that sorts messages by who acts on them, so
    /// a new message is decided here and every consumer follows.
    pub fn meaning(&self) -> Meaning<'_> {
        match self {
            BusMessage::Change { agent, seq } => Meaning::Stale(Stale::Registry { agent, seq: *seq }),
            BusMessage::AgentChanged { agent } => Meaning::Stale(Stale::Agent { agent, is_deleted: false }),
            BusMessage::AgentDeleted { agent } => Meaning::Stale(Stale::Agent { agent, is_deleted: true }),
            BusMessage::KeyChanged { key, .. } => Meaning::Stale(Stale::Key { key, is_revoked: false }),
            BusMessage::KeyRevoked { key, .. } => Meaning::Stale(Stale::Key { key, is_revoked: true }),
            BusMessage::SessionEnded { agent, session } => Meaning::Stale(Stale::Session { agent, session }),
            BusMessage::Subscribed { agent, session, uri } => {
                Meaning::Session(SessionNews::Subscription { agent, session, uri, is_subscribed: true })
            }
            BusMessage::Unsubscribed { agent, session, uri } => {
                Meaning::Session(SessionNews::Subscription { agent, session, uri, is_subscribed: false })
            }
            BusMessage::StreamOpened { agent, session, stream } => {
                Meaning::Session(SessionNews::StreamOpened { agent, session, stream })
            }
            BusMessage::Offline => Meaning::Offline,
            BusMessage::Resync => Meaning::Resync,
            // Answered by the bus itself ([`LocalBus::settle`], the PostgreSQL listener).
            BusMessage::Barrier { .. } | BusMessage::Ack { .. } | BusMessage::Beat { .. } => Meaning::Bus,
        }
    }
}

/// What a [`BusMessage`] means on this replica ([`BusMessage::meaning`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meaning<'a> {
    /// The bus's own bookkeeping (barriers, acknowledgements, heartbeats): caches and streams ignore it.
    Bus,
    /// The bus may be missing messages from now on: caches forget everything and stop caching.
    Offline,
    /// Messages may have been missed: caches forget everything and cache again; streams catch up from the
    /// event table.
    Resync,
    /// Something a cache may hold is out of date; streams learn from it too (a change to deliver, streams to
    /// close).
    Stale(Stale<'a>),
    /// News for a legacy session's streams, which no cache holds.
    Session(SessionNews<'a>),
}

/// What a committed change makes out of date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stale<'a> {
    /// The agent's registry (resources, templates, prompts): its change `seq` committed.
    Registry { agent: &'a AgentId, seq: i64 },
    /// The agent's row; when `is_deleted`, everything it owned too (keys, grants, sessions, streams).
    Agent { agent: &'a AgentId, is_deleted: bool },
    /// The key (by id): its settings or grants; when `is_revoked`, its sessions and streams too.
    Key { key: &'a str, is_revoked: bool },
    /// The session ended: it and its streams are gone.
    Session { agent: &'a AgentId, session: &'a SessionDigest },
}

impl<'a> Stale<'a> {
    /// For caches of what keys hold (key records, grants, sessions): which entries it makes stale, as a test
    /// on an entry's agent and key id. Those of a deleted agent and of a revoked key; of a changed key too
    /// when the cache `holds_key_settings` (a key record or grant does, a session does not). `None` when it
    /// makes none of them stale.
    pub fn of_keys(self, holds_key_settings: bool) -> Option<impl Fn(&AgentId, &str) -> bool + 'a> {
        let (agent, key) = match self {
            Stale::Agent { agent, is_deleted: true } => (Some(agent), None),
            Stale::Key { key, is_revoked } if is_revoked || holds_key_settings => (None, Some(key)),
            _ => return None,
        };
        Some(move |of_agent: &AgentId, of_key: &str| agent == Some(of_agent) || key == Some(of_key))
    }
}

/// What changed for a legacy session's streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionNews<'a> {
    /// The session (un)subscribed to `uri`.
    Subscription { agent: &'a AgentId, session: &'a SessionDigest, uri: &'a ResourceUri, is_subscribed: bool },
    /// A `GET` opened stream `stream` of the session: it replaces the session's other streams.
    StreamOpened { agent: &'a AgentId, session: &'a SessionDigest, stream: &'a str },
}

/// Something that must apply a message before anyone else can observe it, such as a cache of keys
/// that must never answer for a revoked key once the revocation is known here.
pub trait BusHook: Send + Sync {
    fn apply(&self, message: &BusMessage);
}

/// Whether a cache may keep what it reads: not while the bus may be missing messages, that is from
/// [`BusMessage::Offline`] until the next [`BusMessage::Resync`]. Both drop everything the cache holds.
///
/// A cache also counts its invalidations (`generation`): a value read from the database before an
/// invalidation must not be kept after it, so a read notes the generation first ([`CacheGate::generation`])
/// and keeps its value only if nothing was invalidated meanwhile ([`CacheGate::may_keep`]).
#[derive(Debug, Default)]
pub struct CacheGate {
    offline: AtomicBool,
    generation: AtomicU64,
}

impl CacheGate {
    /// Whether a value read now may be cached.
    pub fn is_open(&self) -> bool {
        !self.offline.load(Ordering::Acquire)
    }

    /// The invalidations so far: noted before a read from the database.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether a value read after [`CacheGate::generation`] returned `generation` may be kept: nothing was
    /// invalidated since, and the bus is not missing messages.
    pub fn may_keep(&self, generation: u64) -> bool {
        self.generation() == generation && self.is_open()
    }

    /// Records an invalidation, before the cache drops what it makes stale.
    pub fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Applies `message` to a cache: `Offline` and `Resync` drop everything (`forget_all`) and close or open
    /// the gate; anything else the message makes stale goes to `forget`. The one place caches read the bus.
    pub fn apply(&self, message: &BusMessage, forget_all: impl FnOnce(), forget: impl FnOnce(Stale<'_>)) {
        match message.meaning() {
            Meaning::Offline => {
                self.offline.store(true, Ordering::Release);
                forget_all();
            }
            Meaning::Resync => {
                forget_all();
                self.offline.store(false, Ordering::Release);
            }
            Meaning::Stale(stale) => forget(stale),
            Meaning::Bus | Meaning::Session(_) => {}
        }
    }
}

/// The in-process fan-out every consumer subscribes to.
///
/// Hooks run synchronously in [`LocalBus::publish`], before the message is broadcast: a task that sees a
/// message knows the caches have already applied it. The `broadcast` channel serves the consumers that
/// only react (streams): every one sees every message; its capacity bounds memory, and a consumer that
/// falls further behind gets `RecvError::Lagged`, which it must treat as [`BusMessage::Resync`].
#[derive(Clone)]
pub struct LocalBus {
    sender: broadcast::Sender<BusMessage>,
    /// Registered once at start-up and read on every message: a read-mostly lock.
    hooks: Arc<RwLock<Vec<Arc<dyn BusHook>>>>,
}

impl std::fmt::Debug for LocalBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBus").field("receivers", &self.sender.receiver_count()).finish()
    }
}

/// How long a change waits for its barrier to be acknowledged before answering anyway.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(2);

/// Messages a slow consumer may fall behind by before it has to resync.
const LOCAL_BUS_CAPACITY: usize = 4096;

impl Default for LocalBus {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalBus {
    pub fn new() -> Self {
        let (sender, _) = broadcast::channel(LOCAL_BUS_CAPACITY);
        Self { sender, hooks: Arc::default() }
    }

    /// Adds a hook that applies every later message before it is broadcast.
    pub fn add_hook(&self, hook: Arc<dyn BusHook>) {
        self.hooks.write().unwrap_or_else(|poisoned| poisoned.into_inner()).push(hook);
    }

    /// Applies the hooks, then delivers to every current subscriber; having none is fine.
    pub fn publish(&self, message: BusMessage) {
        for hook in self.hooks.read().unwrap_or_else(|poisoned| poisoned.into_inner()).iter() {
            hook.apply(&message);
        }
        let _ = self.sender.send(message);
    }

    /// Waits until every change this replica committed so far has been applied by every live replica.
    ///
    /// With PostgreSQL the bus is asynchronous (NOTIFY), so an admin write calls this before answering: it
    /// sends a barrier, which reaches every listener after the change, and waits for this replica to hear it
    /// and for every replica [`ReplicaStore::live_replicas`] names to acknowledge it. Then a revoked key is refused,
    /// and a changed resource served fresh, by every replica from the moment the write is answered. A
    /// replica that does not answer within `SETTLE_TIMEOUT` (stopped without deregistering, or cut off)
    /// is logged and the write answered anyway: the change did commit, and a cut-off replica stops caching
    /// ([`BusMessage::Offline`]). With SQLite the bus is synchronous and this returns at once.
    ///
    /// [`ReplicaStore::live_replicas`]: crate::store::ReplicaStore::live_replicas
    pub async fn settle(&self, store: &dyn Store) {
        let id = uuid::Uuid::new_v4().to_string();
        let mut messages = self.subscribe();
        let mut waiting: HashSet<String> = match store.live_replicas().await {
            Ok(replicas) => replicas.into_iter().collect(),
            Err(error) => {
                tracing::warn!(%error, "could not list live replicas; waiting for this replica only");
                HashSet::new()
            }
        };
        if let Err(error) = store.announce(BusMessage::Barrier { id: id.clone() }).await {
            tracing::warn!(%error, "could not send a bus barrier");
            return;
        }
        let mut heard = false;
        let settled = async {
            while !(heard && waiting.is_empty()) {
                match messages.recv().await {
                    Ok(BusMessage::Barrier { id: barrier }) if barrier == id => heard = true,
                    Ok(BusMessage::Ack { barrier, replica }) if barrier == id => {
                        waiting.remove(&replica);
                    }
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        };
        if tokio::time::timeout(SETTLE_TIMEOUT, settled).await.is_err() {
            tracing::warn!(
                heard_here = heard,
                silent_replicas = ?waiting,
                "a change was not acknowledged by every live replica within {SETTLE_TIMEOUT:?}; answering anyway"
            );
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<BusMessage> {
        self.sender.subscribe()
    }
}

#[cfg(test)]
mod tests;
