//! A JSON-RPC batch costs a rate-limit token per message, from the key's bucket and the agent's (in memory
//! or shared in the database): served in order while tokens last, the rest refused with -31429.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Api, Backend, TestApp, expect_json, spawn_app_with};
use crate::mcp_client::Answer;

both!(each_batch_message_takes_a_token);

/// A batch of `pings` pings with ids 1, 2, ..., answered as it comes.
async fn pings(app: &TestApp, agent: &str, key: &str, pings: usize) -> Answer {
    let batch: Vec<Value> = (1..=pings).map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "ping"})).collect();
    send(app, agent, key, &Value::Array(batch)).await
}

async fn send(app: &TestApp, agent: &str, key: &str, body: &Value) -> Answer {
    let request = app.with_key(Method::POST, &format!("/{agent}/mcp"), key).json(body);
    Answer::of(request.send().await.unwrap()).await
}

/// The ids of the answers that are results, and of those refused with -31429 (each with a `retryAfterMs`
/// within one token's interval, 1 s).
fn served_and_refused(answer: &Answer) -> (Vec<i64>, Vec<i64>) {
    assert_eq!(answer.status, StatusCode::OK, "a batch is answered 200: {}", answer.body);
    let (mut served, mut refused) = (Vec::new(), Vec::new());
    for item in answer.body.as_array().unwrap_or_else(|| panic!("an array of answers: {}", answer.body)) {
        let id = item["id"].as_i64().unwrap_or_else(|| panic!("an id: {item}"));
        if item.get("result").is_some() {
            served.push(id);
            continue;
        }
        assert_eq!(item["error"]["code"], -31429, "{item}");
        let wait = item["error"]["data"]["retryAfterMs"].as_u64().unwrap_or_else(|| panic!("retryAfterMs: {item}"));
        assert!((1..=1000).contains(&wait), "one token a second: {item}");
        refused.push(id);
    }
    (served, refused)
}

/// `hivegate_rate_limited_total{scope="<scope>"}` (0 while the series does not exist).
async fn rate_limited(app: &TestApp, scope: &str) -> f64 {
    let text = app.anon(Method::GET, "/metrics").send().await.unwrap().text().await.unwrap();
    let series = format!("hivegate_rate_limited_total{{scope=\"{scope}\"}} ");
    text.lines().find_map(|line| line.strip_prefix(&series)?.parse().ok()).unwrap_or(0.0)
}

/// Issues an `mcp` key of `agent` with its own `rateLimit`.
async fn key_limited(app: &TestApp, agent: &str, rate_limit: Value) -> String {
    let created = app.issue_key_with(agent, &json!({"scopes": ["mcp"], "rateLimit": rate_limit})).await;
    created["key"].as_str().expect("the key").to_owned()
}

async fn agent_limited(app: &TestApp, agent: &str, rate_limit: Value) {
    let body = json!({"id": agent, "name": agent, "rateLimit": rate_limit});
    expect_json(app.op(Method::POST, "/admin/v1/agents").json(&body).send().await.unwrap(), StatusCode::CREATED).await;
}

async fn each_batch_message_takes_a_token(backend: Backend) {
    // The agents' and keys' own limits are what is counted (one token a second, so that none comes back
    // while a batch is served); the configured per-key limit is far above what is sent, the per-agent one off.
    let app = spawn_app_with(backend, |config| {
        config.rate_limits.agent_requests_per_second = 0;
    })
    .await;

    // A key's bucket of 3 (in this replica's memory): the request's token is the first message's, the
    // notification takes the second, the second ping the third; the rest are refused, in order.
    app.create_agent("bot").await;
    let key = key_limited(&app, "bot", json!({"requestsPerSecond": 1, "burst": 3})).await;
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        {"jsonrpc": "2.0", "id": 3, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 4, "method": "ping"}
    ]);
    let answer = send(&app, "bot", &key, &batch).await;
    assert_eq!(served_and_refused(&answer), (vec![1, 2], vec![3, 4]), "{}", answer.body);
    let current = answer.headers.get("ratelimit").and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert!(current.starts_with(r#""key";r=0;"#), "the answer shows the bucket after the batch: {current}");
    // Every refused message is counted (the notification too), and the bucket is empty for the next request.
    assert_eq!(rate_limited(&app, "key").await, 3.0);
    let next = send(&app, "bot", &key, &json!({"jsonrpc": "2.0", "id": 9, "method": "ping"})).await;
    next.error(StatusCode::TOO_MANY_REQUESTS, -31429);

    // An agent's bucket of 10 (in memory), taken by every message of every key of the agent.
    agent_limited(&app, "busy", json!({"requestsPerSecond": 1, "burst": 10})).await;
    let first = app.issue_key("busy", &["mcp"]).await.key;
    let second = app.issue_key("busy", &["mcp"]).await.key;
    assert_eq!(served_and_refused(&pings(&app, "busy", &first, 6).await), ((1..=6).collect(), vec![]));
    assert_eq!(served_and_refused(&pings(&app, "busy", &second, 6).await), ((1..=4).collect(), vec![5, 6]));
    assert_eq!(rate_limited(&app, "agent").await, 2.0);
    pings(&app, "busy", &first, 1).await.error(StatusCode::TOO_MANY_REQUESTS, -31429);

    // A shared bucket (counted in the database by every replica): the same accounting, one upsert a message.
    agent_limited(&app, "shared", json!({"requestsPerSecond": 1, "burst": 5, "shared": true})).await;
    let key = app.issue_key("shared", &["mcp"]).await.key;
    let answer = pings(&app, "shared", &key, 8).await;
    assert_eq!(served_and_refused(&answer), ((1..=5).collect(), vec![6, 7, 8]));
    assert_eq!(answer.headers.get("hivegate-ratelimit-scope").and_then(|v| v.to_str().ok()), Some("shared"));
    pings(&app, "shared", &key, 1).await.error(StatusCode::TOO_MANY_REQUESTS, -31429);

    // A batch of one costs what a request costs: a fresh bucket of 1 serves it.
    agent_limited(&app, "single", json!({"requestsPerSecond": 1, "burst": 1})).await;
    let key = app.issue_key("single", &["mcp"]).await.key;
    assert_eq!(served_and_refused(&pings(&app, "single", &key, 1).await), (vec![1], vec![]));
}
