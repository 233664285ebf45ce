use std::sync::atomic::AtomicU32;
use std::time::Duration;

use super::*;
use crate::config::DatabaseConfig;
use crate::domain::model::{Actor, NewAgent};
use crate::events::LocalBus;
use crate::store::StoreError;
use crate::store::sqlite::SqliteStore;

struct Fixture {
    cache: Arc<RegistryCache>,
    bus: LocalBus,
    store: Arc<dyn Store>,
    _dir: TempFile,
}

struct TempFile(std::path::PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = self.0.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}

async fn fixture(max_bytes: usize) -> Fixture {
    let path = std::env::temp_dir().join(format!("hivegate-cache-{}.db", uuid::Uuid::new_v4().simple()));
    let bus = LocalBus::new();
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let store = SqliteStore::connect(&url, &DatabaseConfig::default(), bus.clone()).await.expect("sqlite");
    store.migrate().await.expect("migrations");
    let store: Arc<dyn Store> = Arc::new(store);
    let cache = Arc::new(RegistryCache::with_limits(store.clone(), max_bytes, 1024));
    bus.add_hook(cache.clone());
    Fixture { cache, bus, store, _dir: TempFile(path) }
}

fn agent(id: &str) -> AgentId {
    AgentId::parse(id).expect("agent id")
}

/// Loads `key` through the cache, counting how often the loader runs.
async fn load(cache: &RegistryCache, id: &AgentId, key: Key, calls: &AtomicU32, bytes: usize) -> Arc<String> {
    cache
        .get_or_load(id, key, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(Loaded { value: "value".to_owned(), bytes: Some(bytes) })
        })
        .await
        .expect("load")
}

