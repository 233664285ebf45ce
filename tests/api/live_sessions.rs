//! Legacy sessions and their `GET` streams: subscribe → update → notified, list changes, session errors,
//! replacement, revocation.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{Api, Backend, expect_status, spawn_app, spawn_app_with};
use crate::live_client::{Legacy, prompts_changed, resources_changed, summary, updated};
use crate::mcp_client::{Answer, Mcp, agent_with_key};

both!(
    subscribe_update_notified,
    list_changes_reach_sessions,
    session_errors,
    idle_sessions_expire,
    a_second_get_replaces_the_first,
    revoking_or_deleting_closes_streams
);

async fn subscribe_update_notified(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    app.put_text("bot", "test://a", "one").await;
    let client = Legacy::initialize(&app, "bot", &key, "2025-11-25").await;
    let mut stream = client.open(None).await;
    // A 2025-11-25 stream starts with a priming event: an id, no data.
    let priming = stream.next().await;
    assert!(priming.data.is_empty() && priming.id.is_some(), "{priming:?}");

    client.subscribe("test://a").await;
    // Any valid URI may be subscribed, also before it exists.
    client.subscribe("test://later").await;
    // Subscribing twice is fine.
    client.subscribe("test://later").await;
    app.put_text("bot", "test://a", "two").await;
    let event = stream.message().await;
    assert_eq!(summary(&event), updated("test://a"));
    assert!(event.id.is_some(), "legacy notifications carry event ids");
    assert_eq!(event.json()["jsonrpc"], "2.0");

    // A new resource changes the list; replacing an unsubscribed one sends nothing.
    app.put_text("bot", "test://other", "x").await;
    assert_eq!(summary(&stream.message().await), resources_changed());
    app.put_text("bot", "test://other", "y").await;
    // Creating a subscribed URI is a list change; replacing it an update.
    app.put_text("bot", "test://later", "z").await;
    assert_eq!(summary(&stream.message().await), resources_changed());
    app.put_text("bot", "test://later", "w").await;
    assert_eq!(summary(&stream.message().await), updated("test://later"));

    // Unsubscribed: no more updates; deleting a subscribed resource: list change and update.
    client.unsubscribe("test://a").await;
    client.unsubscribe("test://never-subscribed").await;
    app.put_text("bot", "test://a", "six").await;
    let response = app.op(Method::DELETE, "/admin/v1/agents/bot/resources").query(&[("uri", "test://later")]);
    expect_status(response.send().await.unwrap(), StatusCode::NO_CONTENT).await;
    assert_eq!(summary(&stream.message().await), resources_changed());
    assert_eq!(summary(&stream.message().await), updated("test://later"));
    stream.expect_quiet().await;

    // Sessionless plain requests keep working next to sessions.
    let plain = Mcp::new(&app, "bot", &key).legacy("resources/list", json!({})).await;
    assert_eq!(plain.result()["resources"].as_array().map(Vec::len), Some(2));
}

async fn list_changes_reach_sessions(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    // 2024-11-05 sessions get no priming event.
    let client = Legacy::initialize(&app, "bot", &key, "2024-11-05").await;
    client.subscribe("test://a").await;
    let mut stream = client.open(None).await;

    let template = json!({"uriTemplate": "test://items/{id}", "name": "items"});
    let response = app.op(Method::PUT, "/admin/v1/agents/bot/resource-templates").json(&template).send().await;
    expect_status(response.unwrap(), StatusCode::CREATED).await;
    let first = stream.next().await;
    assert!(!first.data.is_empty(), "no priming event before 2025-11-25: {first:?}");
    assert_eq!(summary(&first), resources_changed());
    let response = app
        .op(Method::DELETE, "/admin/v1/agents/bot/resource-templates")
        .query(&[("uriTemplate", "test://items/{id}")])
        .send()
        .await;
    expect_status(response.unwrap(), StatusCode::NO_CONTENT).await;
    assert_eq!(summary(&stream.message().await), resources_changed());

    let prompt = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]});
    let response = app.op(Method::PUT, "/admin/v1/agents/bot/prompts/greet").json(&prompt).send().await;
    expect_status(response.unwrap(), StatusCode::CREATED).await;
    assert_eq!(summary(&stream.message().await), prompts_changed());
    let response = app.op(Method::PUT, "/admin/v1/agents/bot/prompts/greet").json(&prompt).send().await;
    expect_status(response.unwrap(), StatusCode::OK).await;
    assert_eq!(summary(&stream.message().await), prompts_changed());
    let response = app.op(Method::DELETE, "/admin/v1/agents/bot/prompts/greet").send().await;
    expect_status(response.unwrap(), StatusCode::NO_CONTENT).await;
    assert_eq!(summary(&stream.message().await), prompts_changed());

    // A batch: one list change, then the update of each subscribed URI it touched.
    app.put_text("bot", "test://a", "1").await;
    assert_eq!(summary(&stream.message().await), resources_changed());
    let batch = json!({"upsert": [{"uri": "test://a", "name": "a", "text": "2"},
        {"uri": "test://b", "name": "b", "text": "new"}], "delete": []});
    let response = app.op(Method::POST, "/admin/v1/agents/bot/resources/batch").json(&batch).send().await;
    expect_status(response.unwrap(), StatusCode::OK).await;
    assert_eq!(summary(&stream.message().await), resources_changed());
    assert_eq!(summary(&stream.message().await), updated("test://a"));
    stream.expect_quiet().await;
}

