//! Per-agent registry caches: agent rows, list pages (pre-serialised by the MCP endpoint), small resource
//! contents, prompts and template sets. The database is the truth; this is memory the event bus keeps honest.
//!
//! Invalidation: `Change{agent}` drops that agent's registry entries, `AgentChanged`/`AgentDeleted` drop the
//! agent's row and entries, `Resync` drops everything, and `Offline` drops everything and stops caching until
//! the next `Resync`. The cache is a [`BusHook`]: the bus applies every
//! message to it synchronously before anyone can observe the message, so once a change is known on this
//! replica no request is answered from what it made stale.
//!
//! Links: a presented key's cache entry keeps its agent's row and registry as its last request found them
//! ([`AgentLink`]), so that a request with a known key makes one map lookup (the key's) instead of three.
//! A link holds while no agent row was invalidated since it was made (the generation below) and its
//! registry was not retired; anything else is looked up again and linked anew.
//!
//! Races: a cold read loads from the database into the agent's registry object it looked up *before* the
//! read. An invalidation replaces that object, so a load that raced with it lands in an orphan nobody reads
//! (and is not counted). Agent rows use a generation counter the same way `KeyCache` does.
//!
//! Single flight: concurrent misses of one entry in one registry object share one load. A change drops an
//! agent's entries while all its clients keep asking; without this, each of their requests in flight would
//! read the same rows again, as many loads as the agent has requests at once, on the pool every agent shares.
//! A load in flight belongs to the registry object it started in, so a request that comes after an
//! invalidation (and finds the new object) never waits for what the old one was loading. When the database
//! cannot be reached, the waiters fail with the load at once rather than each trying again after as long a
//! wait; after any other failure each loads on its own. A load whose request went away (its client hung up,
//! its time ran out) goes with it, and one of the requests waiting for it runs its own load instead; a flight
//! nobody waits for any more leaves nothing behind.
//!
//! [`BusHook`]: crate::events::BusHook

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use compact_str::CompactString;

use crate::FastMap;
use crate::domain::AgentId;
use crate::domain::model::Agent;
use prometheus_client::metrics::family::Family;

use crate::events::{BusHook, BusMessage, CacheGate, Stale};
use crate::guard::Bucketed;
use crate::metrics::{CacheResult, ResultLabels, ShardedCounter};
use crate::store::{Store, StoreError, StoreResult};

/// The least budget [`default_max_bytes`] gives: a small container's.
pub const MIN_DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// The most budget [`default_max_bytes`] gives, however large the machine.
pub const MAX_DEFAULT_MAX_BYTES: u64 = 1024 * 1024 * 1024;
/// Resource contents larger than this are always read from the database.
pub const DEFAULT_MAX_CONTENT_BYTES: usize = 64 * 1024;
/// Agent rows kept at most; beyond this the rows are dropped and reloaded on demand.
const MAX_AGENT_ROWS: usize = 100_000;
/// Estimated bookkeeping cost of one entry beyond its payload.
const ENTRY_OVERHEAD: usize = 160;

/// The budget when `cache.max_bytes` is unset: an eighth of the memory this process may use, which is its
/// cgroup's memory limit when it runs under one (a container's `memory.max`, v2 or v1) and else the machine's
/// memory, within [`MIN_DEFAULT_MAX_BYTES`] and [`MAX_DEFAULT_MAX_BYTES`]. Requests spread over many agents are
/// served from memory while every agent's first list page and the contents read fit (bench/README.md has
/// the sizing rule); the rest of the memory is left to connections, streams and the allocator.
pub fn default_max_bytes() -> u64 {
    process_memory()
        .map_or(MIN_DEFAULT_MAX_BYTES, |bytes| (bytes / 8).clamp(MIN_DEFAULT_MAX_BYTES, MAX_DEFAULT_MAX_BYTES))
}

/// The memory this process may use, in bytes: its cgroup's memory limit when it runs under one (a container's
/// `memory.max`, v2 or v1), else the machine's memory; `None` when neither can be read. The defaults that are
/// a share of memory (the cache's budget, the audit queue) take their share of this.
pub fn process_memory() -> Option<u64> {
    [memory_limit("/sys/fs/cgroup/memory.max"), memory_limit("/sys/fs/cgroup/memory/memory.limit_in_bytes")]
        .into_iter()
        .flatten()
        .chain(machine_memory())
        .min()
}