#[tokio::test]
async fn a_cold_read_loads_once() {
    let f = fixture(MIN_DEFAULT_MAX_BYTES as usize).await;
    let calls = AtomicU32::new(0);
    for _ in 0..3 {
        load(&f.cache, &agent("a"), Key::Templates, &calls, 10).await;
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_change_drops_only_that_agents_entries() {
    let f = fixture(MIN_DEFAULT_MAX_BYTES as usize).await;
    let (a, b) = (agent("a"), agent("b"));
    let (calls_a, calls_b) = (AtomicU32::new(0), AtomicU32::new(0));
    load(&f.cache, &a, Key::Templates, &calls_a, 10).await;
    load(&f.cache, &b, Key::Templates, &calls_b, 10).await;
    f.bus.publish(BusMessage::Change { agent: agent("a"), seq: 1 });
    load(&f.cache, &a, Key::Templates, &calls_a, 10).await;
    load(&f.cache, &b, Key::Templates, &calls_b, 10).await;
    assert_eq!((calls_a.load(Ordering::SeqCst), calls_b.load(Ordering::SeqCst)), (2, 1));
    f.bus.publish(BusMessage::Resync);
    load(&f.cache, &b, Key::Templates, &calls_b, 10).await;
    assert_eq!(calls_b.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_load_that_races_an_invalidation_is_not_kept() {
    let f = fixture(MIN_DEFAULT_MAX_BYTES as usize).await;
    let a = agent("a");
    let calls = AtomicU32::new(0);
    let bus = f.bus.clone();
    f.cache
        .get_or_load(&a, Key::Templates, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            // The change commits while this (stale) read is in flight.
            bus.publish(BusMessage::Change { agent: agent("a"), seq: 1 });
            Ok(Loaded { value: "stale".to_owned(), bytes: Some(5) })
        })
        .await
        .expect("load");
    let fresh = load(&f.cache, &a, Key::Templates, &calls, 5).await;
    assert_eq!((fresh.as_str(), calls.load(Ordering::SeqCst)), ("value", 2));
}

/// The loads of `flights` below: each waits at `gate` until the test lets it through, says which it was (its
/// count, from 1), and fails when it is the `failing` one (the database unreachable when `unreachable`), keeping
/// the gate's permit it took.
struct Flown {
    calls: AtomicU32,
    gate: tokio::sync::Semaphore,
    failing: u32,
    unreachable: bool,
}

impl Flown {
    fn new(failing: u32) -> Arc<Self> {
        Arc::new(Self { calls: AtomicU32::new(0), gate: tokio::sync::Semaphore::new(0), failing, unreachable: false })
    }

    fn unreachable(failing: u32) -> Arc<Self> {
        Arc::new(Self { calls: AtomicU32::new(0), gate: tokio::sync::Semaphore::new(0), failing, unreachable: true })
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

/// Starts `n` lookups of `key` at once on the test's runtime, each load waiting at `flown`'s gate, and lets
/// each run to where it waits.
async fn flights(
    f: &Fixture,
    key: Key,
    n: usize,
    flown: &Arc<Flown>,
    bytes: Option<usize>,
) -> Vec<tokio::task::JoinHandle<StoreResult<Arc<String>>>> {
    let tasks = (0..n)
        .map(|_| {
            let (cache, flown, key) = (f.cache.clone(), flown.clone(), key.clone());
            tokio::spawn(async move {
                cache
                    .get_or_load(&agent("a"), key, || async move {
                        let call = flown.calls.fetch_add(1, Ordering::SeqCst) + 1;
                        let open = flown.gate.acquire().await.expect("the gate stays");
                        if call == flown.failing {
                            open.forget();
                            if flown.unreachable {
                                return Err(StoreError::Unavailable(sqlx::Error::PoolTimedOut));
                            }
                            return Err(StoreError::NotFound);
                        }
                        Ok(Loaded { value: format!("load {call}"), bytes })
                    })
                    .await
            })
        })
        .collect();
    // The test's runtime has one thread: every task runs until it waits before this sleep ends.
    tokio::time::sleep(Duration::from_millis(20)).await;
    tasks
}

/// What each lookup came to, in the order started. A lookup that does not end within 5 s fails the test.
async fn results(tasks: Vec<tokio::task::JoinHandle<StoreResult<Arc<String>>>>) -> Vec<Result<String, String>> {
    let mut results = Vec::new();
    for task in tasks {
        let ended = tokio::time::timeout(Duration::from_secs(5), task).await.expect("the lookup ends");
        results.push(ended.expect("the task ends").map(|value| (*value).clone()).map_err(|e| e.to_string()));
    }
    results
}

/// The flights `agent`'s registry holds.
fn flights_held(f: &Fixture, id: &str) -> usize {
    f.cache.registry_of(&agent(id)).inner.lock().expect("the registry's lock").flights.len()
}

#[tokio::test]
async fn concurrent_misses_share_one_load() {
    let f = fixture(MIN_DEFAULT_MAX_BYTES as usize).await;
    let flown = Flown::new(0);
    let tasks = flights(&f, Key::Templates, 8, &flown, Some(10)).await;
    assert_eq!(flown.calls(), 1, "the other seven wait for the first one's load");
    assert_eq!(flights_held(&f, "a"), 1);
    flown.gate.add_permits(100);
    assert_eq!(results(tasks).await, vec![Ok("load 1".to_owned()); 8]);
    assert_eq!(flights_held(&f, "a"), 0, "the flight ended with its load");
    // Kept: the next lookup is a hit. After a change, the next miss loads anew (the flight has landed).
    let calls = AtomicU32::new(0);
    assert_eq!(load(&f.cache, &agent("a"), Key::Templates, &calls, 10).await.as_str(), "load 1");
    f.bus.publish(BusMessage::Change { agent: agent("a"), seq: 1 });
    assert_eq!(load(&f.cache, &agent("a"), Key::Templates, &calls, 10).await.as_str(), "value");
    assert_eq!((flown.calls(), calls.load(Ordering::SeqCst)), (1, 1));
}

#[tokio::test]
async fn a_value_not_kept_is_shared_by_the_misses_that_waited_for_it_only() {
    let f = fixture(MIN_DEFAULT_MAX_BYTES as usize).await;
    let flown = Flown::new(0);
    let tasks = flights(&f, Key::Templates, 4, &flown, None).await;
    flown.gate.add_permits(100);
    assert_eq!(results(tasks).await, vec![Ok("load 1".to_owned()); 4]);
    let later = flights(&f, Key::Templates, 1, &flown, None).await;
    assert_eq!(results(later).await, vec![Ok("load 2".to_owned())], "not kept, so loaded again");
}

#[tokio::test]
async fn a_failed_shared_load_fails_its_own_request_and_the_others_load_on_their_own() {
    let f = fixture(MIN_DEFAULT_MAX_BYTES as usize).await;
    let flown = Flown::new(1);
    let tasks = flights(&f, Key::Templates, 3, &flown, Some(10)).await;
    assert_eq!(flown.calls(), 1);
    // One permit: the first load fails (and keeps it); the two waiters then load at once, not one after the
    // other, both held at the gate.
    flown.gate.add_permits(1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(flown.calls(), 3);
    flown.gate.add_permits(100);
    let results = results(tasks).await;
    assert_eq!(results[0], Err("not found".to_owned()));
    let mut rest: Vec<_> = results[1..].to_vec();
    rest.sort();
    assert_eq!(rest, vec![Ok("load 2".to_owned()), Ok("load 3".to_owned())]);
}

#[tokio::test]
async fn when_the_database_cannot_be_reached_the_waiters_fail_with_the_shared_load_at_once() {
    let f = fixture(MIN_DEFAULT_MAX_BYTES as usize).await;
    let flown = Flown::unreachable(1);
    let tasks = flights(&f, Key::Templates, 3, &flown, Some(10)).await;
    flown.gate.add_permits(100);
    let results = results(tasks).await;
    assert_eq!(flown.calls(), 1, "no waiter tries again");
    assert!(results[0].as_ref().is_err_and(|e| e.starts_with("database unavailable")), "{results:?}");
    for waited in &results[1..] {
        let error = waited.as_ref().expect_err("the shared load failed");
        assert!(error.starts_with("database unavailable") && error.contains("waited for"), "{error}");
    }
    // The next miss loads anew.
    let calls = AtomicU32::new(0);
    assert_eq!(load(&f.cache, &agent("a"), Key::Templates, &calls, 10).await.as_str(), "value");
}

#[tokio::test]
async fn a_flight_ends_with_its_load_and_its_last_holders_leave_a_newer_one_alone() {
    let f = fixture(MIN_DEFAULT_MAX_BYTES as usize).await;
    let registry = f.cache.registry_of(&agent("a"));
    // A request that holds the flight and has not yet looked at it.
    let held = registry.flight(&Key::Templates).expect("a flight");
    let flown = Flown::new(0);
    flown.gate.add_permits(100);
    let first = flights(&f, Key::Templates, 1, &flown, None).await;
    assert_eq!(results(first).await, vec![Ok("load 1".to_owned())]);
    assert_eq!(flights_held(&f, "a"), 0, "the flight ended with its load, though a request still holds it");
    // So the next miss of a value not kept loads anew, in a flight of its own (held at the gate).
    let later = Flown::new(0);
    let second = flights(&f, Key::Templates, 2, &later, None).await;
    assert_eq!((later.calls(), flights_held(&f, "a")), (1, 1));
    drop(held);
    assert_eq!(flights_held(&f, "a"), 1, "the old flight's last holder leaves the newer one alone");
    let third = flights(&f, Key::Templates, 1, &later, None).await;
    assert_eq!(later.calls(), 1, "a miss joins the newer flight");
    later.gate.add_permits(100);
    assert_eq!(results(second).await, vec![Ok("load 1".to_owned()); 2]);
    assert_eq!(results(third).await, vec![Ok("load 1".to_owned())]);
    assert_eq!(flown.calls(), 1);
}

#[tokio::test]
async fn a_load_nobody_waits_for_any_more_leaves_no_flight_behind() {
    let f = fixture(MIN_DEFAULT_MAX_BYTES as usize).await;
    let flown = Flown::new(0);
    for n in 1..=3 {
        // Every request goes away while the load runs: its client hung up, or its time ran out.
        let tasks = flights(&f, Key::Content(compact_str::format_compact!("x://{n}")), n, &flown, Some(10)).await;
        assert_eq!(flights_held(&f, "a"), 1);
        for task in tasks {
            task.abort();
            assert!(task.await.expect_err("aborted").is_cancelled());
        }
        assert_eq!(flights_held(&f, "a"), 0);
    }
}

#[tokio::test]
async fn a_dropped_load_hands_the_flight_to_a_waiter() {
    let f = fixture(MIN_DEFAULT_MAX_BYTES as usize).await;
    let flown = Flown::new(0);
    let mut tasks = flights(&f, Key::Templates, 3, &flown, Some(10)).await;
    // The first request goes away (its client hung up) while it loads: the next one loads in its stead.
    let first = tasks.remove(0);
    first.abort();
    assert!(first.await.expect_err("aborted").is_cancelled());
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(flown.calls(), 2);
    flown.gate.add_permits(100);
    assert_eq!(results(tasks).await, vec![Ok("load 2".to_owned()); 2]);
}

#[tokio::test]
async fn a_miss_after_a_change_does_not_wait_for_a_load_begun_before_it() {
    let f = fixture(MIN_DEFAULT_MAX_BYTES as usize).await;
    let flown = Flown::new(0);
    let stale = flights(&f, Key::Templates, 2, &flown, Some(10)).await;
    f.bus.publish(BusMessage::Change { agent: agent("a"), seq: 1 });
    let calls = AtomicU32::new(0);
    // The load in flight is the old registry's: this one loads in the new registry, without waiting.
    let a = agent("a");
    let fresh = tokio::time::timeout(Duration::from_secs(5), load(&f.cache, &a, Key::Templates, &calls, 10));
    assert_eq!(fresh.await.expect("no wait for the old registry's load").as_str(), "value");
    flown.gate.add_permits(100);
    assert_eq!(results(stale).await, vec![Ok("load 1".to_owned()); 2]);
    // What the old registry's load found is not kept: the new registry's value stands.
    assert_eq!(load(&f.cache, &agent("a"), Key::Templates, &calls, 10).await.as_str(), "value");
    assert_eq!((flown.calls(), calls.load(Ordering::SeqCst)), (1, 1));
}

#[tokio::test]
async fn agent_rows_are_cached_and_dropped() {
    let f = fixture(MIN_DEFAULT_MAX_BYTES as usize).await;
    let actor = Actor { name: "operator".into(), request_id: None };
    let new = NewAgent {
        id: agent("bot"),
        name: "Bot".into(),
        description: None,
        rate_limit: None,
        cache_ttl_ms: None,
        audit_retention_days: None,
    };
    f.store.create_agent(&new, &actor).await.expect("agent");
    assert_eq!(f.cache.agent(&agent("bot")).await.expect("read").expect("exists").name, "Bot");
    assert!(f.cache.agent(&agent("nobody")).await.expect("read").is_none());
    f.store.delete_agent(&agent("bot"), &actor).await.expect("delete");
    f.bus.publish(BusMessage::AgentDeleted { agent: agent("bot") });
    assert!(f.cache.agent(&agent("bot")).await.expect("read").is_none());
}

#[tokio::test]
async fn memory_stays_bounded() {
    let max = 64 * 1024;
    let f = fixture(max).await;
    let calls = AtomicU32::new(0);
    for i in 0..500 {
        let id = agent(&format!("a{}", i % 50));
        load(&f.cache, &id, Key::Content(compact_str::format_compact!("x://{i}")), &calls, 1000).await;
        assert!(f.cache.bytes() <= max, "{} bytes held", f.cache.bytes());
    }
    // Entries larger than an eighth of the budget are served but never kept.
    load(&f.cache, &agent("big"), Key::Templates, &calls, max).await;
    let before = calls.load(Ordering::SeqCst);
    load(&f.cache, &agent("big"), Key::Templates, &calls, max).await;
    assert_eq!(calls.load(Ordering::SeqCst), before + 1);
}

#[tokio::test]
async fn a_published_change_releases_memory_at_once() {
    let f = fixture(MIN_DEFAULT_MAX_BYTES as usize).await;
    let calls = AtomicU32::new(0);
    load(&f.cache, &agent("a"), Key::Templates, &calls, 100).await;
    assert!(f.cache.bytes() > 0);
    f.bus.publish(BusMessage::Change { agent: agent("a"), seq: 1 });
    assert_eq!(f.cache.bytes(), 0, "the hook drops the agent's entries before publish returns");
}

#[tokio::test]
async fn nothing_is_cached_while_the_bus_is_offline() {
    let f = fixture(MIN_DEFAULT_MAX_BYTES as usize).await;
    let a = agent("a");
    let calls = AtomicU32::new(0);
    load(&f.cache, &a, Key::Templates, &calls, 10).await;
    f.bus.publish(BusMessage::Offline);
    // Offline: what was cached is gone, and every read goes to the loader.
    for _ in 0..3 {
        load(&f.cache, &a, Key::Templates, &calls, 10).await;
    }
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert_eq!(f.cache.bytes(), 0);
    // Back online after the resync: cached again.
    f.bus.publish(BusMessage::Resync);
    for _ in 0..3 {
        load(&f.cache, &a, Key::Templates, &calls, 10).await;
    }
    assert_eq!(calls.load(Ordering::SeqCst), 5);
}

#[test]
fn the_default_budget_is_a_bounded_share_of_memory() {
    let budget = default_max_bytes();
    assert!((MIN_DEFAULT_MAX_BYTES..=MAX_DEFAULT_MAX_BYTES).contains(&budget), "{budget}");
    assert!(machine_memory().is_some_and(|bytes| bytes > 0), "/proc/meminfo has the machine's memory");
    // A cgroup's limit: a number of bytes, or "max" for none.
    let path = std::env::temp_dir().join(format!("hivegate-memory-max-{}", std::process::id()));
    let file = |text: &str| {
        std::fs::write(&path, text).expect("written");
        path.to_string_lossy().into_owned()
    };
    assert_eq!(memory_limit(&file("536870912\n")), Some(536_870_912));
    assert_eq!(memory_limit(&file("max\n")), None);
    assert_eq!(memory_limit("/nonexistent/memory.max"), None);
    let _ = std::fs::remove_file(&path);
}

/// Loads `key` through `link`, counting how often the loader runs.
async fn load_linked(cache: &RegistryCache, link: &AgentLink, key: Key, calls: &AtomicU32) -> Arc<String> {
    let id = link.agent().id.clone();
    cache
        .get_or_load_linked(Some(link), &id, key, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(Loaded { value: "value".to_owned(), bytes: Some(10) })
        })
        .await
        .expect("load")
}

#[tokio::test]
async fn a_link_holds_until_its_agent_or_registry_goes_stale() {
    let f = fixture(MIN_DEFAULT_MAX_BYTES as usize).await;
    let actor = Actor { name: "operator".into(), request_id: None };
    for id in ["bot", "other"] {
        let new = NewAgent {
            id: agent(id),
            name: id.into(),
            description: None,
            rate_limit: None,
            cache_ttl_ms: None,
            audit_retention_days: None,
        };
        f.store.create_agent(&new, &actor).await.expect("agent");
    }
    let bot = agent("bot");
    assert!(f.cache.link(&agent("nobody")).await.expect("read").is_none());
    let link = f.cache.link(&bot).await.expect("read").expect("exists");
    assert!(f.cache.holds(&link, &bot));
    assert!(!f.cache.holds(&link, &agent("other")), "a link is for its own agent only");

    // The link's registry is the one the agent's lookups use: what one loads, the other finds.
    let calls = AtomicU32::new(0);
    load_linked(&f.cache, &link, Key::Templates, &calls).await;
    load(&f.cache, &bot, Key::Templates, &calls, 10).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // A change to the agent's registry retires the linked registry: the link no longer holds, and a load
    // through it reads afresh into the agent's new registry, where the map's lookups find it.
    f.bus.publish(BusMessage::Change { agent: bot.clone(), seq: 1 });
    assert!(!f.cache.holds(&link, &bot));
    load_linked(&f.cache, &link, Key::Templates, &calls).await;
    load(&f.cache, &bot, Key::Templates, &calls, 10).await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    // Any agent's row invalidated (its own or another's, a resync, the bus going offline) makes every
    // older link stale.
    for message in [
        BusMessage::AgentChanged { agent: bot.clone() },
        BusMessage::AgentChanged { agent: agent("other") },
        BusMessage::Resync,
    ] {
        let link = f.cache.link(&bot).await.expect("read").expect("exists");
        assert!(f.cache.holds(&link, &bot));
        f.bus.publish(message);
        assert!(!f.cache.holds(&link, &bot));
    }
    let link = f.cache.link(&bot).await.expect("read").expect("exists");
    f.bus.publish(BusMessage::Offline);
    assert!(!f.cache.holds(&link, &bot));
}
