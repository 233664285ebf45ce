//! Rate limits: requests per key, per agent and per admin credential, and failed authentications per client
//! address. Limits are kept in this replica's memory: with `n` replicas behind a load balancer a client
//! can get up to `n` times a limit, and the answers say so (`Hivegate-RateLimit-Scope: replica`). An agent's
//! or a key's own `rateLimit` with `"shared": true` is instead counted in the database by every replica
//! together ([`crate::store::ReplicaStore::take_shared_token`]: one atomic upsert per token, exact across
//! replicas), and then the answers say `Hivegate-RateLimit-Scope: shared`.
//!
//! - MCP (`/{agent_id}/mcp`, every method): after the key and the agent are known (the contract's order of
//!   checks), one token per JSON-RPC message from the key's bucket (the key's `rateLimit`, else
//!   `rate_limits.key_*`) and then from the agent's, shared by all its keys (the agent's `rateLimit`, else
//!   `rate_limits.agent_*`): an HTTP request takes one before its body is read, and each further message of
//!   a batch one more as it is served (`crate::mcp::transport`). A refusal is `McpError::RateLimited` (429,
//!   `Retry-After`, -31429 with `data.retryAfterMs`; inside a batch, the refused messages' errors); a shared
//!   bucket the database cannot answer for is `McpError::Unavailable` (503): an exact limit fails closed.
//! - Costly methods, per key and apart from the request limits (`rate_limits.prompts_get_*`,
//!   `completion_*`, `read_bytes_*`; off by default): a token per `prompts/get` or `completion/complete`,
//!   and a byte budget for `resources/read` answers (admitted while not overdrawn, charged with the answer's
//!   size). A refusal is the same 429/-31429, with the `RateLimit*` fields of the refusing policy.
//! - Admin API: one bucket per credential (the operator token, each registry key), `rate_limits.admin_*`,
//!   checked once the credential is accepted; a refusal is 429 problem+json with `Retry-After`.
//! - Failed authentication: the `gate` around both endpoints counts 401 answers per client address
//!   ([`client_ip`], [`failed_auth`]) and refuse a client that used up its attempts before anything else.
//!
//! The checks run inside the handlers, but the answer is finished by the middleware: the handler's check
//! leaves the header values in a [`RateLimitSlot`] (handed to the MCP endpoint, a request extension for the
//! admin API), and the middleware copies them onto whatever response comes back ([`headers`]).
//!
//! [`client_ip`]: crate::guard::client_ip
//! [`failed_auth`]: crate::guard::failed_auth
//! [`RateLimitSlot`]: crate::guard::RateLimitSlot
//! [`headers`]: crate::guard::headers

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Extensions, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ipnet::IpNet;
use smallvec::SmallVec;

use crate::config::RateLimitsConfig;
use crate::domain::model::{Agent, KeyRecord};
use crate::error::ApiError;
use crate::mcp::error::McpError;
use crate::metrics::{Metrics, ScopeLabels};
use crate::state::AppState;
use crate::store::{Store, StoreResult};
use crate::task::AbortOnDrop;

/// The client address behind trusted proxies.
pub mod client_ip;
/// Failed authentications per client address.
pub mod failed_auth;
/// `RateLimit-Policy` and `RateLimit`.
pub mod headers;
/// Token buckets by name.
pub mod limiter;

use failed_auth::FailedAuth;
use headers::{Policy, RateLimitHeaders, Remaining};
pub use limiter::Bucketed;
use limiter::{BucketHandle, Buckets, Budgets, Limit, Outcome};

/// How often idle buckets and ended failure windows are forgotten.
const RECLAIM_EVERY: Duration = Duration::from_secs(60);

/// Policy names, as the `RateLimit` fields show them.
const KEY: &str = "key";
const AGENT: &str = "agent";
const ADMIN: &str = "admin";
const AUTH_FAILURES: &str = "auth-failures";
const PROMPTS_GET: &str = "prompts-get";
const COMPLETION: &str = "completion";
const READ_BYTES: &str = "read-bytes";

