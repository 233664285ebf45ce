//! Connection hygiene: a request head must arrive within `http.header_read_timeout_ms`, an idle connection is
//! closed after `http.idle_timeout_ms` (HTTP/1.1 and HTTP/2, never one carrying an SSE stream), connections
//! are capped in total and per client address (trusted proxies exempt), and a request answered before its
//! body was read leaves the connection usable for the next one. Other clients are served throughout; every
//! close and refusal is counted in `/metrics`, scraped on the operator listener so that scraping opens no
//! connection on the listener under test.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::json;
use tokio::io::AsyncWriteExt;

use crate::helpers::{Api, Backend, TestApp, eventually, spawn_app_with};
use crate::live_client::{listen, resources_changed, summary};
use crate::mcp_client::agent_with_key;
use crate::raw::{HEALTHZ, Reader, connect, connect_from, post, until_closed};

both!(
    slow_and_idle_connections_are_closed,
    streams_outlive_the_idle_timeout,
    connections_are_capped_in_total_and_per_address,
    the_request_after_an_early_refusal_is_served,
);

/// The value of the series `name{labels}` on the operator listener (0 while it does not exist).
async fn series(app: &TestApp, series: &str) -> f64 {
    let operator = app.operator.as_ref().expect("an operator listener");
    let text = app.client.get(format!("{operator}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok()).unwrap_or(0.0)
}

fn with_operator(config: &mut hivegate::config::Config) {
    config.http.operator_listen = Some("127.0.0.1:0".parse().unwrap());
}

const OPEN: &str = r#"hivegate_connections_open{listener="public"}"#;

async fn slow_and_idle_connections_are_closed(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        with_operator(config);
        config.http.header_read_timeout_ms = 400;
        config.http.idle_timeout_ms = 800;
    })
    .await;
    // A client that never sends anything, one that sends a header line every 100 ms but never ends its head,
    // and one whose keep-alive connection goes idle after an answer.
    let silent = Reader::new(connect(&app).await);
    let (mut slow_read, mut slow_write) = connect(&app).await.into_split();
    slow_write.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n").await.unwrap();
    let dripping = tokio::spawn(async move {
        while slow_write.write_all(b"x-slow: 1\r\n").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut idle = Reader::new(connect(&app).await);
    idle.send(HEALTHZ).await;
    assert_eq!(idle.answer().await.status, 200);

    // Meanwhile everyone else is served.
    let response = app.anon(Method::GET, "/healthz").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    // All three are closed, the first two without an answer.
    assert_eq!(silent.until_closed().await, b"");
    assert_eq!(until_closed(&mut slow_read).await, b"");
    dripping.await.unwrap();
    assert_eq!(idle.until_closed().await, b"");
    let header_read = r#"hivegate_connections_timed_out_total{listener="public",timeout="header_read"}"#;
    assert_eq!(series(&app, header_read).await, 2.0);
    let idle = r#"hivegate_connections_timed_out_total{listener="public",timeout="idle"}"#;
    assert!(series(&app, idle).await >= 1.0);

    // HTTP/2 too: once idle the connection goes (with GOAWAY), and the client opens a new one.
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let response = h2.get(format!("{}/healthz", app.address)).send().await.unwrap();
    assert_eq!((response.status(), response.version()), (StatusCode::OK, reqwest::Version::HTTP_2));
    eventually("every idle connection closed", || async { (series(&app, OPEN).await == 0.0).then_some(()) }).await;
    let response = h2.get(format!("{}/healthz", app.address)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

/// An `Api` whose client speaks HTTP/2 (prior knowledge, over plain TCP).
struct Http2<'a> {
    app: &'a TestApp,
    client: reqwest::Client,
}

impl Api for Http2<'_> {
    fn base(&self) -> &str {
        &self.app.address
    }

    fn http(&self) -> &reqwest::Client {
        &self.client
    }
}

async fn streams_outlive_the_idle_timeout(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        with_operator(config);
        config.http.header_read_timeout_ms = 300;
        config.http.idle_timeout_ms = 300;
        // No keep-alive comment within the wait: nothing but the open stream keeps its connection.
        config.streams.keep_alive_ms = 60_000;
    })
    .await;
    let key = agent_with_key(&app, "bot").await;
    let h2 = Http2 { app: &app, client: reqwest::Client::builder().http2_prior_knowledge().build().unwrap() };
    let filter = json!({"resourcesListChanged": true});
    let mut http1_stream = listen(&app, "bot", &key, json!(1), filter.clone()).await;
    let mut http2_stream = listen(&h2, "bot", &key, json!(2), filter).await;
    http1_stream.next().await;
    http2_stream.next().await;
    // Every other connection (the admin calls') is closed as idle; the two carrying a stream stay.
    eventually("only the streams' connections open", || async { (series(&app, OPEN).await == 2.0).then_some(()) })
        .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(series(&app, OPEN).await, 2.0);
    app.put_text("bot", "test://a", "a").await;
    assert_eq!(summary(&http1_stream.message().await), resources_changed());
    assert_eq!(summary(&http2_stream.message().await), resources_changed());
}

