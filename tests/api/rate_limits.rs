//! Rate limits: per key (configured, or the key's own through the admin API), per agent (shared by its keys,
//! following PATCH, its tokens kept when its row is loaded again), shared by every replica when asked
//! (counted in the database), per admin credential, failed authentications per client address (with
//! `X-Forwarded-For` from trusted proxies only), and the `RateLimit-Policy` / `RateLimit` fields on the
//! answers.

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{
    Api, Backend, HivegateProcess, OPERATOR_TOKEN, TestApp, TestDatabase, expect_json, expect_problem, spawn_app_with,
};
use crate::mcp_client::{Answer, Mcp, after_write, agent_with_key};

both!(
    key_limit_refuses_then_recovers,
    agent_limit_is_shared_and_follows_patch,
    an_agents_tokens_outlive_its_cached_row,
    admin_limit_per_credential,
    failed_authentications_block_the_client,
    forwarded_for_only_from_trusted_proxies,
    a_keys_own_limit_is_set_and_patched_through_the_admin_api,
    a_shared_limit_is_counted_in_the_database,
    costly_methods_have_limits_of_their_own,
);

/// The application with `configure` applied to its rate limits (the suite's others are generous).
async fn spawn_limited(backend: Backend, configure: impl FnOnce(&mut hivegate::config::RateLimitsConfig)) -> TestApp {
    spawn_app_with(backend, |config| configure(&mut config.rate_limits)).await
}

fn field(headers: &HeaderMap, name: &str) -> String {
    headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_else(|| panic!("no {name} field: {headers:?}")).to_owned()
}

/// The `r` of a `RateLimit` field naming `policy`.
fn remaining(headers: &HeaderMap, policy: &str) -> u64 {
    let value = field(headers, "ratelimit");
    let rest = value
        .strip_prefix(&format!("\"{policy}\";r="))
        .unwrap_or_else(|| panic!("RateLimit is not about {policy:?}: {value}"));
    let (r, t) = rest.split_once(";t=").unwrap_or_else(|| panic!("RateLimit without t: {value}"));
    assert!(t.parse::<u64>().is_ok(), "t is whole seconds: {value}");
    r.parse().unwrap_or_else(|_| panic!("r is an integer: {value}"))
}

/// Sends `request` until it is refused (at most `limit` times); returns the refusal and how many got through.
async fn exhaust<F, Fut>(limit: usize, mut request: F) -> (Answer, usize)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Answer>,
{
    for allowed in 0..limit {
        let answer = request().await;
        if answer.status == StatusCode::TOO_MANY_REQUESTS {
            return (answer, allowed);
        }
        assert!(answer.status.is_success(), "{}: {}", answer.status, answer.body);
    }
    panic!("{limit} requests and no 429");
}

/// A 429 of the MCP endpoint: `Retry-After` in whole seconds, -31429 with `data.retryAfterMs`, `id` null.
fn assert_refused(answer: &Answer) -> u64 {
    let retry_after_ms = refusal(answer, serde_json::Value::Null);
    assert!((1..=1000).contains(&retry_after_ms), "one token a second: {retry_after_ms} ms");
    retry_after_ms
}

/// A 429 of the MCP endpoint for the request `id`: `Retry-After` in whole seconds rounding up -31429's
/// `data.retryAfterMs`, which it returns.
fn refusal(answer: &Answer, id: serde_json::Value) -> u64 {
    let error = answer.error(StatusCode::TOO_MANY_REQUESTS, -31429);
    let retry_after_ms = error["data"]["retryAfterMs"].as_u64().unwrap_or_else(|| panic!("retryAfterMs: {error}"));
    let seconds: u64 = field(&answer.headers, "retry-after").parse().expect("Retry-After in seconds");
    assert_eq!(seconds, retry_after_ms.div_ceil(1000), "Retry-After rounds retryAfterMs up");
    assert_eq!(answer.body["id"], id);
    retry_after_ms
}