/// A method whose cost is limited apart from the request it came in ([`Guard::method`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Costly {
    GetPrompt,
    Complete,
    ReadResource,
}

/// Every limiter of this replica.
pub struct Guard {
    key_limit: Option<Limit>,
    agent_default: Option<Limit>,
    admin_limit: Option<Limit>,
    prompts_get_limit: Option<Limit>,
    completion_limit: Option<Limit>,
    read_bytes_limit: Option<Limit>,
    keys: Buckets,
    agents: Buckets,
    admins: Buckets,
    prompts_get: Buckets,
    completions: Buckets,
    read_bytes: Budgets,
    failures: FailedAuth,
    trusted_proxies: Vec<IpNet>,
}

impl Guard {
    pub fn new(config: &RateLimitsConfig) -> Self {
        Self {
            key_limit: Limit::new(config.key_requests_per_second, config.key_burst),
            agent_default: Limit::new(config.agent_requests_per_second, config.agent_burst),
            admin_limit: Limit::new(config.admin_requests_per_second, config.admin_burst),
            prompts_get_limit: Limit::new(config.prompts_get_per_second, config.prompts_get_burst),
            completion_limit: Limit::new(config.completion_per_second, config.completion_burst),
            read_bytes_limit: Limit::new(config.read_bytes_per_second, config.read_bytes_burst),
            keys: Buckets::default(),
            agents: Buckets::default(),
            admins: Buckets::default(),
            prompts_get: Buckets::default(),
            completions: Buckets::default(),
            read_bytes: Budgets::default(),
            failures: FailedAuth::new(config.failed_auth_attempts, Duration::from_secs(config.failed_auth_window_secs)),
            trusted_proxies: config.trusted_proxies.clone(),
        }
    }

    /// One MCP message of `key` to `agent`: a token from the key's bucket, then from the agent's; a shared
    /// bucket is asked in `store`. The records' buckets in this replica are the ones they hold
    /// ([`Bucketed`]), looked up by name only by the first request of a record loaded into a cache.
    pub async fn mcp(
        &self,
        key: &Bucketed<KeyRecord>,
        agent: &Bucketed<Agent>,
        store: &dyn Store,
    ) -> StoreResult<Verdict> {
        let (key_limit, key_shared) = own_or(key.rate_limit.as_ref(), self.key_limit);
        let (agent_limit, agent_shared) = own_or(agent.rate_limit.as_ref(), self.agent_default);
        // A bucket in this replica only where a limit is kept here: an unlimited or shared one makes none.
        let key_bucket = key_limit.map(|limit| match key_shared {
            true => (limit, Source::Shared(store)),
            false => (limit, Source::Local(key.bucket_in(&self.keys, &key.id))),
        });
        let agent_bucket = agent_limit.map(|limit| match agent_shared {
            true => (limit, Source::Shared(store)),
            false => (limit, Source::Local(agent.bucket_in(&self.agents, agent.id.as_str()))),
        });
        Verdict::of(&[
            Check { policy: KEY, name: &key.id, bucket: key_bucket },
            Check { policy: AGENT, name: agent.id.as_str(), bucket: agent_bucket },
        ])
        .await
    }

    /// One admin request of `credential` (`operator` or `key:<id>`).
    pub async fn admin(&self, credential: &str) -> Verdict {
        let bucket = self.admin_limit.map(|limit| (limit, self.admins.handle(credential)));
        let check = Check {
            policy: ADMIN,
            name: credential,
            bucket: bucket.as_ref().map(|(limit, bucket)| (*limit, Source::Local(bucket))),
        };
        // No shared bucket, so no store to fail.
        Verdict::of(&[check]).await.unwrap_or_else(|_| Verdict::default())
    }

