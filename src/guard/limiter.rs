//! Token buckets (GCRA, from `governor`) by name, each with the limit it was built for.

use std::num::NonZeroU32;
use std::ops::Deref;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use governor::clock::Clock;
use governor::middleware::StateInformationMiddleware;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use crate::FastMap;

/// A rate: `per_second` requests a second on average, at most `burst` at once. Both are at least 1; an
/// unlimited rate is no `Limit` at all (`Option<Limit>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    per_second: NonZeroU32,
    burst: NonZeroU32,
}

impl Limit {
    /// `None` when `per_second` is 0 (unlimited); a burst of 0 with a rate is taken as 1 (configuration and
    /// the admin API refuse it before it gets here).
    pub fn new(per_second: u32, burst: u32) -> Option<Self> {
        let per_second = NonZeroU32::new(per_second)?;
        Some(Self { per_second, burst: NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN) })
    }

    pub fn per_second(&self) -> u32 {
        self.per_second.get()
    }

    pub fn burst(&self) -> u32 {
        self.burst.get()
    }

    /// How long an empty bucket takes to fill up: `burst / per_second`.
    pub fn refill(&self) -> Duration {
        Duration::from_secs_f64(f64::from(self.burst()) / f64::from(self.per_second()))
    }

    /// The time one token takes to come back (GCRA's emission interval), in microseconds, at least 1.
    pub fn interval_micros(&self) -> i64 {
        (1_000_000 / i64::from(self.per_second())).max(1)
    }

    /// How far ahead of now a bucket's theoretical arrival time may move: `burst` intervals.
    pub fn tolerance_micros(&self) -> i64 {
        self.interval_micros().saturating_mul(i64::from(self.burst()))
    }

    /// The outcome of a request let through when the bucket's theoretical arrival time is now `ahead`
    /// microseconds after now (GCRA, as [`crate::store::ReplicaStore::take_shared_token`] keeps it).
    pub fn allowed_at(&self, ahead: i64) -> Outcome {
        let ahead = ahead.max(0);
        let left = (self.tolerance_micros() - ahead).max(0) / self.interval_micros();
        Outcome::Allowed {
            remaining: u32::try_from(left).unwrap_or(u32::MAX),
            full_in: Duration::from_micros(ahead.unsigned_abs()),
        }
    }

    /// The outcome of a request refused while the bucket's theoretical arrival time is `ahead` microseconds
    /// after now: it is let through once one more interval fits within the tolerance.
    pub fn refused_at(&self, ahead: i64) -> Outcome {
        let wait = (ahead + self.interval_micros() - self.tolerance_micros()).max(1);
        Outcome::Refused { retry_after: Duration::from_micros(wait.unsigned_abs()) }
    }

    fn quota(&self) -> Quota {
        Quota::per_second(self.per_second).allow_burst(self.burst)
    }
}

/// The answer of a bucket to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Let through; `remaining` more requests would be let through now, and the bucket is full again after
    /// at most `full_in`.
    Allowed { remaining: u32, full_in: Duration },
    /// Refused; the next request is let through after `retry_after`.
    Refused { retry_after: Duration },
}

type Limiter = DefaultDirectRateLimiter<StateInformationMiddleware>;

struct Bucket {
    limit: Limit,
    limiter: Limiter,
    last_used: Instant,
}

impl Bucket {
    fn new(limit: Limit) -> Self {
        let limiter = RateLimiter::direct(limit.quota()).with_middleware::<StateInformationMiddleware>();
        Self { limit, limiter, last_used: Instant::now() }
    }

    fn take(&mut self) -> Outcome {
        self.last_used = Instant::now();
        match self.limiter.check() {
            Ok(state) => {
                let remaining = state.remaining_burst_capacity();
                // One token comes back every 1/per_second: the used ones are back after at most this.
                let used = self.limit.burst().saturating_sub(remaining);
                let full_in = Duration::from_secs_f64(f64::from(used) / f64::from(self.limit.per_second()));
                Outcome::Allowed { remaining, full_in }
            }
            Err(not_until) => Outcome::Refused { retry_after: not_until.wait_time_from(self.limiter.clock().now()) },
        }
    }
}

