//! Streams that survive the real world: `Last-Event-ID` replay (exact, and past the retention window),
//! keep-alives past the request timeout, stream limits, slow consumers, shutdown.

use std::collections::HashSet;

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{Api, Backend, DEADLINE, TestApp, eventually, expect_status, spawn_app, spawn_app_with};
use crate::live_client::{
    Event, Legacy, Next, listen, listen_request, prompts_changed, resources_changed, summary, updated,
};
use crate::mcp_client::{Answer, agent_with_key};

both!(
    last_event_id_replays_exactly,
    a_position_past_retention_gets_a_resync,
    keep_alives_outlast_the_request_timeout,
    stream_limits,
    slow_consumers_lose_nothing,
    shutdown_ends_streams
);

async fn put_prompt(app: &TestApp, name: &str) {
    let prompt = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]});
    let response = app.op(Method::PUT, &format!("/admin/v1/agents/bot/prompts/{name}")).json(&prompt).send().await;
    let status = response.unwrap().status();
    assert!(status == StatusCode::CREATED || status == StatusCode::OK, "{status}");
}

async fn last_event_id_replays_exactly(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let client = Legacy::initialize(&app, "bot", &key, "2025-11-25").await;
    client.subscribe("test://a").await;
    client.subscribe("test://b").await;
    let mut stream = client.open(None).await;
    let start = stream.next().await.id.expect("the priming event has an id");

    app.put_text("bot", "test://a", "a0").await;
    app.put_text("bot", "test://b", "b0").await;
    // One change with two notifications: the batch replaces both.
    let batch = json!({"upsert": [{"uri": "test://a", "name": "test://a", "text": "a1"},
        {"uri": "test://b", "name": "test://b", "text": "b1"}]});
    let response = app.op(Method::POST, "/admin/v1/agents/bot/resources/batch").json(&batch).send().await;
    expect_status(response.unwrap(), StatusCode::OK).await;
    put_prompt(&app, "p").await;
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(stream.message().await);
    }
    let kinds: Vec<_> = seen.iter().map(summary).collect();
    assert_eq!(
        kinds,
        [resources_changed(), resources_changed(), updated("test://a"), updated("test://b"), prompts_changed()]
    );
    let ids: Vec<String> = seen.iter().map(|e| e.id.clone().expect("an event id")).collect();
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 5, "event ids are unique: {ids:?}");
    drop(stream);

    // Missed while disconnected.
    app.put_text("bot", "test://a", "a2").await;
    app.put_text("bot", "test://c", "c0").await;
    app.put_text("bot", "test://c", "c1").await;

    // Resuming after the batch's first notification: its second one, then everything after, once each.
    let mut resumed = client.open(Some(&ids[2])).await;
    let replayed = read(&mut resumed, 4).await;
    assert_eq!(
        replayed.iter().map(summary).collect::<Vec<_>>(),
        [updated("test://b"), prompts_changed(), updated("test://a"), resources_changed()]
    );
    assert_eq!(replayed[0].id.as_deref(), Some(ids[3].as_str()), "a replayed event keeps its id");
    assert_eq!(replayed[1].id.as_deref(), Some(ids[4].as_str()));
    resumed.expect_quiet().await;
    // … then live.
    app.put_text("bot", "test://b", "b2").await;
    assert_eq!(summary(&resumed.message().await), updated("test://b"));
    drop(resumed);

    // From the very start: all of it, in order, nothing twice.
    let mut from_start = client.open(Some(&start)).await;
    let all = read(&mut from_start, 8).await;
    assert_eq!(all.iter().take(5).map(|e| e.id.clone().unwrap()).collect::<Vec<_>>(), ids);
    assert_eq!(summary(&all[7]), updated("test://b"));
    from_start.expect_quiet().await;
}

/// Reads `count` messages.
async fn read(stream: &mut crate::live_client::Sse, count: usize) -> Vec<Event> {
    let mut events = Vec::new();
    for _ in 0..count {
        events.push(stream.message().await);
    }
    events
}

async fn a_position_past_retention_gets_a_resync(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        config.events.retention_count = 2;
        config.events.prune_interval_ms = 50;
    })
    .await;
    let key = agent_with_key(&app, "bot").await;
    let client = Legacy::initialize(&app, "bot", &key, "2025-11-25").await;
    client.subscribe("test://b").await;
    client.subscribe("test://a").await;
    let mut stream = client.open(None).await;
    let start = stream.next().await.id.expect("priming id");
    drop(stream);
    for text in ["1", "2", "3", "4", "5"] {
        app.put_text("bot", "test://a", text).await;
    }
    // Once events 1–3 are pruned, resuming from the start is a resync to 3, then events 4 and 5.
    let mut resumed = eventually("the old events to be pruned", || async {
        let mut stream = client.open(Some(&start)).await;
        let first = stream.message().await;
        let second = stream.message().await;
        (summary(&first) == resources_changed() && summary(&second) == prompts_changed()).then_some(stream)
    })
    .await;
    assert_eq!(summary(&resumed.message().await), updated("test://a"));
    assert_eq!(summary(&resumed.message().await), updated("test://b"));
    let trailer = resumed.next().await;
    assert!(trailer.data.is_empty(), "the resync ends at a resumable id: {trailer:?}");
    // The id names the position the resync brought the stream to (it depends on when pruning ran): exactly
    // the events after it follow.
    let id = trailer.id.expect("the trailer's id");
    let position: usize = id.rsplit('.').next().and_then(|seq| seq.parse().ok()).expect("a position");
    assert!((1..=3).contains(&position), "{id}");
    for _ in position..5 {
        assert_eq!(summary(&resumed.message().await), updated("test://a"));
    }
    resumed.expect_quiet().await;
    app.put_text("bot", "test://a", "6").await;
    assert_eq!(summary(&resumed.message().await), updated("test://a"));

    // An id that is not one of ours is a resync at the current position.
    let mut stranger = client.open(Some("garbage")).await;
    let kinds: Vec<_> = read(&mut stranger, 4).await.iter().map(summary).collect();
    assert_eq!(kinds, [resources_changed(), prompts_changed(), updated("test://a"), updated("test://b")]);
    stranger.expect_quiet().await;
}

