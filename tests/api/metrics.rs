//! `GET /metrics`: the named series, with the values known traffic must produce.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{Api, Backend, TestApp, eventually, spawn_app, spawn_app_with};
use crate::live_client::{listen, resources_changed, summary};
use crate::mcp_client::{Mcp, agent_with_key};

both!(
    metrics_count_known_traffic,
    the_cache_stays_within_its_budget,
    a_keys_reads_are_fresh_and_cached_again_after_a_change,
    reads_at_once_after_a_change_are_fresh_and_each_counted_once
);

/// The value of the series `name{labels}` (labels exactly as exported, e.g. `method="GET"`), if present.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

async fn scrape(app: &TestApp) -> String {
    let response = app.anon(Method::GET, "/metrics").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("application/openmetrics-text"), "{content_type}");
    response.text().await.unwrap()
}

async fn metrics_count_known_traffic(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    app.put_text("bot", "test://a", "a").await;
    let mcp = Mcp::new(&app, "bot", &key);
    for _ in 0..3 {
        mcp.legacy("resources/list", json!({})).await;
    }
    mcp.modern("resources/read", json!({"uri": "test://a"})).await;
    mcp.legacy("no/such/method", json!({})).await;
    mcp.legacy("also/unknown", json!({})).await;

    let text = scrape(&app).await;
    let mcp_requests = |labels: &str| value(&text, &format!("hivegate_mcp_requests_total{{{labels}}}"));
    assert_eq!(mcp_requests(r#"method="resources/list",era="legacy",outcome="ok""#), Some(3.0), "{text}");
    assert_eq!(mcp_requests(r#"method="resources/read",era="modern",outcome="ok""#), Some(1.0), "{text}");
    // Unknown methods share one label: clients cannot grow the series.
    assert_eq!(mcp_requests(r#"method="other",era="legacy",outcome="error""#), Some(2.0), "{text}");
    assert!(!text.contains("no/such/method") && !text.contains("bot") && !text.contains("test://a"), "{text}");
    let count = value(&text, r#"hivegate_mcp_request_duration_seconds_count{method="resources/list",era="legacy"}"#);
    assert_eq!(count, Some(3.0), "{text}");
    let posts = value(&text, r#"hivegate_http_requests_total{route="/{agent_id}/mcp",method="POST",status="200"}"#);
    assert_eq!(posts, Some(6.0), "{text}");
    // The registry was read from the cache after the first list.
    assert!(value(&text, r#"hivegate_cache_lookups_total{result="hit"}"#).is_some_and(|hits| hits >= 2.0), "{text}");
    assert_eq!(value(&text, "hivegate_streams_open"), Some(0.0), "{text}");
    assert!(value(&text, "hivegate_db_pool_max_connections").is_some_and(|max| max >= 1.0), "{text}");
    // The ceilings in effect, here the defaults sized by this machine's memory, which no configuration shows.
    let memory = hivegate::registry::cache::process_memory();
    let capacity = hivegate::config::audit::default_queue_records(memory);
    assert_eq!(value(&text, "hivegate_audit_queue_capacity"), Some(capacity as f64), "{text}");
    let budget = hivegate::registry::cache::default_max_bytes();
    assert_eq!(value(&text, "hivegate_cache_max_bytes"), Some(budget as f64), "{text}");

    // A stream: counted while open, and the notification it is sent is counted with its lag.
    let mut stream = listen(&app, "bot", &key, json!(1), json!({"resourcesListChanged": true})).await;
    stream.next().await;
    assert_eq!(value(&scrape(&app).await, "hivegate_streams_open"), Some(1.0));
    app.put_text("bot", "test://b", "b").await;
    assert_eq!(summary(&stream.message().await), resources_changed());
    let text = scrape(&app).await;
    assert_eq!(value(&text, "hivegate_notifications_sent_total"), Some(1.0), "{text}");
    assert_eq!(value(&text, "hivegate_notification_lag_seconds_count"), Some(1.0), "{text}");

    // The audit writer's progress: every MCP request written, nothing dropped.
    eventually("the audit records to be written", || async {
        let text = scrape(&app).await;
        (value(&text, "hivegate_audit_records_written_total") >= Some(7.0)).then_some(())
    })
    .await;
    let text = scrape(&app).await;
    assert_eq!(value(&text, "hivegate_audit_records_dropped_total"), Some(0.0), "{text}");
    assert_eq!(value(&text, "hivegate_audit_queue_depth"), Some(0.0), "{text}");
}

/// `cache.max_bytes` bounds what the registry cache holds: with room for a few agents' pages, serving many
/// agents keeps `hivegate_cache_bytes` within it, and every answer is still right (read from the database).
async fn the_cache_stays_within_its_budget(backend: Backend) {
    const BUDGET: u64 = 64 * 1024;
    let app = spawn_app_with(backend, |config| {
        config.cache.max_bytes = Some(BUDGET);
        config.audit.queue_capacity = Some(1000);
    })
    .await;
    let text = scrape(&app).await;
    assert_eq!(value(&text, "hivegate_cache_max_bytes"), Some(BUDGET as f64), "{text}");
    assert_eq!(value(&text, "hivegate_audit_queue_capacity"), Some(1000.0), "{text}");
    let body = "x".repeat(1000);
    let mut held = Vec::new();
    for agent in 0..12 {
        let id = format!("bot-{agent}");
        let key = agent_with_key(&app, &id).await;
        for i in 0..5 {
            app.put_text(&id, &format!("test://{i}"), &body).await;
        }
        let mcp = Mcp::new(&app, &id, &key);
        for _ in 0..2 {
            let page = mcp.legacy("resources/list", json!({})).await;
            assert_eq!(page.result()["resources"].as_array().map(Vec::len), Some(5), "{}", page.body);
            for i in 0..5 {
                let read = mcp.legacy("resources/read", json!({"uri": format!("test://{i}")})).await;
                assert_eq!(read.result()["contents"][0]["text"], body.as_str(), "{}", read.body);
            }
        }
        held.push(value(&scrape(&app).await, "hivegate_cache_bytes").expect("hivegate_cache_bytes"));
    }
    // Each agent's page and contents take about 6 KB: the first agents fit, the later ones made room.
    assert!(held[0] > 0.0, "{held:?}");
    assert!(held.iter().all(|bytes| *bytes <= BUDGET as f64), "over the budget: {held:?}");
    let text = scrape(&app).await;
    let hits = value(&text, r#"hivegate_cache_lookups_total{result="hit"}"#).unwrap_or(0.0);
    // Making room drops other agents' registries before the one being filled.
    assert!(hits >= 12.0 * 6.0, "the second round of each agent was served from the cache: {text}");
}

/// A key's requests reach its agent's registry through what the key's last request found (src/registry/
/// cache.rs, `AgentLink`): after a change to the registry, or to the agent, the same key reads the new
/// content, and its reads are served from the cache again (a link to the registry the change retired would
/// read the database on every request).
async fn a_keys_reads_are_fresh_and_cached_again_after_a_change(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    let hits = |text: &str| value(text, r#"hivegate_cache_lookups_total{result="hit"}"#).unwrap_or(0.0);
    let read = || async { mcp.legacy("resources/read", json!({"uri": "test://a"})).await };
    // Round 0 makes the link, round 1 changes the registry only, round 2 the agent's row too.
    for (round, text) in ["one", "two", "three"].into_iter().enumerate() {
        app.put_text("bot", "test://a", text).await;
        if round == 2 {
            // The agent's row changes too: every link made before is stale.
            let patched =
                app.op(Method::PATCH, "/admin/v1/agents/bot").json(&json!({"name": "Bot"})).send().await.unwrap();
            assert_eq!(patched.status(), StatusCode::OK);
        }
        let first = read().await;
        assert_eq!(first.result()["contents"][0]["text"], text, "{}", first.body);
        let before = hits(&scrape(&app).await);
        for _ in 0..3 {
            let again = read().await;
            assert_eq!(again.result()["contents"][0]["text"], text, "{}", again.body);
        }
        let after = hits(&scrape(&app).await);
        assert_eq!(after - before, 3.0, "round {round}: the reads after the first were served from the cache");
    }
}

/// Reads that miss one entry at once share its load (src/registry/cache.rs, single flight): after a change,
/// sixteen reads sent together all get the new content, and each is counted once, as a hit, a load (`miss`) or
/// a wait for another read's load (`joined`).
async fn reads_at_once_after_a_change_are_fresh_and_each_counted_once(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    let lookups = |text: &str, result: &str| {
        value(text, &format!("hivegate_cache_lookups_total{{result=\"{result}\"}}")).unwrap_or(0.0)
    };
    for (round, text) in ["one", "two", "three"].into_iter().enumerate() {
        app.put_text("bot", "test://a", text).await;
        let before = scrape(&app).await;
        let reads = (0..16).map(|_| mcp.legacy("resources/read", json!({"uri": "test://a"})));
        for read in futures::future::join_all(reads).await {
            assert_eq!(read.result()["contents"][0]["text"], text, "round {round}: {}", read.body);
        }
        let after = scrape(&app).await;
        let delta = |result: &str| lookups(&after, result) - lookups(&before, result);
        let (hits, misses, joined) = (delta("hit"), delta("miss"), delta("joined"));
        assert_eq!(hits + misses + joined, 16.0, "round {round}: {hits} hits, {misses} misses, {joined} joined");
        // At least one load (the change dropped the entry). Not exactly one: how many reads overlap a load
        // is timing, and the unit tests of src/registry/cache_tests.rs show the sharing itself.
        assert!(misses >= 1.0, "round {round}: {hits} hits, {misses} misses, {joined} joined");
    }
}
