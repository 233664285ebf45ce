//! Counters and latency histograms that every request updates, kept in a shard per thread.
//!
//! A metric shared by the threads that serve connections is a cache line they take from each other on every
//! request: a counter's value, a histogram's lock and buckets, the lock of the map its label set is looked up
//! in. Each is a transfer between CPUs (about 270 ns one way on a 2-CPU AMD EPYC virtual machine): the five
//! updates of an MCP request took 200–270 ns with two threads side by side and 80–110 on one; in shards,
//! 60–90 ns with two and about the same as before on one (`bench/metric-shards`, bench/README.md). Each
//! thread updates a shard of its own, and a scrape adds the shards up; the label sets are looked up in a map
//! of the thread's shard too. The threads serving connections each claim a shard of the lower half
//! ([`claim_shard`]); any other thread takes one of the upper half as it first updates a metric.
//!
//! The exported text is the same as for `prometheus_client`'s `Counter` and `Histogram` of the same
//! buckets. A histogram's count is the sum of its buckets, so a scrape never sees them disagree; its sum
//! may differ from them by the observations being made meanwhile.
//!
//! Memory: each shard of a metric takes its own cache lines (128 bytes, as `crossbeam_utils::CachePadded`
//! aligns on x86_64): a counter 128 bytes a shard and a latency histogram 256, for each label set. With 4
//! shards (2 CPUs) that is 0.5 and 1 KiB, with 64 (32 CPUs or more) 8 and 16 KiB; the label sets are
//! bounded (route templates, methods, statuses, MCP methods, eras, outcomes), a few dozen on a busy server.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use crossbeam_utils::CachePadded;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// The upper bounds of a latency histogram's buckets, in seconds: 100 µs doubling to about 13 s, then the
/// rest (`+Inf`, as `prometheus_client` closes a histogram's buckets).
const LATENCY_BOUNDS: [f64; LATENCY_BUCKETS] = {
    let mut bounds = [f64::INFINITY; LATENCY_BUCKETS];
    let mut i = 0;
    let mut bound = 0.0001;
    while i < LATENCY_BUCKETS - 1 {
        bounds[i] = bound;
        bound *= 2.0;
        i += 1;
    }
    bounds
};

/// A latency histogram's buckets: 18 bounds and the rest.
const LATENCY_BUCKETS: usize = 19;

/// The shards of each metric: the power of two at or above twice the CPUs the process may use (at most 64):
/// the lower half for the threads serving connections (one per CPU by default), the upper half for the rest
/// (the runtime's workers, as many, and the blocking pool's threads).
pub fn shard_count() -> usize {
    static COUNT: LazyLock<usize> = LazyLock::new(|| {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        (cpus * 2).next_power_of_two().min(64)
    });
    *COUNT
}

thread_local! {
    /// This thread's shard, once it has one.
    static SHARD: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Gives the thread serving connections numbered `index` its shard: the `index`th of the lower half (modulo
/// its size), so that no two of them share one while they are no more than half the shards.
pub fn claim_shard(index: usize) {
    SHARD.with(|shard| shard.set(Some(index % (shard_count() / 2))));
}

/// This thread's shard: the one it claimed, or else one of the upper half, in turn as threads first update
/// a metric.
fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    SHARD.with(|shard| match shard.get() {
        Some(index) => index,
        None => {
            let half = shard_count() / 2;
            let index = half + NEXT.fetch_add(1, Ordering::Relaxed) % half;
            shard.set(Some(index));
            index
        }
    })
}

/// A counter in shards.
#[derive(Clone, Debug)]
pub struct ShardedCounter(Arc<[CachePadded<AtomicU64>]>);

impl Default for ShardedCounter {
    fn default() -> Self {
        Self((0..shard_count()).map(|_| CachePadded::new(AtomicU64::new(0))).collect())
    }
}

impl ShardedCounter {
    pub fn inc(&self) {
        self.0[shard()].fetch_add(1, Ordering::Relaxed);
    }

    /// The count: every shard's, added up.
    pub fn get(&self) -> u64 {
        self.0.iter().map(|shard| shard.load(Ordering::Relaxed)).fold(0, u64::wrapping_add)
    }
}

impl TypedMetric for ShardedCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for ShardedCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// One shard of a latency histogram: how many observations fell in each bucket, and their sum (the bits
/// of an `f64`).
#[derive(Debug, Default)]
struct HistogramShard {
    buckets: [AtomicU64; LATENCY_BUCKETS],
    sum: AtomicU64,
}

/// A latency histogram in shards (seconds, [`LATENCY_BOUNDS`]).
#[derive(Clone, Debug)]
pub struct LatencyHistogram(Arc<[CachePadded<HistogramShard>]>);

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self((0..shard_count()).map(|_| CachePadded::new(HistogramShard::default())).collect())
    }
}