/// A cgroup memory limit file's value in bytes; `None` when there is no such file or no limit ("max", or
/// cgroup v1's huge "unlimited" number, which is above any machine's memory and loses to it).
fn memory_limit(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The machine's memory (`MemTotal` of /proc/meminfo), in bytes.
fn machine_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = meminfo.lines().find_map(|line| line.strip_prefix("MemTotal:"))?.trim().strip_suffix("kB")?.trim();
    kib.parse::<u64>().ok()?.checked_mul(1024)
}

/// What a cached value is; the key of an agent's registry map. Names of up to 24 bytes are held inline, so
/// that a lookup makes no copy on the heap and compares the key held without a trip to memory of its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    /// A page of the list named (`resources`, `resourceTemplates`, `prompts`), after the given sort key
    /// (`None`: the first page).
    Page(&'static str, Option<String>),
    /// One resource's content, or its absence.
    Content(CompactString),
    /// One prompt with its arguments and messages, or its absence.
    Prompt(CompactString),
    /// The agent's resource templates (for template reads), without their texts.
    Templates,
    /// One template's text, compiled, or its absence.
    TemplateText(CompactString),
}

/// A loaded value and its estimated size; `None` means "serve it, don't keep it".
pub struct Loaded<T> {
    pub value: T,
    pub bytes: Option<usize>,
}

type Entry = Arc<dyn Any + Send + Sync>;

/// One agent's registry entries. Replaced (never cleared in place) on invalidation.
#[derive(Default)]
pub struct Registry {
    /// Short critical sections only (no `.await` while held), so a std mutex.
    inner: Mutex<RegistryInner>,
    /// Set, under the lock, once the registry is retired: nothing more is cached in it, and a link to it
    /// no longer holds ([`AgentLink`]). Read without the lock by links.
    retired: std::sync::atomic::AtomicBool,
}

/// An agent's row and registry as a request found them, kept by the key that made the request
/// ([`crate::http::auth::KeyCache`]) so that the key's next request finds both without looking them up:
/// one trip to memory instead of two map lookups, each a lock, a probe and a reference count on lines of
/// their own, which is what a request to an agent out of the CPU's caches pays for (bench/README.md). It
/// holds while no agent row was invalidated since it was made (the cache's generation) and the registry
/// was not retired.
#[derive(Clone)]
pub struct AgentLink {
    agent: Arc<Bucketed<Agent>>,
    registry: Arc<Registry>,
    generation: u64,
}

impl std::fmt::Debug for AgentLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentLink").field("agent", &self.agent.id).field("generation", &self.generation).finish()
    }
}

impl AgentLink {
    pub fn agent(&self) -> &Arc<Bucketed<Agent>> {
        &self.agent
    }

    /// Asks for the agent's row, its bucket handle and its registry ([`crate::prefetch`]).
    pub fn prefetch(&self) {
        crate::prefetch::arc(&self.agent);
        self.agent.prefetch();
        crate::prefetch::arc(&self.registry);
    }
}

#[derive(Default)]
struct RegistryInner {
    bytes: usize,
    /// Hashed with foldhash: keys are looked up on every request, and SipHash (std's default) cost more
    /// than the lookup itself. Keys come from the registry and requests; foldhash's seed is per process.
    entries: HashMap<Key, (Entry, usize), foldhash::fast::RandomState>,
    /// Loads in flight, each with the number of requests that hold it: the first miss of an entry runs the
    /// load, later ones wait for what it came to.
    flights: HashMap<Key, (Flight, usize), foldhash::fast::RandomState>,
}

/// A load in flight: the first request to reach the cell runs its load in it; if that request goes away
/// before the load ends, the next one waiting runs its own in its stead.
type Flight = Arc<tokio::sync::OnceCell<Landed>>;

/// What a shared load came to.
#[derive(Clone)]
enum Landed {
    Value(Entry),
    /// The database could not be reached (why): the waiters fail with it at once.
    Unavailable(Arc<str>),
    /// Any other failure: each waiter loads on its own.
    Failed,
}

impl Registry {
    /// The flight of `key`'s load, joined or begun; held until the [`Landing`] drops.
    fn flight<'a>(&'a self, key: &'a Key) -> Option<Landing<'a>> {
        let mut inner = self.inner.lock().ok()?;
        let (flight, holders) = inner.flights.entry(key.clone()).or_default();
        *holders += 1;
        Some(Landing { registry: self, key, flight: flight.clone() })
    }
}