    /// Before a costly method of `key_id`: a token from its method bucket, or (`resources/read`) whether its
    /// byte budget is not overdrawn. No limit configured, no fields.
    pub fn method(&self, key_id: &str, method: Costly) -> Verdict {
        let (policy, limit) = match method {
            Costly::GetPrompt => (PROMPTS_GET, self.prompts_get_limit),
            Costly::Complete => (COMPLETION, self.completion_limit),
            Costly::ReadResource => (READ_BYTES, self.read_bytes_limit),
        };
        let Some(limit) = limit else { return Verdict::default() };
        let outcome = match method {
            Costly::GetPrompt => self.prompts_get.take(key_id, limit),
            Costly::Complete => self.completions.take(key_id, limit),
            Costly::ReadResource => self.read_bytes.admit(key_id, limit),
        };
        Verdict::single(policy, limit, outcome)
    }

    /// After a `resources/read` of `key_id` answered with `bytes`: charged to its byte budget.
    pub fn charge_read(&self, key_id: &str, bytes: usize) {
        if let Some(limit) = self.read_bytes_limit {
            self.read_bytes.charge(key_id, limit, bytes as u64);
        }
    }

    /// The client address of a request from `peer` (see [`client_ip::client_ip`]).
    pub fn client_ip(&self, peer: IpAddr, headers: &axum::http::HeaderMap) -> IpAddr {
        client_ip::client_ip(peer, headers, &self.trusted_proxies)
    }

    pub fn failures(&self) -> &FailedAuth {
        &self.failures
    }

    /// Forgets idle buckets and ended failure windows.
    pub fn reclaim(&self) {
        let left = [self.keys.reclaim(), self.agents.reclaim(), self.admins.reclaim(), self.failures.reclaim()];
        let methods = [self.prompts_get.reclaim(), self.completions.reclaim(), self.read_bytes.reclaim()];
        tracing::debug!(
            keys = left[0],
            agents = left[1],
            admin = left[2],
            clients = left[3],
            methods = methods.iter().sum::<usize>(),
            "rate limiters reclaimed"
        );
    }

    /// Starts forgetting idle state every minute, for as long as the returned task lives.
    pub fn start_reclaiming(self: &Arc<Self>) -> Reclaimer {
        let guard = Arc::downgrade(self);
        Reclaimer {
            _task: AbortOnDrop::spawn(async move {
                let mut ticker = tokio::time::interval(RECLAIM_EVERY);
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                ticker.tick().await;
                loop {
                    ticker.tick().await;
                    let Some(guard) = guard.upgrade() else { return };
                    guard.reclaim();
                }
            }),
        }
    }

    /// The fields of an answer refused for failed authentications.
    fn failures_headers(&self, wait: Duration) -> Option<RateLimitHeaders> {
        let policy = Policy::counting(AUTH_FAILURES, self.failures.attempts(), self.failures.window());
        RateLimitHeaders::new(&[policy], &Remaining { name: AUTH_FAILURES, remaining: 0, reset: wait }, false)
    }
}

/// The reclaiming task; dropping it (with the application) stops it.
pub struct Reclaimer {
    _task: AbortOnDrop,
}

/// A record's own limit (with whether it is shared), else the configured default (kept per replica).
fn own_or(own: Option<&crate::domain::model::RateLimit>, default: Option<Limit>) -> (Option<Limit>, bool) {
    match own {
        Some(limit) => (Limit::new(limit.requests_per_second, limit.burst), limit.shared),
        None => (default, false),
    }
}

/// One bucket to take a token from, named `name` under the policy named `policy`; no limit, no bucket.
struct Check<'a> {
    policy: &'static str,
    name: &'a str,
    /// The limit and where its bucket is kept; `None` when unlimited.
    bucket: Option<(Limit, Source<'a>)>,
}

/// Where a check's bucket is kept.
#[derive(Clone, Copy)]
enum Source<'a> {
    /// In this replica's memory.
    Local(&'a BucketHandle),
    /// In the database, as `<policy>:<name>`, counted by every replica together.
    Shared(&'a dyn Store),
}

/// What the limits said about one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// The time until the refusing bucket lets a request through; `None` when the request may go on.
    pub retry_after: Option<Duration>,
    /// The `RateLimit*` fields; `None` when no limit applies.
    pub headers: Option<RateLimitHeaders>,
    /// The policy that refused (`key`, `agent`, `admin`), for the refusal metric.
    pub refused_by: Option<&'static str>,
}