async fn key_limit_refuses_then_recovers(backend: Backend) {
    let app = spawn_limited(backend, |limits| {
        limits.key_requests_per_second = 1;
        limits.key_burst = 3;
        limits.agent_requests_per_second = 0;
    })
    .await;
    let key = agent_with_key(&app, "bot").await;
    let other_key = app.issue_key("bot", &["mcp"]).await.key;
    let mcp = Mcp::new(&app, "bot", &key);

    // Every allowed answer carries the policy (the agent is unlimited: only the key's) and what is left.
    let first = mcp.legacy("ping", json!({})).await;
    first.result();
    assert_eq!(field(&first.headers, "ratelimit-policy"), r#""key";q=3;w=3"#);
    assert_eq!(remaining(&first.headers, "key"), 2, "a fresh bucket of 3, one taken");
    assert_eq!(field(&first.headers, "hivegate-ratelimit-scope"), "replica");
    let second = mcp.legacy("ping", json!({})).await;
    assert!(remaining(&second.headers, "key") < 2, "remaining decreases: {:?}", second.headers);

    let (refused, _) = exhaust(20, || mcp.legacy("ping", json!({}))).await;
    let retry_after_ms = assert_refused(&refused);
    assert_eq!(remaining(&refused.headers, "key"), 0);
    assert_eq!(field(&refused.headers, "ratelimit-policy"), r#""key";q=3;w=3"#);
    // GET and DELETE share the gate, and count: still refused.
    let response = app.with_key(Method::DELETE, "/bot/mcp", &key).send().await.unwrap();
    assert_refused(&Answer::of(response).await);
    // The limit is the key's: another key of the agent is not affected.
    Mcp::new(&app, "bot", &other_key).legacy("ping", json!({})).await.result();

    // After the refill time the key gets through again.
    tokio::time::sleep(Duration::from_millis(retry_after_ms + 50)).await;
    let recovered = mcp.legacy("ping", json!({})).await;
    recovered.result();
    assert_eq!(remaining(&recovered.headers, "key"), 0, "the one token that came back");
}

async fn agent_limit_is_shared_and_follows_patch(backend: Backend) {
    let app = spawn_limited(backend, |limits| {
        limits.key_requests_per_second = 1000;
        limits.key_burst = 1000;
        limits.agent_requests_per_second = 1;
        limits.agent_burst = 2;
    })
    .await;
    let response = app
        .op(Method::POST, "/admin/v1/agents")
        .json(&json!({"id": "bot", "name": "Bot", "rateLimit": {"requestsPerSecond": 1, "burst": 4}}))
        .send()
        .await
        .unwrap();
    expect_json(response, StatusCode::CREATED).await;
    let keys = [app.issue_key("bot", &["mcp"]).await.key, app.issue_key("bot", &["mcp"]).await.key];

    // Both keys draw on the agent's one bucket; the agent's is the tightest limit.
    let first = Mcp::new(&app, "bot", &keys[0]).legacy("ping", json!({})).await;
    first.result();
    assert_eq!(field(&first.headers, "ratelimit-policy"), r#""key";q=1000;w=1, "agent";q=4;w=4"#);
    assert_eq!(remaining(&first.headers, "agent"), 3);
    let mut turn = 1;
    let (refused, allowed) = exhaust(20, || {
        turn += 1;
        let key = keys[turn % 2].clone();
        let app = &app;
        async move { Mcp::new(app, "bot", &key).legacy("ping", json!({})).await }
    })
    .await;
    assert!(allowed >= 3, "the agent's burst of 4 is shared: {allowed} more got through");
    assert_refused(&refused);
    assert_eq!(remaining(&refused.headers, "agent"), 0);

    // A new rateLimit applies from the next request: a fresh bucket of the new size.
    let response = app
        .op(Method::PATCH, "/admin/v1/agents/bot")
        .header("content-type", "application/merge-patch+json")
        .body(json!({"rateLimit": {"requestsPerSecond": 1, "burst": 10}}).to_string())
        .send()
        .await
        .unwrap();
    expect_json(response, StatusCode::OK).await;
    after_write(backend, "the new rateLimit", || async {
        let answer = Mcp::new(&app, "bot", &keys[0]).legacy("ping", json!({})).await;
        let policy = answer.headers.get("ratelimit-policy").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        (answer.status == StatusCode::OK && policy.ends_with(r#""agent";q=10;w=10"#)).then_some(())
    })
    .await;

    // An agent without a rateLimit gets the configured default.
    let key = agent_with_key(&app, "plain").await;
    let answer = Mcp::new(&app, "plain", &key).legacy("ping", json!({})).await;
    answer.result();
    assert_eq!(field(&answer.headers, "ratelimit-policy"), r#""key";q=1000;w=1, "agent";q=2;w=2"#);
}

/// A cached agent keeps its bucket at hand; when its row is loaded again (a change that is not its
/// `rateLimit`), the bucket is the same one, with the tokens it had, not a fresh one.
async fn an_agents_tokens_outlive_its_cached_row(backend: Backend) {
    let app = spawn_limited(backend, |limits| {
        limits.key_requests_per_second = 1000;
        limits.key_burst = 1000;
        limits.agent_requests_per_second = 1;
        limits.agent_burst = 100;
    })
    .await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    let mut left = 100;
    for _ in 0..30 {
        let answer = mcp.legacy("ping", json!({})).await;
        answer.result();
        left = remaining(&answer.headers, "agent");
    }
    assert!(left <= 75, "30 tokens taken from a burst of 100 at one a second: {left} left");

    let response = app
        .op(Method::PATCH, "/admin/v1/agents/bot")
        .header("content-type", "application/merge-patch+json")
        .body(json!({"description": "reloaded"}).to_string())
        .send()
        .await
        .unwrap();
    expect_json(response, StatusCode::OK).await;
    // The agent's row is loaded again once a request sees the new description.
    after_write(backend, "the agent's new description", || async {
        let answer = mcp.modern("server/discover", json!({})).await;
        (answer.status == StatusCode::OK && answer.result()["instructions"] == "reloaded").then_some(())
    })
    .await;
    let answer = mcp.legacy("ping", json!({})).await;
    answer.result();
    let now = remaining(&answer.headers, "agent");
    assert!(now < 90, "the reloaded agent took from its old bucket ({left} left before), not a fresh one: {now}");
}

async fn admin_limit_per_credential(backend: Backend) {
    let app = spawn_limited(backend, |limits| {
        limits.admin_requests_per_second = 1;
        limits.admin_burst = 4;
    })
    .await;
    app.create_agent("bot").await;
    let registry_key = app.issue_key("bot", &["registry"]).await.key;

    let (refused, _) =
        exhaust(20, || async { Answer::of(app.op(Method::GET, "/admin/v1/agents").send().await.unwrap()).await }).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.content_type(), "application/problem+json");
    assert_eq!(refused.body["status"], 429, "{}", refused.body);
    let seconds: u64 = field(&refused.headers, "retry-after").parse().expect("Retry-After in seconds");
    assert_eq!(seconds, 1, "one token a second");
    assert_eq!(field(&refused.headers, "ratelimit-policy"), r#""admin";q=4;w=4"#);
    assert_eq!(remaining(&refused.headers, "admin"), 0);

    // A registry key has a bucket of its own.
    let response = app.with_key(Method::GET, "/admin/v1/agents/bot/resources", &registry_key).send().await.unwrap();
    let headers = response.headers().clone();
    expect_json(response, StatusCode::OK).await;
    assert_eq!(remaining(&headers, "admin"), 3);
    assert_eq!(field(&headers, "hivegate-ratelimit-scope"), "replica");
    // Wrong credentials are refused before the limit: 401, and no token is taken.
    let response =
        app.anon(Method::GET, "/admin/v1/agents").bearer_auth("not-the-operator-token").send().await.unwrap();
    expect_problem(response, StatusCode::UNAUTHORIZED).await;
}

async fn failed_authentications_block_the_client(backend: Backend) {
    let app = spawn_limited(backend, |limits| {
        limits.failed_auth_attempts = 3;
        limits.failed_auth_window_secs = 600;
    })
    .await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    let wrong = Mcp::new(&app, "bot", &format!("bak_{}", "x".repeat(43)));

    // Below the attempts, failures change nothing for the right key.
    wrong.legacy("ping", json!({})).await.error(StatusCode::UNAUTHORIZED, -31401);
    let response =
        app.anon(Method::GET, "/admin/v1/agents").bearer_auth("not-the-operator-token").send().await.unwrap();
    expect_problem(response, StatusCode::UNAUTHORIZED).await;
    mcp.legacy("ping", json!({})).await.result();
    wrong.legacy("ping", json!({})).await.error(StatusCode::UNAUTHORIZED, -31401);

    // The third failure used them up: this address is refused before any key is looked up, on MCP …
    let answer = mcp.legacy("ping", json!({})).await;
    let error = answer.error(StatusCode::TOO_MANY_REQUESTS, -31429);
    let retry_after_ms = error["data"]["retryAfterMs"].as_u64().expect("retryAfterMs");
    assert!(retry_after_ms > 590_000 && retry_after_ms <= 600_000, "until the window ends: {retry_after_ms}");
    assert_eq!(field(&answer.headers, "retry-after"), retry_after_ms.div_ceil(1000).to_string());
    assert_eq!(field(&answer.headers, "ratelimit-policy"), r#""auth-failures";q=3;w=600"#);
    assert_eq!(remaining(&answer.headers, "auth-failures"), 0);
    // … and on the admin API, even with the operator token;
    let response = app.op(Method::GET, "/admin/v1/agents").send().await.unwrap();
    assert!(response.headers().contains_key("retry-after"));
    expect_problem(response, StatusCode::TOO_MANY_REQUESTS).await;
    // and X-Forwarded-For is not believed from a peer that is not a trusted proxy.
    let response = app.op(Method::GET, "/admin/v1/agents").header("x-forwarded-for", "198.51.100.1").send().await;
    expect_problem(response.unwrap(), StatusCode::TOO_MANY_REQUESTS).await;
}

async fn forwarded_for_only_from_trusted_proxies(backend: Backend) {
    let app = spawn_limited(backend, |limits| {
        limits.failed_auth_attempts = 2;
        limits.failed_auth_window_secs = 3;
        limits.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()];
    })
    .await;
    let key = agent_with_key(&app, "bot").await;
    let from = |client: &str, key: &str| {
        app.with_key(Method::POST, "/bot/mcp", key)
            .header("x-forwarded-for", client)
            .header("content-type", "application/json")
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
    };
    let wrong = format!("bak_{}", "x".repeat(43));
    for _ in 0..2 {
        let answer = Answer::of(from("198.51.100.1", &wrong).send().await.unwrap()).await;
        answer.error(StatusCode::UNAUTHORIZED, -31401);
    }
    // Behind the trusted proxy (this test's loopback peer), the forwarded address is the client.
    Answer::of(from("198.51.100.1", &key).send().await.unwrap()).await.error(StatusCode::TOO_MANY_REQUESTS, -31429);
    // A client cannot hide behind an address it writes itself: the rightmost untrusted entry counts.
    let spoofed = Answer::of(from("203.0.113.5, 198.51.100.1", &key).send().await.unwrap()).await;
    spoofed.error(StatusCode::TOO_MANY_REQUESTS, -31429);
    let response = app.op(Method::GET, "/admin/v1/agents").header("x-forwarded-for", "198.51.100.1").send().await;
    expect_problem(response.unwrap(), StatusCode::TOO_MANY_REQUESTS).await;
    // Other clients behind the proxy, and the proxy itself, are not affected.
    Answer::of(from("198.51.100.2", &key).send().await.unwrap()).await.result();
    Mcp::new(&app, "bot", &key).legacy("ping", json!({})).await.result();

    // When the window has ended, the client may try again.
    tokio::time::sleep(Duration::from_millis(3100)).await;
    Answer::of(from("198.51.100.1", &key).send().await.unwrap()).await.result();
}

/// A `ping` of `agent` with `key` on any replica.
async fn ping(api: &impl Api, agent: &str, key: &str) -> Answer {
    let request = api
        .with_key(Method::POST, &format!("/{agent}/mcp"), key)
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    Answer::of(request.send().await.unwrap()).await
}

async fn a_keys_own_limit_is_set_and_patched_through_the_admin_api(backend: Backend) {
    let app = spawn_limited(backend, |limits| {
        limits.key_requests_per_second = 1000;
        limits.key_burst = 1000;
        limits.agent_requests_per_second = 0;
    })
    .await;
    app.create_agent("bot").await;
    let response = app
        .op(Method::POST, "/admin/v1/agents/bot/keys")
        .json(&json!({"name": "tight", "rateLimit": {"requestsPerSecond": 1, "burst": 2}}))
        .send()
        .await
        .unwrap();
    let created = expect_json(response, StatusCode::CREATED).await;
    assert_eq!(created["rateLimit"], json!({"requestsPerSecond": 1, "burst": 2}));
    let (key, key_id) = (created["key"].as_str().unwrap().to_owned(), created["id"].as_str().unwrap().to_owned());
    let loose = app.issue_key("bot", &["mcp"]).await.key;

    // The key's own limit replaces the configured one for that key only.
    let first = ping(&app, "bot", &key).await;
    first.result();
    assert_eq!(field(&first.headers, "ratelimit-policy"), r#""key";q=2;w=2"#);
    let (refused, allowed) = exhaust(10, || ping(&app, "bot", &key)).await;
    assert_eq!(allowed, 1, "a burst of 2, one taken before");
    assert_refused(&refused);
    let other = ping(&app, "bot", &loose).await;
    assert_eq!(field(&other.headers, "ratelimit-policy"), r#""key";q=1000;w=1"#);

    // PATCH merges into it and applies from the next request; the list shows it, never the key.
    let path = format!("/admin/v1/agents/bot/keys/{key_id}");
    let response = app.op(Method::PATCH, &path).json(&json!({"rateLimit": {"burst": 50}})).send().await.unwrap();
    let patched = expect_json(response, StatusCode::OK).await;
    assert_eq!(patched["rateLimit"], json!({"requestsPerSecond": 1, "burst": 50}));
    assert_eq!(patched["name"], "tight");
    assert!(patched.get("key").is_none(), "{patched}");
    after_write(backend, "the key's new limit", || async {
        let answer = ping(&app, "bot", &key).await;
        (answer.status == StatusCode::OK && field(&answer.headers, "ratelimit-policy") == r#""key";q=50;w=50"#)
            .then_some(())
    })
    .await;
    let listed = expect_json(app.op(Method::GET, "/admin/v1/agents/bot/keys").send().await.unwrap(), StatusCode::OK);
    let listed = listed.await;
    let item = listed["items"].as_array().unwrap().iter().find(|k| k["id"] == key_id.as_str()).cloned();
    assert_eq!(item.expect("the key is listed")["rateLimit"]["burst"], 50);

    // Bad values change nothing: 422 for a zero rate or a partial limit on a key without one, 404 elsewhere.
    let bad = app.op(Method::PATCH, &path).json(&json!({"rateLimit": {"requestsPerSecond": 0}})).send().await;
    expect_problem(bad.unwrap(), StatusCode::UNPROCESSABLE_ENTITY).await;
    let loose_id = expect_json(app.op(Method::GET, "/admin/v1/agents/bot/keys").send().await.unwrap(), StatusCode::OK)
        .await["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] != key_id.as_str())
        .map(|k| k["id"].as_str().unwrap().to_owned())
        .expect("the other key");
    let partial = app
        .op(Method::PATCH, &format!("/admin/v1/agents/bot/keys/{loose_id}"))
        .json(&json!({"rateLimit": {"burst": 3}}))
        .send()
        .await;
    expect_problem(partial.unwrap(), StatusCode::UNPROCESSABLE_ENTITY).await;
    let unknown = app.op(Method::PATCH, &path).json(&json!({"scopes": ["registry"]})).send().await;
    expect_problem(unknown.unwrap(), StatusCode::UNPROCESSABLE_ENTITY).await;
    let missing = app.op(Method::PATCH, "/admin/v1/agents/bot/keys/nope").json(&json!({})).send().await;
    expect_problem(missing.unwrap(), StatusCode::NOT_FOUND).await;
    let unchanged = ping(&app, "bot", &key).await;
    assert_eq!(field(&unchanged.headers, "ratelimit-policy"), r#""key";q=50;w=50"#);
    // `null` goes back to the configured limit.
    let response = app.op(Method::PATCH, &path).json(&json!({"rateLimit": null})).send().await.unwrap();
    assert!(expect_json(response, StatusCode::OK).await.get("rateLimit").is_none());
    after_write(backend, "the configured limit again", || async {
        let answer = ping(&app, "bot", &key).await;
        (field(&answer.headers, "ratelimit-policy") == r#""key";q=1000;w=1"#).then_some(())
    })
    .await;
}

async fn a_shared_limit_is_counted_in_the_database(backend: Backend) {
    let app = spawn_limited(backend, |limits| {
        limits.key_requests_per_second = 1000;
        limits.key_burst = 1000;
    })
    .await;
    let response = app
        .op(Method::POST, "/admin/v1/agents")
        .json(&json!({"id": "bot", "name": "Bot", "rateLimit": {"requestsPerSecond": 1, "burst": 4, "shared": true}}))
        .send()
        .await
        .unwrap();
    let agent = expect_json(response, StatusCode::CREATED).await;
    assert_eq!(agent["rateLimit"], json!({"requestsPerSecond": 1, "burst": 4, "shared": true}));
    let key = app.issue_key("bot", &["mcp"]).await.key;

    let first = ping(&app, "bot", &key).await;
    first.result();
    assert_eq!(field(&first.headers, "ratelimit-policy"), r#""key";q=1000;w=1, "agent";q=4;w=4"#);
    assert_eq!(remaining(&first.headers, "agent"), 3);
    assert_eq!(field(&first.headers, "hivegate-ratelimit-scope"), "shared", "the tightest limit is the shared one");
    assert_eq!(app.db.count("select count(*) from rate_bucket where bucket = 'agent:bot'").await, 1);
    let (refused, _) = exhaust(20, || ping(&app, "bot", &key)).await;
    let retry_after_ms = assert_refused(&refused);
    assert_eq!(field(&refused.headers, "hivegate-ratelimit-scope"), "shared");
    tokio::time::sleep(Duration::from_millis(retry_after_ms + 50)).await;
    ping(&app, "bot", &key).await.result();

    // Back to a per-replica limit: the answers say so.
    let response = app
        .op(Method::PATCH, "/admin/v1/agents/bot")
        .json(&json!({"rateLimit": {"shared": false, "burst": 100}}))
        .send()
        .await
        .unwrap();
    let patched = expect_json(response, StatusCode::OK).await;
    assert_eq!(patched["rateLimit"], json!({"requestsPerSecond": 1, "burst": 100}));
    after_write(backend, "the per-replica limit", || async {
        let answer = ping(&app, "bot", &key).await;
        (answer.status == StatusCode::OK && field(&answer.headers, "hivegate-ratelimit-scope") == "replica")
            .then_some(())
    })
    .await;
}

/// The exact limit across replicas: two hivegate processes on one PostgreSQL database take from one bucket,
/// so together they let through the burst once, where per-replica buckets would let it through twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_limit_holds_across_two_processes() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let (a, b) = tokio::join!(
        HivegateProcess::start(db.url(), Some(OPERATOR_TOKEN)),
        HivegateProcess::start(db.url(), Some(OPERATOR_TOKEN))
    );
    let response = a
        .op(Method::POST, "/admin/v1/agents")
        .json(&json!({"id": "bot", "name": "Bot", "rateLimit": {"requestsPerSecond": 1, "burst": 10, "shared": true}}))
        .send()
        .await
        .unwrap();
    expect_json(response, StatusCode::CREATED).await;
    let key = a.issue_key("bot", &["mcp"]).await.key;

    let started = std::time::Instant::now();
    let mut allowed = [0usize; 2];
    let mut refused = [0usize; 2];
    for turn in 0..30 {
        let answer = if turn % 2 == 0 { ping(&a, "bot", &key).await } else { ping(&b, "bot", &key).await };
        match answer.status {
            StatusCode::OK => allowed[turn % 2] += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                assert_refused(&answer);
                refused[turn % 2] += 1;
            }
            status => panic!("{status}: {}", answer.body),
        }
    }
    let came_back = usize::try_from(started.elapsed().as_secs()).unwrap_or(usize::MAX);
    let total = allowed[0] + allowed[1];
    assert!(total >= 10, "the burst gets through: {allowed:?}");
    assert!(total <= 10 + came_back, "one bucket for both replicas: {allowed:?} in {came_back} s");
    assert!(allowed[0] > 0 && allowed[1] > 0 && refused[0] > 0 && refused[1] > 0, "{allowed:?} {refused:?}");
}

/// A costly method's 429: as [`assert_refused`], but the body was parsed, so the error carries the request's id.
fn assert_method_refused(answer: &Answer) -> u64 {
    refusal(answer, json!(1))
}

async fn costly_methods_have_limits_of_their_own(backend: Backend) {
    let app = spawn_limited(backend, |limits| {
        limits.prompts_get_per_second = 1;
        limits.prompts_get_burst = 2;
        limits.completion_per_second = 1;
        limits.completion_burst = 1;
        limits.read_bytes_per_second = 1000;
        limits.read_bytes_burst = 1000;
    })
    .await;
    let key = agent_with_key(&app, "bot").await;
    let other = app.issue_key("bot", &["mcp"]).await.key;
    app.put_text("bot", "test://big", &"x".repeat(3000)).await;
    app.put_text("bot", "test://small", "x").await;
    let response = app
        .op(Method::PUT, "/admin/v1/agents/bot/prompts/greet")
        .json(&json!({"arguments": [{"name": "who", "completions": ["world", "wide"]}],
                      "messages": [{"role": "user", "content": {"type": "text", "text": "Hi {{ who }}"}}]}))
        .send()
        .await
        .unwrap();
    expect_json(response, StatusCode::CREATED).await;
    let mcp = Mcp::new(&app, "bot", &key);

    // prompts/get: a bucket of 2 per key, apart from the request limits; other methods are not affected.
    let get = || mcp.legacy("prompts/get", json!({"name": "greet", "arguments": {"who": "you"}}));
    let (refused, allowed) = exhaust(10, get).await;
    assert_eq!(allowed, 2);
    assert!(assert_method_refused(&refused) <= 1000, "one token a second");
    assert_eq!(field(&refused.headers, "ratelimit-policy"), r#""prompts-get";q=2;w=2"#);
    assert_eq!(remaining(&refused.headers, "prompts-get"), 0);
    mcp.legacy("prompts/list", json!({})).await.result();
    Mcp::new(&app, "bot", &other).legacy("prompts/get", json!({"name": "greet"})).await.result();

    // completion/complete: a bucket of 1.
    let complete = || {
        mcp.legacy(
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "who", "value": "w"}}),
        )
    };
    let (refused, allowed) = exhaust(10, complete).await;
    assert_eq!(allowed, 1);
    assert_method_refused(&refused);

    // resources/read: admitted while the key's 1000-byte budget is not overdrawn, charged with the answer;
    // the 3000-byte answer overdraws it by about 2000, which takes about two seconds to pay back.
    mcp.legacy("resources/read", json!({"uri": "test://big"})).await.result();
    let refused = mcp.legacy("resources/read", json!({"uri": "test://small"})).await;
    let retry_after_ms = assert_method_refused(&refused);
    assert!((1500..=2500).contains(&retry_after_ms), "about 2000 bytes of debt at 1000 a second: {retry_after_ms}");
    assert_eq!(field(&refused.headers, "ratelimit-policy"), r#""read-bytes";q=1000;w=1"#);
    Mcp::new(&app, "bot", &other).legacy("resources/read", json!({"uri": "test://small"})).await.result();
    tokio::time::sleep(Duration::from_millis(retry_after_ms + 50)).await;
    mcp.legacy("resources/read", json!({"uri": "test://small"})).await.result();
}