async fn session_errors(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let other_key = app.issue_key("bot", &["mcp"]).await.key;
    let other_agent_key = agent_with_key(&app, "other").await;
    let client = Legacy::initialize(&app, "bot", &key, "2025-11-25").await;

    // Missing session: 400/-32600 on GET, DELETE and (un)subscribe; other methods work without one.
    let path = "/bot/mcp";
    for method in [Method::GET, Method::DELETE] {
        Answer::of(app.with_key(method, path, &key).send().await.unwrap()).await.error(StatusCode::BAD_REQUEST, -32600);
    }
    let plain = Mcp::new(&app, "bot", &key);
    plain.legacy("resources/subscribe", json!({"uri": "test://a"})).await.error(StatusCode::BAD_REQUEST, -32600);
    // The session check comes before the method's params are looked at.
    plain.legacy("resources/subscribe", json!({})).await.error(StatusCode::BAD_REQUEST, -32600);
    assert_eq!(*plain.legacy("ping", json!({})).await.result(), json!({}));

    // Unknown, malformed, or another key's or agent's session: 404/-31410.
    let as_client = |agent: &str, key: &str, session: &str| Legacy {
        api: &app,
        agent: agent.to_owned(),
        key: key.to_owned(),
        session: session.to_owned(),
        version: "2025-11-25".to_owned(),
    };
    let elsewhere = Legacy::initialize(&app, "other", &other_agent_key, "2025-11-25").await;
    for stranger in [
        as_client("bot", &key, "hgs_0123456789abcdefghijklmnopqrstuvwxyzABCDEFG"),
        as_client("bot", &key, "not-a-session-id"),
        as_client("bot", &other_key, &client.session),
        as_client("bot", &key, &elsewhere.session),
    ] {
        stranger.call("ping", json!({})).await.error(StatusCode::NOT_FOUND, -31410);
        stranger.open_answer().await.error(StatusCode::NOT_FOUND, -31410);
    }

    // The session works with every method; an invalid subscription URI is -32602.
    assert_eq!(*client.call("ping", json!({})).await.result(), json!({}));
    client.call("resources/subscribe", json!({"uri": "no scheme"})).await.error(StatusCode::OK, -32602);
    // Accept must allow an event stream on GET.
    let answer =
        Answer::of(client.request(Method::GET).header("accept", "application/json").send().await.unwrap()).await;
    answer.error(StatusCode::NOT_ACCEPTABLE, -32600);

    // DELETE ends it: 204, then 404 for every use, also a second DELETE; its stream closes.
    let mut stream = client.open(None).await;
    let response = client.request(Method::DELETE).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    stream.expect_end().await;
    client.call("ping", json!({})).await.error(StatusCode::NOT_FOUND, -31410);
    client.call("resources/subscribe", json!({"uri": "test://a"})).await.error(StatusCode::NOT_FOUND, -31410);
    client.open_answer().await.error(StatusCode::NOT_FOUND, -31410);
    Answer::of(client.request(Method::DELETE).send().await.unwrap()).await.error(StatusCode::NOT_FOUND, -31410);
}

async fn a_second_get_replaces_the_first(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let client = Legacy::initialize(&app, "bot", &key, "2025-06-18").await;
    let mut first = client.open(None).await;
    let mut second = client.open(None).await;
    first.expect_end().await;
    app.put_text("bot", "test://a", "x").await;
    assert_eq!(summary(&second.message().await), resources_changed());
}

async fn revoking_or_deleting_closes_streams(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let spare = app.issue_key("bot", &["mcp"]).await;
    let kept = Legacy::initialize(&app, "bot", &key, "2025-11-25").await;
    let revoked = Legacy::initialize(&app, "bot", &spare.key, "2025-11-25").await;
    let mut kept_stream = kept.open(None).await;
    let mut revoked_stream = revoked.open(None).await;
    app.revoke_key("bot", &spare.id).await;
    revoked_stream.expect_end().await;
    revoked.call("ping", json!({})).await.error(StatusCode::UNAUTHORIZED, -31401);
    app.put_text("bot", "test://a", "x").await;
    assert_eq!(summary(&kept_stream.message().await), resources_changed());

    let response = app.op(Method::DELETE, "/admin/v1/agents/bot").send().await.unwrap();
    expect_status(response, StatusCode::NO_CONTENT).await;
    kept_stream.expect_end().await;
}

/// A session without requests expires after the idle timeout (1 s here, the smallest); an open stream keeps
/// its session alive.
async fn idle_sessions_expire(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        config.sessions.idle_timeout_secs = 1;
        config.streams.keep_alive_ms = 100;
    })
    .await;
    let key = agent_with_key(&app, "bot").await;
    let idle = Legacy::initialize(&app, "bot", &key, "2025-11-25").await;
    let streaming = Legacy::initialize(&app, "bot", &key, "2025-11-25").await;
    let _stream = streaming.open(None).await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    idle.call("ping", json!({})).await.error(StatusCode::NOT_FOUND, -31410);
    assert_eq!(*streaming.call("ping", json!({})).await.result(), json!({}));
}