impl Verdict {
    /// Takes a token from each limited bucket in turn, stopping at the first refusal (the buckets after it
    /// keep their tokens). The tightest service limit is the refusing one, else the one with the fewest
    /// requests left.
    async fn of(checks: &[Check<'_>]) -> StoreResult<Self> {
        // A key's limit and its agent's: held inline, not allocated for every request.
        let mut policies: SmallVec<[Policy; 2]> = SmallVec::with_capacity(checks.len());
        let mut tightest: Option<(Remaining, bool)> = None;
        let mut retry_after = None;
        let mut refused_by = None;
        for &Check { policy: name, name: bucket, bucket: limited } in checks {
            let Some((limit, source)) = limited else { continue };
            policies.push(Policy::of_limit(name, limit));
            if retry_after.is_some() {
                continue;
            }
            let (outcome, shared) = match source {
                Source::Shared(store) => (store.take_shared_token(&format!("{name}:{bucket}"), limit).await?, true),
                Source::Local(local) => (local.take(limit), false),
            };
            let remaining = match outcome {
                Outcome::Allowed { remaining, full_in } => Remaining { name, remaining, reset: full_in },
                Outcome::Refused { retry_after: wait } => {
                    retry_after = Some(wait);
                    refused_by = Some(name);
                    Remaining { name, remaining: 0, reset: wait }
                }
            };
            if retry_after.is_some() || tightest.is_none_or(|(t, _)| remaining.remaining < t.remaining) {
                tightest = Some((remaining, shared));
            }
        }
        let headers = tightest.and_then(|(current, shared)| RateLimitHeaders::new(&policies, &current, shared));
        Ok(Self { retry_after, headers, refused_by })
    }

    /// The verdict of one bucket's `outcome`.
    fn single(policy: &'static str, limit: Limit, outcome: Outcome) -> Self {
        let (current, retry_after) = match outcome {
            Outcome::Allowed { remaining, full_in } => (Remaining { name: policy, remaining, reset: full_in }, None),
            Outcome::Refused { retry_after } => {
                (Remaining { name: policy, remaining: 0, reset: retry_after }, Some(retry_after))
            }
        };
        Self {
            retry_after,
            headers: RateLimitHeaders::new(&[Policy::of_limit(policy, limit)], &current, false),
            refused_by: retry_after.map(|_| policy),
        }
    }

    /// Leaves the fields for the `gate` to put on the answer, and counts a refusal in `metrics`; `Err`
    /// with the wait when refused.
    pub fn settle(self, extensions: &Extensions, metrics: &Metrics) -> Result<(), Duration> {
        self.settle_in(extensions.get::<RateLimitSlot>(), metrics)
    }

    /// [`Verdict::settle`] with the request's slot at hand.
    pub fn settle_in(self, slot: Option<&RateLimitSlot>, metrics: &Metrics) -> Result<(), Duration> {
        if let (Some(slot), Some(headers)) = (slot, self.headers) {
            slot.set(headers);
        }
        if let Some(scope) = self.refused_by {
            metrics.rate_limited.get_or_create(&ScopeLabels { scope }).inc();
        }
        self.retry_after.map_or(Ok(()), Err)
    }
}

/// A wait as `retryAfterMs`: milliseconds, rounded up, at least 1.
pub fn millis_up(wait: Duration) -> u64 {
    u64::try_from(wait.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX).max(1)
}

/// Where a handler leaves the `RateLimit*` fields for the `gate` to put on its answer.
#[derive(Clone, Default)]
pub struct RateLimitSlot(Arc<Mutex<Option<RateLimitHeaders>>>);

impl RateLimitSlot {
    fn set(&self, headers: RateLimitHeaders) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(headers);
    }