/// Token buckets by name (a key id, an agent id, an admin credential). A bucket remembers the limit it was
/// built with: when the limit asked for differs (an agent's `rateLimit` was changed), the bucket is rebuilt,
/// full, so the new limit applies from that request on.
///
/// Buckets live in this replica's memory; [`Buckets::reclaim`] drops the ones idle long enough to have
/// filled up again (a new bucket is full: forgetting them changes nothing) and that no [`Bucketed`] record
/// holds.
#[derive(Default)]
pub struct Buckets {
    entries: FastMap<String, BucketHandle>,
}

impl Buckets {
    /// Takes one token from `name`'s bucket, built for `limit` if it does not exist or has another limit.
    pub fn take(&self, name: &str, limit: Limit) -> Outcome {
        self.handle(name).take(limit)
    }

    /// `name`'s bucket, made (empty of any limit until its first token is taken) if it does not exist.
    pub fn handle(&self, name: &str) -> BucketHandle {
        if let Some(handle) = self.entries.get(name) {
            return handle.clone();
        }
        self.entries.entry(name.to_owned()).or_default().clone()
    }

    /// Drops every bucket unused for longer than it takes to fill up, unless a record still holds it (it is
    /// dropped once that record has left the caches); returns how many are left. A bucket is only ever
    /// reached through this map or through a handle cloned from it, so one that only the map holds, checked
    /// under the map's lock, cannot be taken from while it is dropped.
    pub fn reclaim(&self) -> usize {
        self.entries.retain(|_, handle| Arc::strong_count(&handle.0) > 1 || !handle.is_idle());
        self.entries.shrink_to_fit();
        self.entries.len()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// One name's bucket, shared by its [`Buckets`] map and the records that keep it at hand ([`Bucketed`]).
#[derive(Clone, Default)]
pub struct BucketHandle(Arc<Mutex<Option<Bucket>>>);

impl BucketHandle {
    /// Takes one token, from a bucket built for `limit` if it has none yet or was built for another.
    pub fn take(&self, limit: Limit) -> Outcome {
        let mut bucket = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match &mut *bucket {
            Some(bucket) if bucket.limit == limit => bucket.take(),
            slot => slot.insert(Bucket::new(limit)).take(),
        }
    }

    /// Whether the bucket is full again (or was never used): forgetting it would change nothing.
    fn is_idle(&self) -> bool {
        let bucket = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        bucket.as_ref().is_none_or(|bucket| bucket.last_used.elapsed() > bucket.limit.refill())
    }
}

/// A record requests are limited by (a stored key, an agent) as the caches hold it, with its bucket once
/// the first request has looked it up by name: every later request that finds the record in a cache finds
/// its bucket with it, without a second lookup. The bucket stays the one of its [`Buckets`] map, so a record
/// loaded again (after an invalidation) gets the same bucket back, with the tokens it had.
pub struct Bucketed<T> {
    record: T,
    bucket: OnceLock<BucketHandle>,
}

impl<T> Bucketed<T> {
    pub fn new(record: T) -> Self {
        Self { record, bucket: OnceLock::new() }
    }

    /// Another record standing for the same one (a key with fewer scopes), with the bucket this one holds.
    pub fn with_record<U>(&self, record: U) -> Bucketed<U> {
        Bucketed { record, bucket: self.bucket.clone() }
    }

    /// The record's bucket in `buckets`, under `name`: always the same map and name for one record, as
    /// only the first call looks it up.
    pub fn bucket_in(&self, buckets: &Buckets, name: &str) -> &BucketHandle {
        self.bucket.get_or_init(|| buckets.handle(name))
    }

    /// Asks for the line of this record's bucket handle ([`crate::prefetch`]).
    pub fn prefetch(&self) {
        crate::prefetch::for_read(&self.bucket);
    }

    /// Asks for the bucket itself, once it was made ([`crate::prefetch`]): it reads the handle, so it
    /// comes after [`Bucketed::prefetch`].
    pub fn prefetch_bucket(&self) {
        if let Some(handle) = self.bucket.get() {
            crate::prefetch::arc(&handle.0);
        }
    }
}

impl<T> Deref for Bucketed<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.record
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Bucketed<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.record.fmt(f)
    }
}