/// A request's hold on a flight. Dropped however the request ends (answered, failed, or gone with its
/// client), it ends the flight once the load is over, so that the next miss loads anew, or once no request
/// holds it any more, so that a load nobody waits for leaves nothing behind.
struct Landing<'a> {
    registry: &'a Registry,
    key: &'a Key,
    flight: Flight,
}

impl Drop for Landing<'_> {
    fn drop(&mut self) {
        let Ok(mut inner) = self.registry.inner.lock() else { return };
        // None when this flight has ended already (another holder removed it once its load was over) or the
        // registry retired; another flight of the key when a newer one began since.
        let Some((flight, holders)) = inner.flights.get_mut(self.key) else { return };
        if !Arc::ptr_eq(flight, &self.flight) {
            return;
        }
        *holders -= 1;
        if *holders == 0 || self.flight.initialized() {
            inner.flights.remove(self.key);
            // As many flights as requests were at once: the table does not keep that size.
            if inner.flights.is_empty() && inner.flights.capacity() > 64 {
                inner.flights = HashMap::default();
            }
        }
    }
}

pub struct RegistryCache {
    store: Arc<dyn Store>,
    agents: FastMap<AgentId, Arc<Bucketed<Agent>>>,
    /// Closed while the bus may be missing messages: nothing is cached until it resyncs. Its generation
    /// counts agent invalidations, so an agent row whose load raced with one is not cached.
    gate: CacheGate,
    registries: FastMap<AgentId, Arc<Registry>>,
    /// Estimated bytes held by live registries.
    bytes: AtomicUsize,
    max_bytes: usize,
    max_content_bytes: usize,
    /// Hits, misses and joined loads of [`RegistryCache::get_or_load`], resolved from their family once.
    hits: ShardedCounter,
    misses: ShardedCounter,
    joined: ShardedCounter,
}

impl RegistryCache {
    pub fn with_limits(store: Arc<dyn Store>, max_bytes: usize, max_content_bytes: usize) -> Self {
        Self {
            store,
            agents: FastMap::default(),
            gate: CacheGate::default(),
            registries: FastMap::default(),
            bytes: AtomicUsize::new(0),
            max_bytes,
            max_content_bytes,
            hits: ShardedCounter::default(),
            misses: ShardedCounter::default(),
            joined: ShardedCounter::default(),
        }
    }

    /// Counts hits, misses and joined loads in `lookups` (a family the application exports).
    pub fn counting_lookups_in(mut self, lookups: Family<ResultLabels, ShardedCounter>) -> Self {
        self.hits = lookups.get_or_create_owned(&ResultLabels { result: CacheResult::Hit.as_str() });
        self.misses = lookups.get_or_create_owned(&ResultLabels { result: CacheResult::Miss.as_str() });
        self.joined = lookups.get_or_create_owned(&ResultLabels { result: CacheResult::Joined.as_str() });
        self
    }

    /// The budget in bytes: `cache.max_bytes`, or its default ([`default_max_bytes`]).
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The largest content worth keeping.
    pub fn max_content_bytes(&self) -> usize {
        self.max_content_bytes
    }

    /// The store behind the cache, for reads that are never cached.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The agent's row, from memory or (once) from the database.
    pub async fn agent(&self, id: &AgentId) -> StoreResult<Option<Arc<Bucketed<Agent>>>> {
        if let Some(agent) = self.agents.get(id) {
            return Ok(Some(agent.clone()));
        }
        let generation = self.gate.generation();
        let Some(loaded) = self.store.get_agent(id).await? else {
            return Ok(None);
        };
        // Copied into the caches' arena with the entry that keeps it (src/allocator.rs).
        Ok(Some(crate::allocator::in_cache_scope(|| {
            let agent = Arc::new(Bucketed::new(loaded.clone()));
            if self.agents.len() >= MAX_AGENT_ROWS {
                self.agents.clear();
            }
            // Compared under the entry's shard lock, so an invalidation cannot slip between check and insert.
            if let dashmap::Entry::Vacant(slot) = self.agents.entry(id.clone())
                && self.gate.may_keep(generation)
            {
                slot.insert(agent.clone());
            }
            agent
        })))
    }