    fn take(&self) -> Option<RateLimitHeaders> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// Around `/{agent_id}/mcp` ([`crate::mcp::transport::endpoint`]): failed authentications per client, and
/// the `RateLimit*` fields on the answer of `run`.
/// `run` is given the slot its rate-limit checks leave the fields in, and marks a 401 that refused a presented
/// credential ([`CredentialRefused`]).
pub async fn mcp_gate<F, Fut>(state: &AppState, request: Request, run: F) -> Response
where
    F: FnOnce(Request, RateLimitSlot) -> Fut,
    Fut: Future<Output = Response>,
{
    let failures = state.guard.failures();
    let (attempts, window_secs) = (failures.attempts(), failures.window().as_secs());
    let refuse =
        move |wait| McpError::LockedOut { retry_after_ms: millis_up(wait), attempts, window_secs }.into_http(None);
    gate(state, request, run, Guesses::Marked, false, refuse).await
}

/// Around `/admin/v1` on the public listener: failed authentications per client, and the `RateLimit*`
/// fields.
pub async fn admin_gate(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let refuse = locked_out_problem(&state);
    gate(&state, request, |request, slot| admin_run(next, request, slot), Guesses::ByFields, false, refuse).await
}

/// [`admin_gate`] on the operator listener, where the operator token is never locked out: an address there
/// is the operators' own network, and a lockout would stop the operator (and the CLI) along with whatever
/// failed. A wrong token is still counted and locked out.
pub async fn operator_admin_gate(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let is_operator = state.operator.is_presented_in(request.headers());
    let refuse = locked_out_problem(&state);
    gate(&state, request, |request, slot| admin_run(next, request, slot), Guesses::ByFields, is_operator, refuse).await
}

/// The admin API's handlers find the slot among the request's extensions.
fn admin_run(next: Next, mut request: Request, slot: RateLimitSlot) -> impl Future<Output = Response> {
    request.extensions_mut().insert(slot);
    next.run(request)
}

/// Marks a 401 of the MCP endpoint that refused a credential the request presented: a guess, counted against
/// its client. (The endpoint reads the credential once, as it admits the request; a refusal is rare.)
#[derive(Clone, Copy, Debug)]
pub struct CredentialRefused;

/// Whether `headers` present a credential: `Authorization` or the key header, whatever their value.
pub fn presents_credential(headers: &axum::http::HeaderMap) -> bool {
    headers.contains_key(axum::http::header::AUTHORIZATION) || headers.contains_key(&crate::http::auth::KEY_HEADER)
}

/// How the `gate` tells a 401 that refused a presented credential from one that only says a credential is
/// needed.
#[derive(Clone, Copy)]
enum Guesses {
    /// The request's fields present one ([`presents_credential`]).
    ByFields,
    /// The answer is marked [`CredentialRefused`].
    Marked,
}

/// The admin API's answer to a locked-out client.
fn locked_out_problem(state: &AppState) -> impl FnOnce(Duration) -> Response + use<> {
    let failures = state.guard.failures();
    let (attempts, window_secs) = (failures.attempts(), failures.window().as_secs());
    move |wait| {
        let detail = format!(
            "locked out: {attempts} failed authentications from this address within {window_secs} s; requests from \
             it are refused for {} s more (rate_limits.failed_auth_attempts)",
            wait.as_nanos().div_ceil(1_000_000_000).max(1)
        );
        ApiError::LockedOut { retry_after: wait, detail }.into_response()
    }
}

/// Refuses a client that used up its failed authentications (`refuse` builds the endpoint's 429) unless
/// `is_exempt`; else runs the request, counts a 401 against its client when it presented a credential, and
/// puts the fields the handler left on the answer. A request without any credential is not a guess: its 401
/// only says one is needed (a client probing for the scheme, a health checker), so it is not counted.
async fn gate<F, Fut>(
    state: &AppState,
    request: Request,
    run: F,
    guesses: Guesses,
    is_exempt: bool,
    refuse: impl FnOnce(Duration) -> Response,
) -> Response
where
    F: FnOnce(Request, RateLimitSlot) -> Fut,
    Fut: Future<Output = Response>,
{
    let guard = &state.guard;
    let client = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| guard.client_ip(peer.ip(), request.headers()));
    if !is_exempt && let Some(wait) = client.and_then(|client| guard.failures().blocked(client)) {
        state.metrics.rate_limited.get_or_create(&ScopeLabels { scope: AUTH_FAILURES }).inc();
        let mut response = refuse(wait);
        if let Some(headers) = guard.failures_headers(wait) {
            headers.apply(response.headers_mut());
        }
        return response;
    }
    let presented = match guesses {
        Guesses::ByFields => Some(presents_credential(request.headers())),
        Guesses::Marked => None,
    };
    let slot = RateLimitSlot::default();
    let mut response = run(request, slot.clone()).await;
    if response.status() == StatusCode::UNAUTHORIZED
        && presented.unwrap_or_else(|| response.extensions().get::<CredentialRefused>().is_some())
        && let Some(client) = client
        && let Some(count) = guard.failures().record(client)
    {
        state.metrics.auth_lockouts.inc();
        tracing::warn!(
            %client,
            failures = count,
            window_secs = guard.failures().window().as_secs(),
            "client address locked out after failed authentications (rate_limits.failed_auth_attempts)"
        );
    }
    if let Some(headers) = slot.take() {
        headers.apply(response.headers_mut());
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> RateLimitsConfig {
        RateLimitsConfig {
            key_requests_per_second: 1,
            key_burst: 2,
            agent_requests_per_second: 1,
            agent_burst: 3,
            ..RateLimitsConfig::default()
        }
    }

    fn buckets_verdict(guard: &Guard, key: &str, agent: &str) -> Verdict {
        let (key_bucket, agent_bucket) = (guard.keys.handle(key), guard.agents.handle(agent));
        let checks = [
            Check { policy: KEY, name: key, bucket: guard.key_limit.map(|limit| (limit, Source::Local(&key_bucket))) },
            Check {
                policy: AGENT,
                name: agent,
                bucket: guard.agent_default.map(|limit| (limit, Source::Local(&agent_bucket))),
            },
        ];
        futures::executor::block_on(Verdict::of(&checks)).expect("no shared bucket, no store error")
    }

    #[test]
    fn the_key_is_asked_first_and_the_tightest_limit_is_reported() {
        let guard = Guard::new(&config());
        let first = buckets_verdict(&guard, "k1", "a");
        assert_eq!(first.retry_after, None);
        let headers = first.headers.expect("fields");
        assert_eq!(headers.policy, r#""key";q=2;w=2, "agent";q=3;w=3"#);
        assert_eq!(headers.current, r#""key";r=1;t=1"#, "key 1 left < agent 2 left");
        buckets_verdict(&guard, "k1", "a");
        let refused = buckets_verdict(&guard, "k1", "a");
        assert!(refused.retry_after.is_some(), "the key's burst is used up");
        assert!(refused.headers.expect("fields").current.to_str().unwrap_or("").starts_with(r#""key";r=0;"#));
        // The key's refusal took no token from the agent: another key gets the agent's last one.
        let other = buckets_verdict(&guard, "k2", "a");
        assert_eq!(other.retry_after, None);
        assert!(other.headers.expect("fields").current.to_str().unwrap_or("").starts_with(r#""agent";r=0;"#));
        let shared = buckets_verdict(&guard, "k3", "a");
        assert!(shared.headers.expect("fields").current.to_str().unwrap_or("").starts_with(r#""agent";r=0;"#));
        assert!(shared.retry_after.is_some(), "the agent's bucket is shared by its keys");
    }

    #[test]
    fn unlimited_everywhere_means_no_fields() {
        let guard = Guard::new(&RateLimitsConfig {
            key_requests_per_second: 0,
            agent_requests_per_second: 0,
            ..RateLimitsConfig::default()
        });
        assert_eq!(buckets_verdict(&guard, "k", "a"), Verdict { retry_after: None, headers: None, refused_by: None });
    }

    #[test]
    fn retry_after_ms_rounds_up() {
        assert_eq!(millis_up(Duration::from_micros(1500)), 2);
        assert_eq!(millis_up(Duration::ZERO), 1);
    }
}
