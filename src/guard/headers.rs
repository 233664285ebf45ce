//! The IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers-11), in their structured-field
//! syntax: `RateLimit-Policy` lists the quota policies that apply to a request, `RateLimit` the service
//! limit of the tightest one after it. A third field, `Hivegate-RateLimit-Scope`, says how far that limit
//! reaches: `replica` when each replica counts on its own, `shared` when every replica counts together.
//!
//! A token bucket of `per_second` requests a second and `burst` at most is advertised as the policy
//! `q=<burst>;w=<burst/per_second, rounded up>`: the quota is the burst, the window the time the bucket
//! takes to fill up. The service limit's `r` is the requests the bucket lets through now and `t` the
//! seconds until it is full again; on a refusal, `r=0` and `t` is the wait `Retry-After` also gives.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;

use super::limiter::Limit;

pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// Says how far the limit in `RateLimit` reaches: `replica` (this replica's own bucket) or `shared` (a bucket
/// every replica takes from).
pub const RATELIMIT_SCOPE: HeaderName = HeaderName::from_static("hivegate-ratelimit-scope");

/// Whole seconds, rounded up (`delay-seconds` has no fractions; rounding down would promise too much).
pub fn seconds_up(duration: Duration) -> u64 {
    duration.as_nanos().div_ceil(1_000_000_000).try_into().unwrap_or(u64::MAX)
}

/// One quota policy: `"<name>";q=<quota>;w=<window>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub name: &'static str,
    pub quota: u32,
    /// Seconds, at least 1.
    pub window: u64,
}

impl Policy {
    /// The policy of a token bucket: its burst over the time it takes to fill.
    pub fn of_limit(name: &'static str, limit: Limit) -> Self {
        Self { name, quota: limit.burst(), window: seconds_up(limit.refill()).max(1) }
    }

    /// A plain count over a window.
    pub fn counting(name: &'static str, quota: u32, window: Duration) -> Self {
        Self { name, quota, window: seconds_up(window).max(1) }
    }
}

/// A policy's service limit after a request: `"<name>";r=<remaining>;t=<seconds>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remaining {
    pub name: &'static str,
    pub remaining: u32,
    pub reset: Duration,
}

/// Appends one structured-field list member to `field`: `"<name>";<key>=<value>` for each parameter.
fn push_item(field: &mut String, name: &str, parameters: [(&str, &str); 2]) {
    field.push('"');
    field.push_str(name);
    field.push('"');
    for (key, value) in parameters {
        field.push(';');
        field.push_str(key);
        field.push('=');
        field.push_str(value);
    }
}

/// The `RateLimit-Policy` value of `policies`. It is the same for every request of a key (its own limit and
/// its agent's), so the last one each thread made is kept and handed out again, a reference to the same
/// bytes, while the policies are the same.
fn policy_field(policies: &[Policy]) -> Option<HeaderValue> {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(SmallVec<[Policy; 2]>, HeaderValue)>> =
            const { std::cell::RefCell::new(None) };
    }
    LAST.with_borrow_mut(|last| {
        if let Some((kept, value)) = last.as_ref()
            && kept.as_slice() == policies
        {
            return Some(value.clone());
        }
        let (mut first, mut second) = (itoa::Buffer::new(), itoa::Buffer::new());
        let mut field = String::with_capacity(32 * policies.len());
        for (index, p) in policies.iter().enumerate() {
            if index > 0 {
                field.push_str(", ");
            }
            push_item(&mut field, p.name, [("q", first.format(p.quota)), ("w", second.format(p.window))]);
        }
        let value = HeaderValue::try_from(field).ok()?;
        *last = Some((SmallVec::from_slice(policies), value.clone()));
        Some(value)
    })
}

/// The field values for one answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitHeaders {
    pub policy: HeaderValue,
    pub current: HeaderValue,
    /// Whether `current` is a shared bucket's.
    pub shared: bool,
}