    /// Whether `link` still stands for agent `id`: no agent row invalidated since it was made, its registry
    /// not retired, and the cache open.
    pub fn holds(&self, link: &AgentLink, id: &AgentId) -> bool {
        link.agent.id == *id && self.gate.may_keep(link.generation) && !link.registry.retired.load(Ordering::Acquire)
    }

    /// The agent's row and registry, looked up (the row from the database once), as a link to keep; `None`
    /// when there is no such agent.
    pub async fn link(&self, id: &AgentId) -> StoreResult<Option<AgentLink>> {
        // Noted before the lookups: an invalidation after this makes the link stale at once.
        let generation = self.gate.generation();
        let Some(agent) = self.agent(id).await? else { return Ok(None) };
        Ok(Some(AgentLink { agent, registry: self.registry_of(id), generation }))
    }

    fn registry_of(&self, agent: &AgentId) -> Arc<Registry> {
        // A shared lock on the map's shard for an agent already there, the exclusive one only to add it.
        let known = self.registries.get(agent).map(|registry| Arc::clone(&registry));
        known.unwrap_or_else(|| {
            crate::allocator::in_cache_scope(|| self.registries.entry(agent.clone()).or_default().clone())
        })
    }

    /// The value under `key` for `agent`, loading it with `load` on a miss.
    pub async fn get_or_load<T, F, Fut>(&self, agent: &AgentId, key: Key, load: F) -> StoreResult<Arc<T>>
    where
        T: Send + Sync + 'static,
        F: FnOnce() -> Fut,
        Fut: Future<Output = StoreResult<Loaded<T>>>,
    {
        self.get_or_load_linked(None, agent, key, load).await
    }

    /// [`Self::get_or_load`] in the registry of `link` when it is the agent's live one.
    pub async fn get_or_load_linked<T, F, Fut>(
        &self,
        link: Option<&AgentLink>,
        agent: &AgentId,
        key: Key,
        load: F,
    ) -> StoreResult<Arc<T>>
    where
        T: Send + Sync + 'static,
        F: FnOnce() -> Fut,
        Fut: Future<Output = StoreResult<Loaded<T>>>,
    {
        let linked = link.filter(|link| link.agent.id == *agent && !link.registry.retired.load(Ordering::Acquire));
        let registry = match linked {
            Some(link) => link.registry.clone(),
            None => self.registry_of(agent),
        };
        if let Some(hit) = lookup::<T>(&registry, &key) {
            self.hits.inc();
            return Ok(hit);
        }
        let Some(landing) = registry.flight(&key) else {
            self.misses.inc();
            return self.load_into(&registry, agent, key, load).await;
        };
        // The request that runs the load keeps its own result (an error included); the others wait for what
        // it came to.
        let (mut load, mut own) = (Some(load), None);
        let landed = {
            let (load, own, registry, key) = (&mut load, &mut own, &registry, &key);
            landing
                .flight
                .get_or_init(move || async move {
                    let Some(load) = load.take() else { return Landed::Failed };
                    self.misses.inc();
                    let result = self.load_into(registry, agent, key.clone(), load).await;
                    let landed = match &result {
                        Ok(value) => Landed::Value(Arc::clone(value) as Entry),
                        Err(StoreError::Unavailable(cause)) => Landed::Unavailable(cause.to_string().into()),
                        Err(_) => Landed::Failed,
                    };
                    *own = Some(result);
                    landed
                })
                .await
                .clone()
        };
        drop(landing);
        let load = match (own, load) {
            (Some(result), _) => return result,
            (None, Some(load)) => load,
            (None, None) => unreachable!("a load taken gives its result"),
        };
        match landed {
            Landed::Value(entry) => {
                if let Ok(value) = entry.downcast::<T>() {
                    self.joined.inc();
                    return Ok(value);
                }
            }
            Landed::Unavailable(cause) => {
                self.joined.inc();
                let waited = std::io::Error::other(format!("the load this request waited for failed: {cause}"));
                return Err(StoreError::Unavailable(sqlx::Error::Io(waited)));
            }
            Landed::Failed => {}
        }
        // The shared load failed otherwise: this request's own, as without a flight.
        self.misses.inc();
        self.load_into(&registry, agent, key, load).await
    }