impl LatencyHistogram {
    /// Counts `seconds` in the first bucket whose bound it does not exceed (the last for NaN).
    pub fn observe(&self, seconds: f64) {
        let shard = &self.0[shard()];
        let bucket = LATENCY_BOUNDS.iter().position(|bound| seconds <= *bound).unwrap_or(LATENCY_BUCKETS - 1);
        shard.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        // The shard's own thread is almost always the only one adding: the exchange rarely loops.
        let _ = shard
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |sum| Some((f64::from_bits(sum) + seconds).to_bits()));
    }

    /// Sum, count and each bucket's own count, every shard's added up.
    fn snapshot(&self) -> (f64, u64, [(f64, u64); LATENCY_BUCKETS]) {
        let mut buckets = LATENCY_BOUNDS.map(|bound| (bound, 0u64));
        let mut sum = 0.0;
        for shard in self.0.iter() {
            for (total, count) in buckets.iter_mut().zip(&shard.buckets) {
                total.1 = total.1.wrapping_add(count.load(Ordering::Relaxed));
            }
            sum += f64::from_bits(shard.sum.load(Ordering::Relaxed));
        }
        let count = buckets.iter().map(|(_, count)| *count).fold(0, u64::wrapping_add);
        (sum, count, buckets)
    }
}

impl TypedMetric for LatencyHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.snapshot();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A family of metrics updated on every request, whose label sets are looked up in a map of the thread's
/// shard: each label set's metric is taken from the family once per shard (`Family::get_or_create` hashes
/// the labels with SipHash under the family's lock shared by every thread) and kept in that map, hashed
/// with foldhash. Its label sets are the family's, bounded (route templates, methods, statuses, MCP
/// methods, eras, outcomes).
pub struct Resolved<S, M, C = fn() -> M> {
    family: Family<S, M, C>,
    shards: Box<[Shard<S, M>]>,
}

/// A shard's map of the label sets its thread has updated.
type Shard<S, M> = CachePadded<Mutex<HashMap<S, M, foldhash::fast::RandomState>>>;

impl<S, M, C> Resolved<S, M, C> {
    /// The family, as it is registered and exported.
    pub fn family(&self) -> &Family<S, M, C> {
        &self.family
    }
}

impl<S, M, C> Resolved<S, M, C>
where
    S: Clone + Hash + Eq,
    M: Clone,
    C: MetricConstructor<M>,
{
    pub fn new(family: Family<S, M, C>) -> Self {
        let shards = (0..shard_count()).map(|_| CachePadded::new(Mutex::new(HashMap::default()))).collect();
        Self { family, shards }
    }

    /// Updates the metric of `labels` (created in the family the first time).
    pub fn with(&self, labels: &S, update: impl FnOnce(&M)) {
        let mut resolved = self.shards[shard()].lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(metric) = resolved.get(labels) {
            return update(metric);
        }
        let metric = self.family.get_or_create_owned(labels);
        update(&metric);
        resolved.insert(labels.clone(), metric);
    }
}

impl<S: Clone + Hash + Eq, C> Resolved<S, ShardedCounter, C> {
    /// The sum of the counters whose labels pass `include`: the console's overview reads the figures
    /// `/metrics` exports.
    pub fn total(&self, include: impl Fn(&S) -> bool) -> u64 {
        let mut counters = HashMap::<S, u64, foldhash::fast::RandomState>::default();
        for shard in self.shards.iter() {
            let resolved = shard.lock().unwrap_or_else(PoisonError::into_inner);
            for (labels, counter) in resolved.iter().filter(|(labels, _)| include(labels)) {
                counters.entry(labels.clone()).or_insert_with(|| counter.get());
            }
        }
        counters.values().fold(0, |total, count| total.wrapping_add(*count))
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
    use prometheus_client::registry::Registry;

    use super::*;

    fn text(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).expect("encodes");
        text
    }