/// Budgets by name that a request may overdraw: admitted while not in debt, charged afterwards with what it
/// turned out to cost (the bytes a `resources/read` answered with, unknown until it has run). `governor`'s
/// buckets cannot go into debt, hence this small one: `tokens` refill at `per_second` up to `burst`, and a
/// negative balance refuses until it has been paid back.
#[derive(Default)]
pub struct Budgets {
    entries: FastMap<String, Budget>,
}

struct Budget {
    limit: Limit,
    tokens: f64,
    updated: Instant,
}

impl Budget {
    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + elapsed * f64::from(self.limit.per_second())).min(f64::from(self.limit.burst()));
        self.updated = now;
    }
}

impl Budgets {
    /// Whether `name` may start a request: `Refused` while its budget is overdrawn, with the time until it is
    /// paid back; a budget built for another limit starts again, full.
    pub fn admit(&self, name: &str, limit: Limit) -> Outcome {
        let now = Instant::now();
        let mut budget = self.budget(name, limit, now);
        budget.refill(now);
        let per_second = f64::from(limit.per_second());
        if budget.tokens < 0.0 {
            return Outcome::Refused { retry_after: Duration::from_secs_f64(-budget.tokens / per_second) };
        }
        let full_in = Duration::from_secs_f64((f64::from(limit.burst()) - budget.tokens) / per_second);
        Outcome::Allowed { remaining: budget.tokens as u32, full_in }
    }

    /// Takes `amount` from `name`'s budget, into debt if need be.
    pub fn charge(&self, name: &str, limit: Limit, amount: u64) {
        let now = Instant::now();
        let mut budget = self.budget(name, limit, now);
        budget.refill(now);
        budget.tokens -= amount as f64;
    }

    fn budget(&self, name: &str, limit: Limit, now: Instant) -> dashmap::mapref::one::RefMut<'_, String, Budget> {
        let fresh = || Budget { limit, tokens: f64::from(limit.burst()), updated: now };
        let mut budget = self.entries.entry(name.to_owned()).or_insert_with(fresh);
        if budget.limit != limit {
            *budget = fresh();
        }
        budget
    }

    /// Drops every budget that has filled up again (a new one is full: forgetting it changes nothing);
    /// returns how many are left.
    pub fn reclaim(&self) -> usize {
        let now = Instant::now();
        self.entries.retain(|_, budget| {
            budget.refill(now);
            budget.tokens < f64::from(budget.limit.burst())
        });
        self.entries.shrink_to_fit();
        self.entries.len()
    }
}