async fn connections_are_capped_in_total_and_per_address(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        with_operator(config);
        config.http.max_connections = 4;
        config.http.max_connections_per_address = 2;
        config.rate_limits.trusted_proxies = vec!["127.0.0.9/32".parse().unwrap()];
        // The connections held open below are silent: long enough that none times out during the story.
        config.http.header_read_timeout_ms = 120_000;
    })
    .await;
    let served = |mut reader: Reader| async move {
        reader.send(HEALTHZ).await;
        assert_eq!(reader.answer().await.status, 200);
        reader
    };
    let refused = |reader: Reader| async move {
        let answer = String::from_utf8(reader.until_closed().await).unwrap();
        assert!(answer.starts_with("HTTP/1.1 503 "), "{answer:?}");
        assert!(answer.contains("connection: close"), "{answer:?}");
    };
    // Two connections from one address; a third from it is refused while another address is served.
    let a1 = Reader::new(connect_from(&app, "127.0.0.2").await);
    let a2 = Reader::new(connect_from(&app, "127.0.0.2").await);
    refused(Reader::new(connect_from(&app, "127.0.0.2").await)).await;
    let b = served(Reader::new(connect_from(&app, "127.0.0.3").await)).await;
    // The fourth connection is the last one allowed in total.
    let c = served(Reader::new(connect_from(&app, "127.0.0.4").await)).await;
    refused(Reader::new(connect_from(&app, "127.0.0.5").await)).await;
    assert_eq!(series(&app, OPEN).await, 4.0);
    let per_address = r#"hivegate_connections_refused_total{listener="public",reason="max_connections_per_address"}"#;
    let total = r#"hivegate_connections_refused_total{listener="public",reason="max_connections"}"#;
    assert_eq!(series(&app, per_address).await, 1.0);
    assert_eq!(series(&app, total).await, 1.0);

    // A closed connection frees its place.
    drop(a1);
    eventually("a place is free", || async { (series(&app, OPEN).await == 3.0).then_some(()) }).await;
    let d = served(Reader::new(connect_from(&app, "127.0.0.5").await)).await;
    drop((a2, b, c, d));
    eventually("every connection closed", || async { (series(&app, OPEN).await == 0.0).then_some(()) }).await;

    // A trusted proxy speaks for many clients: it is capped in total only.
    let mut proxied = Vec::new();
    for _ in 0..4 {
        let mut reader = Reader::new(connect_from(&app, "127.0.0.9").await);
        reader.send(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nx-forwarded-for: 198.51.100.7\r\n\r\n").await;
        assert_eq!(reader.answer().await.status, 200);
        proxied.push(reader);
    }
    refused(Reader::new(connect_from(&app, "127.0.0.9").await)).await;
    assert_eq!(series(&app, per_address).await, 1.0);
}

async fn the_request_after_an_early_refusal_is_served(backend: Backend) {
    let app = spawn_app_with(backend, with_operator).await;
    let key = agent_with_key(&app, "bot").await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x".repeat(4000)}}).to_string();
    let with_key = format!("x-agent-api-key: {key}\r\n");

    // Pipelined: a request refused before its body is read (no key), then a good one on the same connection.
    let mut reader = Reader::new(connect(&app).await);
    let mut pipelined = post("/bot/mcp", "", &ping);
    pipelined.extend(post("/bot/mcp", &with_key, &ping));
    reader.send(&pipelined).await;
    let refused = reader.answer().await;
    assert_eq!(refused.status, 401, "{}", refused.text());
    assert_eq!(refused.header("connection"), None, "the connection stays usable");
    let served = reader.answer().await;
    assert_eq!(served.status, 200, "{}", served.text());
    assert_eq!(served.json()["result"], json!({}));

    // Sent one after the other, waiting for each answer: the same.
    for _ in 0..20 {
        reader.send(&post("/bot/mcp", "", &ping)).await;
        assert_eq!(reader.answer().await.status, 401);
        reader.send(&post("/bot/mcp", &with_key, &ping)).await;
        assert_eq!(reader.answer().await.status, 200);
    }
    // An admin request refused before its body is read, and the next one.
    reader.send(&post("/admin/v1/agents", "", &json!({"id": "other", "name": "Other"}).to_string())).await;
    assert_eq!(reader.answer().await.status, 401);
    reader.send(HEALTHZ).await;
    assert_eq!(reader.answer().await.status, 200);

    // A body too large to be read for nothing: the refusal says the connection closes, and it does.
    let mut reader = Reader::new(connect(&app).await);
    reader
        .send(b"POST /bot/mcp HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 1000000\r\n\r\n{")
        .await;
    let refused = reader.answer().await;
    assert_eq!((refused.status, refused.header("connection")), (401, Some("close")));
    assert_eq!(reader.until_closed().await, b"");

    // A client library reusing one connection never sees a request fail.
    let client = reqwest::Client::builder().pool_max_idle_per_host(1).build().unwrap();
    for _ in 0..20 {
        let url = format!("{}/bot/mcp", app.address);
        let response = client.post(&url).body(ping.clone()).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let response = client.post(&url).header("x-agent-api-key", &key).body(ping.clone()).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    assert!(series(&app, r#"hivegate_unread_bodies_total{outcome="drained"}"#).await >= 42.0);
    assert_eq!(series(&app, r#"hivegate_unread_bodies_total{outcome="closed"}"#).await, 1.0);
}