impl RateLimitHeaders {
    /// The fields for `policies` (none: no fields) and the tightest `current` limit (`shared` or not).
    pub fn new(policies: &[Policy], current: &Remaining, shared: bool) -> Option<Self> {
        if policies.is_empty() {
            return None;
        }
        // Set on every answer: each field is written into one buffer, its numbers by `itoa` rather than through
        // `core::fmt` (which cost about 2,000 instructions a request here).
        let (mut first, mut second) = (itoa::Buffer::new(), itoa::Buffer::new());
        let mut field = String::with_capacity(32);
        let (remaining, reset) = (first.format(current.remaining), second.format(seconds_up(current.reset)));
        push_item(&mut field, current.name, [("r", remaining), ("t", reset)]);
        // Names are our own constants and the rest digits: always a valid header value.
        Some(Self { policy: policy_field(policies)?, current: HeaderValue::try_from(field).ok()?, shared })
    }

    /// Sets the fields on an answer. By value: a cloned value would be copied into a buffer of its own.
    pub fn apply(self, headers: &mut HeaderMap) {
        headers.insert(RATELIMIT_POLICY, self.policy);
        headers.insert(RATELIMIT, self.current);
        headers.insert(RATELIMIT_SCOPE, HeaderValue::from_static(if self.shared { "shared" } else { "replica" }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::limiter::limit;

    #[test]
    fn policies_are_a_structured_field_list() {
        let policies = [Policy::of_limit("agent", limit(100, 200)), Policy::of_limit("key", limit(20, 20))];
        let current = Remaining { name: "key", remaining: 7, reset: Duration::from_millis(650) };
        let headers = RateLimitHeaders::new(&policies, &current, false).expect("fields");
        assert_eq!(headers.policy, r#""agent";q=200;w=2, "key";q=20;w=1"#);
        assert_eq!(headers.current, r#""key";r=7;t=1"#);
    }

    #[test]
    fn the_kept_policy_field_follows_the_policies() {
        let current = Remaining { name: "key", remaining: 1, reset: Duration::from_secs(1) };
        let of = |policies: &[Policy]| RateLimitHeaders::new(policies, &current, false).expect("fields").policy;
        let (one, other) = ([Policy::of_limit("key", limit(20, 20))], [Policy::of_limit("key", limit(20, 40))]);
        assert_eq!(of(&one), r#""key";q=20;w=1"#);
        assert_eq!(of(&one), r#""key";q=20;w=1"#);
        assert_eq!(of(&other), r#""key";q=40;w=2"#);
        let both = [Policy::of_limit("agent", limit(100, 200)), one[0]];
        assert_eq!(of(&both), r#""agent";q=200;w=2, "key";q=20;w=1"#);
        assert_eq!(of(&one), r#""key";q=20;w=1"#);
    }

    #[test]
    fn windows_round_up_and_are_at_least_one_second() {
        assert_eq!(Policy::of_limit("a", limit(3, 5)).window, 2, "5 / 3 s rounds up");
        assert_eq!(Policy::of_limit("a", limit(50, 1)).window, 1, "a 20 ms window is advertised as 1 s");
        assert_eq!(Policy::counting("auth-failures", 20, Duration::from_secs(60)).window, 60);
        assert_eq!(seconds_up(Duration::ZERO), 0);
        assert_eq!(seconds_up(Duration::from_millis(1001)), 2);
    }

    #[test]
    fn apply_sets_the_three_fields() {
        let policies = [Policy::of_limit("admin", limit(10, 10))];
        let current = Remaining { name: "admin", remaining: 0, reset: Duration::from_millis(100) };
        let mut headers = HeaderMap::new();
        RateLimitHeaders::new(&policies, &current, false).expect("fields").apply(&mut headers);
        assert_eq!(headers[RATELIMIT_POLICY], r#""admin";q=10;w=1"#);
        assert_eq!(headers[RATELIMIT], r#""admin";r=0;t=1"#);
        assert_eq!(headers[RATELIMIT_SCOPE], "replica");
    }

    #[test]
    fn no_policy_no_fields() {
        let current = Remaining { name: "key", remaining: 0, reset: Duration::ZERO };
        assert_eq!(RateLimitHeaders::new(&[], &current, false), None);
    }
}
