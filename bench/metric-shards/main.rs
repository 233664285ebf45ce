//! What the metrics every MCP request updates cost when two threads serve requests side by side: the five
//! updates of a request (the HTTP and MCP latency histograms and request counters, each looked up by its
//! labels, and the cache's hit counter), made as hivegate makes them (`hivegate::metrics`, a shard per
//! thread) and as they were made before (`prometheus_client`'s `Histogram` and `Counter`, shared by every
//! thread, looked up in a `DashMap`), between stretches of other work on each thread, the way requests
//! come one after another on the threads serving connections.
//!
//! Each line gives the time a request took with its updates, and what is left after the same threads ran
//! the same work without them, per request, for one thread and for two (bench/README.md).
//!
//!     cargo run --release --example metric_shards [ROUNDS]

use std::hint::black_box;
use std::sync::Barrier;
use std::time::Instant;

use dashmap::DashMap;
use foldhash::fast::RandomState;
use hivegate::metrics::{LatencyHistogram, Resolved, ShardedCounter};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

/// Requests each thread makes in a run.
const REQUESTS: u32 = 200_000;

/// Labels of a request, as bounded as hivegate's (a route template and a status).
type Labels = (&'static str, u16);

const LABELS: Labels = ("/{agent_id}/mcp", 200);

/// The updates as they were made before: one metric shared by every thread for each label set, looked up
/// in a map shared by every thread.
struct Shared {
    histograms: Family<Labels, Histogram, fn() -> Histogram>,
    counters: Family<Labels, Counter>,
    http_duration: DashMap<Labels, Histogram, RandomState>,
    http_requests: DashMap<Labels, Counter, RandomState>,
    mcp_duration: DashMap<Labels, Histogram, RandomState>,
    mcp_requests: DashMap<Labels, Counter, RandomState>,
    hits: Counter,
}

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

impl Shared {
    fn observe(&self, resolved: &DashMap<Labels, Histogram, RandomState>, seconds: f64) {
        if let Some(histogram) = resolved.get(&LABELS) {
            return histogram.observe(seconds);
        }
        let histogram = self.histograms.get_or_create_owned(&LABELS);
        histogram.observe(seconds);
        resolved.insert(LABELS, histogram);
    }

    fn count(&self, resolved: &DashMap<Labels, Counter, RandomState>) {
        if let Some(counter) = resolved.get(&LABELS) {
            counter.inc();
            return;
        }
        let counter = self.counters.get_or_create_owned(&LABELS);
        counter.inc();
        resolved.insert(LABELS, counter);
    }

    fn request(&self) {
        self.observe(&self.http_duration, 0.0012);
        self.count(&self.http_requests);
        self.observe(&self.mcp_duration, 0.0011);
        self.count(&self.mcp_requests);
        self.hits.inc();
    }
}

/// The updates as hivegate makes them.
struct Sharded {
    http_duration: Resolved<Labels, LatencyHistogram>,
    http_requests: Resolved<Labels, ShardedCounter>,
    mcp_duration: Resolved<Labels, LatencyHistogram>,
    mcp_requests: Resolved<Labels, ShardedCounter>,
    hits: ShardedCounter,
}

impl Sharded {
    fn request(&self) {
        self.http_duration.with(&LABELS, |histogram| histogram.observe(0.0012));
        self.http_requests.with(&LABELS, ShardedCounter::inc);
        self.mcp_duration.with(&LABELS, |histogram| histogram.observe(0.0011));
        self.mcp_requests.with(&LABELS, ShardedCounter::inc);
        self.hits.inc();
    }
}

/// Work that touches nothing shared: `steps` rounds of a multiply and an add.
fn work(steps: u64) -> u64 {
    let mut x = 1u64;
    for step in 0..steps {
        x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(step));
    }
    x
}

/// Nanoseconds a request of `threads` threads side by side, each request `steps` of work and `update`.
fn run(threads: usize, steps: u64, update: &(dyn Fn() + Sync)) -> f64 {
    let start = Barrier::new(threads);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                start.wait();
                for _ in 0..REQUESTS {
                    update();
                    black_box(work(steps));
                }
            });
        }
    });
    started.elapsed().as_nanos() as f64 / f64::from(REQUESTS)
}

fn main() {
    let rounds = std::env::args().nth(1).and_then(|rounds| rounds.parse().ok()).unwrap_or(3);
    let shared = Shared {
        histograms: Family::new_with_constructor(latency_histogram),
        counters: Family::default(),
        http_duration: DashMap::default(),
        http_requests: DashMap::default(),
        mcp_duration: DashMap::default(),
        mcp_requests: DashMap::default(),
        hits: Counter::default(),
    };
    let sharded = Sharded {
        http_duration: Resolved::new(Family::default()),
        http_requests: Resolved::new(Family::default()),
        mcp_duration: Resolved::new(Family::default()),
        mcp_requests: Resolved::new(Family::default()),
        hits: ShardedCounter::default(),
    };
    // About 2.5 µs of work between two requests' updates: long enough for the other thread to have taken
    // the lines the updates write, as it does between real requests.
    let steps = 2_000;
    for round in 1..=rounds {
        for threads in [1, 2] {
            let bare = run(threads, steps, &|| {});
            let before = run(threads, steps, &|| shared.request());
            let now = run(threads, steps, &|| sharded.request());
            println!(
                "round {round}, {threads} thread(s): a request {bare:.0} ns without the updates; with them, \
                 shared {before:.0} ns (+{:.0}), in shards {now:.0} ns (+{:.0})",
                before - bare,
                now - bare
            );
        }
    }
}