    /// The same observations, from several threads, export exactly what `prometheus_client`'s own metrics
    /// export for them.
    #[test]
    fn exports_what_the_unsharded_metrics_export() {
        let (counter, histogram) = (ShardedCounter::default(), LatencyHistogram::default());
        let (plain_counter, plain_histogram) =
            (Counter::<u64>::default(), Histogram::new(exponential_buckets(0.0001, 2.0, 18)));
        // Powers of two, whose sums are exact in any order (bounds are tested on their own below).
        let values = [0.0, 0.000_061_035_156_25, 0.000_122_070_312_5, 0.003_906_25, 0.5, 1.0, 16.0, 1024.0];
        std::thread::scope(|scope| {
            for thread in 0..4 {
                let (counter, histogram) = (&counter, &histogram);
                scope.spawn(move || {
                    for value in values.iter().skip(thread) {
                        counter.inc();
                        histogram.observe(*value);
                    }
                });
            }
        });
        for thread in 0..4 {
            for value in values.iter().skip(thread) {
                plain_counter.inc();
                plain_histogram.observe(*value);
            }
        }
        let mut sharded = Registry::default();
        sharded.register("requests", "Requests", counter);
        sharded.register("duration_seconds", "Durations", histogram);
        let mut plain = Registry::default();
        plain.register("requests", "Requests", plain_counter);
        plain.register("duration_seconds", "Durations", plain_histogram);
        assert_eq!(text(&sharded), text(&plain));
    }

    /// Observations on the buckets' bounds, below the first, infinite and not a number fall in the buckets
    /// `prometheus_client` puts them in (one thread: the sums add up in the same order).
    #[test]
    fn buckets_take_what_prometheus_client_buckets_take() {
        let histogram = LatencyHistogram::default();
        let plain = Histogram::new(exponential_buckets(0.0001, 2.0, 18));
        let values = [-1.0, 0.0, 0.0001, 0.0002, 0.000_200_1, 0.0256, 13.1072, 13.2, f64::INFINITY];
        for value in values {
            histogram.observe(value);
            plain.observe(value);
        }
        let mut sharded = Registry::default();
        sharded.register("duration_seconds", "Durations", histogram.clone());
        let mut reference = Registry::default();
        reference.register("duration_seconds", "Durations", plain.clone());
        assert_eq!(text(&sharded), text(&reference));
        // Not a number goes in the last bucket (the sums, NaN both, print alike).
        histogram.observe(f64::NAN);
        plain.observe(f64::NAN);
        assert_eq!(text(&sharded), text(&reference));
        assert!(text(&sharded).contains("duration_seconds_bucket{le=\"+Inf\"} 10"), "{}", text(&sharded));
    }

    /// Threads serving connections claim the lower half of the shards, one each; other threads take the
    /// upper half.
    #[test]
    fn connection_threads_claim_shards_of_their_own() {
        let half = shard_count() / 2;
        let claimed: Vec<usize> = (0..half)
            .map(|index| {
                std::thread::spawn(move || {
                    claim_shard(index);
                    shard()
                })
                .join()
                .expect("the thread ran")
            })
            .collect();
        assert_eq!(claimed, (0..half).collect::<Vec<_>>());
        let other = std::thread::spawn(shard).join().expect("the thread ran");
        assert!((half..shard_count()).contains(&other), "{other} is not in the upper half");
    }

    /// A family resolved per shard exports each label set once, with every thread's updates, and totals
    /// what passes the filter.
    #[test]
    fn a_resolved_family_adds_up_every_thread() {
        let resolved: Resolved<(&'static str, u16), ShardedCounter> = Resolved::new(Family::default());
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..100 {
                        resolved.with(&("ok", 200), ShardedCounter::inc);
                    }
                    resolved.with(&("error", 500), ShardedCounter::inc);
                });
            }
        });
        assert_eq!(resolved.total(|_| true), 808);
        assert_eq!(resolved.total(|(_, status)| *status >= 500), 8);
        assert_eq!(resolved.family().get_or_create(&("ok", 200)).get(), 800);
    }
}