    /// Loads the value of `key` and keeps it in `registry` when the loader gives its size.
    async fn load_into<T, F, Fut>(&self, registry: &Registry, agent: &AgentId, key: Key, load: F) -> StoreResult<Arc<T>>
    where
        T: Send + Sync + 'static,
        F: FnOnce() -> Fut,
        Fut: Future<Output = StoreResult<Loaded<T>>>,
    {
        let loaded = load().await?;
        let Some(bytes) = loaded.bytes else { return Ok(Arc::new(loaded.value)) };
        // Kept in the caches' arena, as the loaders make what the value holds (src/allocator.rs).
        let value = crate::allocator::in_cache_scope(|| Arc::new(loaded.value));
        self.insert(agent, registry, key, value.clone(), bytes);
        Ok(value)
    }

    fn insert(&self, agent: &AgentId, registry: &Registry, key: Key, value: Entry, bytes: usize) {
        let cost = bytes + ENTRY_OVERHEAD;
        if cost > self.max_bytes / 8 || !self.gate.is_open() {
            return;
        }
        if self.bytes.load(Ordering::Relaxed) + cost > self.max_bytes {
            self.evict(self.max_bytes / 2, agent);
        }
        let Ok(mut inner) = registry.inner.lock() else { return };
        if registry.retired.load(Ordering::Acquire) {
            return;
        }
        // The map grows in the caches' arena, beside its values (src/allocator.rs).
        if let Some((_, old)) = crate::allocator::in_cache_scope(|| inner.entries.insert(key, (value, cost))) {
            inner.bytes -= old;
            self.bytes.fetch_sub(old, Ordering::Relaxed);
        }
        inner.bytes += cost;
        self.bytes.fetch_add(cost, Ordering::Relaxed);
    }

    /// Drops whole registries until at most `target` bytes remain, other agents' before `filling`'s (the
    /// one an entry is being added to).
    fn evict(&self, target: usize, filling: &AgentId) {
        let mut victims: Vec<AgentId> =
            self.registries.iter().map(|entry| entry.key().clone()).filter(|agent| agent != filling).collect();
        victims.push(filling.clone());
        for agent in victims {
            if self.bytes.load(Ordering::Relaxed) <= target {
                break;
            }
            self.drop_registry(&agent);
        }
    }

    fn drop_registry(&self, agent: &AgentId) {
        if let Some((_, registry)) = self.registries.remove(agent) {
            self.retire(&registry);
            crate::allocator::cache_arena_freed();
        }
    }

    fn retire(&self, registry: &Registry) {
        if let Ok(mut inner) = registry.inner.lock() {
            registry.retired.store(true, Ordering::Release);
            self.bytes.fetch_sub(inner.bytes, Ordering::Relaxed);
            inner.bytes = 0;
            // Replaced, not cleared: a key's link may keep the retired registry until the key is used
            // again, and should not keep the table's memory with it. Loads in flight end in nothing.
            inner.entries = HashMap::default();
            inner.flights = HashMap::default();
        }
    }

    fn drop_agent(&self, agent: &AgentId) {
        self.gate.invalidate();
        self.agents.remove(agent);
        self.drop_registry(agent);
        // Again once they are gone: a link made in between (the new generation, the old row, a fresh
        // registry) would otherwise hold.
        self.gate.invalidate();
    }

    fn drop_everything(&self) {
        self.gate.invalidate();
        self.agents.clear();
        let all: Vec<AgentId> = self.registries.iter().map(|entry| entry.key().clone()).collect();
        for agent in all {
            self.drop_registry(&agent);
        }
        // As in `drop_agent`.
        self.gate.invalidate();
    }

    /// Estimated bytes held, for metrics and tests.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
}

fn lookup<T: Send + Sync + 'static>(registry: &Registry, key: &Key) -> Option<Arc<T>> {
    let inner = registry.inner.lock().ok()?;
    let (entry, _) = inner.entries.get(key)?;
    entry.clone().downcast::<T>().ok()
}

impl BusHook for RegistryCache {
    fn apply(&self, message: &BusMessage) {
        self.gate.apply(
            message,
            || self.drop_everything(),
            |stale| match stale {
                Stale::Registry { agent, .. } => self.drop_registry(agent),
                Stale::Agent { agent, .. } => self.drop_agent(agent),
                Stale::Key { .. } | Stale::Session { .. } => {}
            },
        );
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
