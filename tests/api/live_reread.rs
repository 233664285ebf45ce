//! A client that re-reads when it is told of a change sees the change: the replica's caches drop what the
//! change made stale before its notification goes out, also with a long `cacheTtlMs`.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{Api, Backend, expect_json, spawn_app};
use crate::live_client::{listen, resources_changed, summary, updated};
use crate::mcp_client::{Mcp, agent_with_key};

both!(rereading_on_a_notification_sees_the_change);

async fn rereading_on_a_notification_sees_the_change(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let response = app.op(Method::PATCH, "/admin/v1/agents/bot").json(&json!({"cacheTtlMs": 600_000})).send().await;
    expect_json(response.unwrap(), StatusCode::OK).await;
    app.put_text("bot", "test://a", "version 0").await;
    let mcp = Mcp::new(&app, "bot", &key);
    let filter = json!({"resourcesListChanged": true, "resourceSubscriptions": ["test://a"]});
    let mut stream = listen(&app, "bot", &key, json!(1), filter).await;
    stream.next().await; // the acknowledgement

    let mut previous = "version 0".to_owned();
    for round in 1..=10 {
        // Read first, so that the content and the list page are cached.
        let read = mcp.modern("resources/read", json!({"uri": "test://a"})).await;
        assert_eq!(read.result()["contents"][0]["text"], previous);
        mcp.modern("resources/list", json!({})).await.result();
        // A longer text: its size is listed, so the change sends `updated` and `list_changed`.
        let text = format!("version {round}{}", "!".repeat(round));
        app.put_text("bot", "test://a", &text).await;
        let mut seen = Vec::new();
        while seen.len() < 2 {
            let event = stream.message().await;
            seen.push(summary(&event));
            // Re-read at once, on either notification.
            let read = mcp.modern("resources/read", json!({"uri": "test://a"})).await;
            assert_eq!(read.result()["contents"][0]["text"], text, "round {round}: a stale read after {seen:?}");
            let list = mcp.modern("resources/list", json!({})).await;
            assert_eq!(list.result()["resources"][0]["size"], text.len(), "round {round}: a stale list after {seen:?}");
        }
        previous = text;
        seen.sort();
        let mut expected = vec![updated("test://a"), resources_changed()];
        expected.sort();
        assert_eq!(seen, expected);
    }
}
