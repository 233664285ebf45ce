//! Modern `subscriptions/listen` streams: acknowledgement, filter, tags, several listens, the server's end.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Api, Backend, expect_status, spawn_app};
use crate::live_client::{listen, listen_request, prompts_changed, resources_changed, summary};
use crate::mcp_client::{Answer, agent_with_key};

both!(listen_filter_is_honoured_and_tagged, several_listens_per_client, listen_errors, server_ends_listens);

const TAG: &str = "io.modelcontextprotocol/subscriptionId";

async fn listen_filter_is_honoured_and_tagged(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    app.put_text("bot", "test://a", "one").await;
    let filter = json!({"toolsListChanged": true, "promptsListChanged": true,
        "resourceSubscriptions": ["test://a", "not a uri"]});
    let mut stream = listen(&app, "bot", &key, json!("sub-1"), filter).await;

    // First: the acknowledgement with the honoured subset (no tools; only valid URIs), tagged.
    let ack = stream.next().await;
    assert_eq!(ack.id, None, "modern streams carry no event ids");
    assert_eq!(
        ack.json(),
        json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": {TAG: "sub-1"},
                "notifications": {"promptsListChanged": true, "resourceSubscriptions": ["test://a"]}}})
    );

    // Not asked for: resource list changes, other URIs.
    let template = json!({"uriTemplate": "test://items/{id}", "name": "items"});
    let response = app.op(Method::PUT, "/admin/v1/agents/bot/resource-templates").json(&template).send().await;
    expect_status(response.unwrap(), StatusCode::CREATED).await;
    app.put_text("bot", "test://b", "b").await;
    app.put_text("bot", "test://b", "c").await;
    // Asked for: prompt changes and updates of test://a, each tagged with the listen request's id.
    let prompt = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]});
    let response = app.op(Method::PUT, "/admin/v1/agents/bot/prompts/greet").json(&prompt).send().await;
    expect_status(response.unwrap(), StatusCode::CREATED).await;
    let event = stream.message().await;
    assert_eq!(summary(&event), prompts_changed());
    assert_eq!(
        event.json(),
        json!({"jsonrpc": "2.0", "method": "notifications/prompts/list_changed",
        "params": {"_meta": {TAG: "sub-1"}}})
    );
    assert_eq!(event.id, None);
    app.put_text("bot", "test://a", "two").await;
    let event = stream.message().await;
    assert_eq!(
        event.json(),
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
        "params": {"uri": "test://a", "_meta": {TAG: "sub-1"}}})
    );
    stream.expect_quiet().await;
}

async fn several_listens_per_client(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let mut resources = listen(&app, "bot", &key, json!(42), json!({"resourcesListChanged": true})).await;
    let mut prompts = listen(&app, "bot", &key, json!(7.5), json!({"promptsListChanged": true})).await;
    let mut nothing = listen(&app, "bot", &key, json!("quiet"), json!({})).await;
    let ack = resources.next().await.json();
    assert_eq!(ack["params"], json!({"_meta": {TAG: 42}, "notifications": {"resourcesListChanged": true}}));
    assert_eq!(prompts.next().await.json()["params"]["_meta"][TAG], json!(7.5));
    assert_eq!(nothing.next().await.json()["params"], json!({"_meta": {TAG: "quiet"}, "notifications": {}}));

    app.put_text("bot", "test://a", "x").await;
    let prompt = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]});
    let response = app.op(Method::PUT, "/admin/v1/agents/bot/prompts/greet").json(&prompt).send().await;
    expect_status(response.unwrap(), StatusCode::CREATED).await;

    let event = resources.message().await;
    assert_eq!(summary(&event), resources_changed());
    assert_eq!(event.json()["params"]["_meta"][TAG], 42, "the tag keeps the id's JSON type");
    let event = prompts.message().await;
    assert_eq!(summary(&event), prompts_changed());
    assert_eq!(event.json()["params"]["_meta"][TAG], json!(7.5));
    resources.expect_quiet().await;
    prompts.expect_quiet().await;
    nothing.expect_quiet().await;
}

async fn listen_errors(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    // A malformed filter is the method's -32602, answered as JSON with the request's id.
    let request = listen_request(&app, "bot", &key, json!(3), json!({"promptsListChanged": "yes"}));
    let answer = Answer::of(request.send().await.unwrap()).await;
    answer.error(StatusCode::OK, -32602);
    assert_eq!(answer.body["id"], 3);
    // A client that cannot take an event stream: 406.
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "subscriptions/listen",
        "params": {"_meta": crate::mcp_client::envelope(), "notifications": {}}});
    let request = app
        .with_key(Method::POST, "/bot/mcp", &key)
        .header("accept", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .json(&body);
    Answer::of(request.send().await.unwrap()).await.error(StatusCode::NOT_ACCEPTABLE, -32600);
    // Legacy-only methods with the modern envelope: 404/-32601.
    let mcp = crate::mcp_client::Mcp::new(&app, "bot", &key);
    for method in ["resources/subscribe", "resources/unsubscribe"] {
        mcp.modern(method, json!({"uri": "test://a"})).await.error(StatusCode::NOT_FOUND, -32601);
    }
    // A modern notifications/cancelled for a listen: 202, and that stream closes.
    let mut stream = listen(&app, "bot", &key, json!("gone"), json!({"promptsListChanged": true})).await;
    stream.next().await;
    let cancelled = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "gone", "_meta": crate::mcp_client::envelope()}});
    let response = app
        .with_key(Method::POST, "/bot/mcp", &key)
        .header("mcp-protocol-version", "2026-07-28")
        .json(&cancelled)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let rest = stream.expect_end().await;
    assert!(rest.is_empty(), "nothing after a cancellation, not even a result: {rest:?}");
}

/// When the server ends a listen (revoked key, shutdown) the stream's last message is the listen
/// request's result.
async fn server_ends_listens(backend: Backend) {
    let mut app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let spare = app.issue_key("bot", &["mcp"]).await;
    let final_result = |id: Value| {
        json!({"jsonrpc": "2.0", "id": id.clone(),
        "result": {"resultType": "complete", "_meta": {TAG: id}}})
    };

    let mut revoked = listen(&app, "bot", &spare.key, json!("r"), json!({"promptsListChanged": true})).await;
    revoked.next().await;
    app.revoke_key("bot", &spare.id).await;
    let rest = revoked.expect_end().await;
    assert_eq!(rest.last().map(|event| event.json()), Some(final_result(json!("r"))));

    let mut stream = listen(&app, "bot", &key, json!(1), json!({"resourcesListChanged": true})).await;
    stream.next().await;
    app.put_text("bot", "test://a", "x").await;
    assert_eq!(summary(&stream.message().await), resources_changed());
    app.stop().await;
    let rest = stream.expect_end().await;
    assert_eq!(rest.iter().map(|event| event.json()).collect::<Vec<_>>(), vec![final_result(json!(1))]);
}