async fn keep_alives_outlast_the_request_timeout(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        config.streams.keep_alive_ms = 100;
        config.http.request_timeout_ms = 300;
    })
    .await;
    let key = agent_with_key(&app, "bot").await;
    let client = Legacy::initialize(&app, "bot", &key, "2025-03-26").await;
    let mut legacy = client.open(None).await;
    let mut modern = listen(&app, "bot", &key, json!(1), json!({"resourcesListChanged": true})).await;
    modern.next().await;
    legacy.expect_quiet().await;
    modern.expect_quiet().await;
    assert!(legacy.comments >= 4 && modern.comments >= 4, "{} and {} keep-alives", legacy.comments, modern.comments);
    app.put_text("bot", "test://a", "x").await;
    assert_eq!(summary(&legacy.message().await), resources_changed());
    assert_eq!(summary(&modern.message().await), resources_changed());
}

async fn stream_limits(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        config.streams.max_per_key = 2;
        config.streams.max_per_agent = 3;
    })
    .await;
    let key = agent_with_key(&app, "bot").await;
    let other = app.issue_key("bot", &["mcp"]).await.key;
    let client = Legacy::initialize(&app, "bot", &key, "2025-11-25").await;
    let first = client.open(None).await;
    let _second = listen(&app, "bot", &key, json!(1), json!({})).await;
    let refused = Answer::of(listen_request(&app, "bot", &key, json!(2), json!({})).send().await.unwrap()).await;
    let error = refused.error(StatusCode::TOO_MANY_REQUESTS, -31429);
    assert_eq!(error["data"], json!({"limit": 2, "per": "key"}));
    let _third = listen(&app, "bot", &other, json!(3), json!({})).await;
    let refused = Answer::of(listen_request(&app, "bot", &other, json!(4), json!({})).send().await.unwrap()).await;
    assert_eq!(refused.error(StatusCode::TOO_MANY_REQUESTS, -31429)["data"], json!({"limit": 3, "per": "agent"}));
    // Closing a stream frees its place.
    drop(first);
    eventually("a closed stream to free its place", || async {
        let response = listen_request(&app, "bot", &key, json!(5), json!({})).send().await.unwrap();
        (response.status() == StatusCode::OK).then_some(())
    })
    .await;
}

/// A queue of one change: bursts overflow it. The legacy stream is closed and resumed with `Last-Event-ID`,
/// the modern one catches up from the event table; neither loses or repeats a notification.
async fn slow_consumers_lose_nothing(backend: Backend) {
    let app = spawn_app_with(backend, |config| config.streams.queue_capacity = 1).await;
    let key = agent_with_key(&app, "bot").await;
    app.put_text("bot", "test://a", "v--").await;
    let client = Legacy::initialize(&app, "bot", &key, "2025-11-25").await;
    client.subscribe("test://a").await;
    let mut legacy = client.open(None).await;
    let mut last_id = legacy.next().await.id;
    let mut modern = listen(&app, "bot", &key, json!("m"), json!({"resourceSubscriptions": ["test://a"]})).await;
    modern.next().await;

    const CHANGES: usize = 30;
    let app = &app;
    futures::future::join_all((0..CHANGES).map(|i| async move {
        app.put_text("bot", "test://a", &format!("v{i:02}")).await;
    }))
    .await;

    let mut legacy_ids = Vec::new();
    let started = std::time::Instant::now();
    while legacy_ids.len() < CHANGES {
        assert!(started.elapsed() < DEADLINE, "only {} of {CHANGES} updates arrived", legacy_ids.len());
        match legacy.next_within(DEADLINE).await {
            Next::Event(event) if event.data.is_empty() => last_id = event.id,
            Next::Event(event) => {
                assert_eq!(summary(&event), updated("test://a"));
                last_id = event.id.clone();
                legacy_ids.push(event.id.expect("an id"));
            }
            // Closed for falling behind: resume where it stopped.
            Next::End => legacy = client.open(last_id.as_deref()).await,
            Next::Quiet => panic!("the legacy stream went quiet after {} updates", legacy_ids.len()),
        }
    }
    assert_eq!(legacy_ids.iter().collect::<HashSet<_>>().len(), CHANGES, "no update twice: {legacy_ids:?}");
    legacy.expect_quiet().await;
    for _ in 0..CHANGES {
        assert_eq!(summary(&modern.message().await), updated("test://a"));
    }
    modern.expect_quiet().await;
}

async fn shutdown_ends_streams(backend: Backend) {
    let mut app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let client = Legacy::initialize(&app, "bot", &key, "2025-11-25").await;
    let mut stream = client.open(None).await;
    stream.next().await;
    app.stop().await;
    let rest = stream.expect_end().await;
    assert!(rest.is_empty(), "a legacy stream just ends: {rest:?}");
}