/// A limited rate, for tests.
#[cfg(test)]
pub(super) fn limit(per_second: u32, burst: u32) -> Limit {
    Limit::new(per_second, burst).expect("a limited rate")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_rate_is_unlimited() {
        assert_eq!(Limit::new(0, 10), None);
        assert_eq!(limit(5, 0).burst(), 1);
    }

    #[test]
    fn a_bucket_lets_its_burst_through_then_refuses() {
        let buckets = Buckets::default();
        let limit = limit(1, 3);
        let remaining: Vec<_> = (0..3)
            .map(|_| match buckets.take("k", limit) {
                Outcome::Allowed { remaining, .. } => remaining,
                refused => panic!("refused within the burst: {refused:?}"),
            })
            .collect();
        assert_eq!(remaining, [2, 1, 0]);
        match buckets.take("k", limit) {
            Outcome::Refused { retry_after } => {
                assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_secs(1), "{retry_after:?}")
            }
            allowed => panic!("allowed beyond the burst: {allowed:?}"),
        }
        assert!(matches!(buckets.take("other", limit), Outcome::Allowed { remaining: 2, .. }), "buckets are per name");
    }

    #[test]
    fn a_changed_limit_rebuilds_the_bucket() {
        let buckets = Buckets::default();
        assert!(matches!(buckets.take("agent", limit(1, 1)), Outcome::Allowed { remaining: 0, .. }));
        assert!(matches!(buckets.take("agent", limit(1, 1)), Outcome::Refused { .. }));
        assert!(matches!(buckets.take("agent", limit(1, 5)), Outcome::Allowed { remaining: 4, .. }));
    }

    #[test]
    fn full_in_counts_the_used_tokens() {
        let buckets = Buckets::default();
        let Outcome::Allowed { full_in, .. } = buckets.take("k", limit(2, 10)) else { panic!("refused") };
        assert_eq!(full_in, Duration::from_millis(500));
    }

    #[test]
    fn a_budget_goes_into_debt_and_refuses_until_paid_back() {
        let budgets = Budgets::default();
        let limit = limit(1000, 2000);
        assert!(matches!(budgets.admit("k", limit), Outcome::Allowed { remaining: 2000, .. }));
        budgets.charge("k", limit, 5000);
        match budgets.admit("k", limit) {
            Outcome::Refused { retry_after } => {
                // 3000 bytes of debt at 1000 a second, less what came back since.
                assert!(retry_after > Duration::from_millis(2900) && retry_after <= Duration::from_secs(3));
            }
            allowed => panic!("admitted while overdrawn: {allowed:?}"),
        }
        assert!(matches!(budgets.admit("other", limit), Outcome::Allowed { .. }), "budgets are per name");
        assert_eq!(budgets.reclaim(), 1, "the overdrawn budget is kept, the full one dropped");
    }

    #[test]
    fn shared_bucket_arithmetic_matches_gcra() {
        let limit = limit(10, 3);
        assert_eq!((limit.interval_micros(), limit.tolerance_micros()), (100_000, 300_000));
        // A fresh bucket after one request: the tat is one interval ahead, two more fit.
        assert_eq!(limit.allowed_at(100_000), Outcome::Allowed { remaining: 2, full_in: Duration::from_millis(100) });
        assert_eq!(limit.allowed_at(300_000), Outcome::Allowed { remaining: 0, full_in: Duration::from_millis(300) });
        // Refused with the tat 300 ms ahead: the next request fits 100 ms later.
        assert_eq!(limit.refused_at(300_000), Outcome::Refused { retry_after: Duration::from_millis(100) });
        assert_eq!(Limit::new(2_000_000, 1).map(|l| l.interval_micros()), Some(1), "at least a microsecond");
    }

    #[test]
    fn a_bucketed_record_holds_its_names_bucket() {
        let buckets = Buckets::default();
        let limit = limit(1, 3);
        assert!(matches!(buckets.take("k", limit), Outcome::Allowed { remaining: 2, .. }));
        let record = Bucketed::new("k");
        assert!(matches!(record.bucket_in(&buckets, "k").take(limit), Outcome::Allowed { remaining: 1, .. }));
        // Loaded again after an invalidation: another record, the same bucket, the tokens it had.
        let reloaded = Bucketed::new("k");
        assert!(matches!(reloaded.bucket_in(&buckets, "k").take(limit), Outcome::Allowed { remaining: 0, .. }));
        assert!(matches!(buckets.take("k", limit), Outcome::Refused { .. }), "the map's bucket is the same one");
        let narrowed = record.with_record("k with fewer scopes");
        let other = Buckets::default();
        assert!(matches!(narrowed.bucket_in(&other, "k").take(limit), Outcome::Refused { .. }), "the bucket it holds");
        assert!(other.is_empty(), "nothing looked up");
        assert_eq!(buckets.len(), 1);
    }

    #[test]
    fn reclaim_keeps_a_held_bucket_until_its_record_is_gone() {
        let buckets = Buckets::default();
        // Refills in a millisecond: idle long enough at once.
        let fast = limit(1000, 1);
        let record = Bucketed::new(());
        record.bucket_in(&buckets, "held").take(fast);
        buckets.take("free", fast);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(buckets.reclaim(), 1, "the free bucket is dropped, the held one kept");
        drop(record);
        assert_eq!(buckets.reclaim(), 0, "dropped once no record holds it");
    }

    #[test]
    fn reclaim_keeps_buckets_that_are_not_full_yet() {
        let buckets = Buckets::default();
        buckets.take("slow", limit(1, 1000));
        assert_eq!(buckets.reclaim(), 1, "a bucket that takes 1000 s to fill is kept");
        assert_eq!(buckets.len(), 1);
    }
}
