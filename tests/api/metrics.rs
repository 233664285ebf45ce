//! `GET /metrics`: the named series, with the values known traffic must produce.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{Api, Backend, TestApp, eventually, spawn_app};
use crate::live_client::{listen, resources_changed, summary};
use crate::mcp_client::{Mcp, agent_with_key};

both!(metrics_count_known_traffic);

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
