//! A key's expiry ends its open streams at the expiry instant, like revoking it does: a legacy `GET` stream
//! and a modern `subscriptions/listen` stream, on every replica.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{Api, Backend, spawn_app_on_with, spawn_app_with};
use crate::live_client::{Legacy, listen, resources_changed, summary};
use crate::mcp_client::Mcp;

both!(expiry_ends_streams);

async fn expiry_ends_streams(backend: Backend) {
    // Keep-alives an hour apart: nothing but the expiry can end the streams while the story runs.
    let hourly = |config: &mut hivegate::config::Config| config.streams.keep_alive_ms = 60 * 60 * 1000;
    let app = spawn_app_with(backend, hourly).await;
    app.create_agent("bot").await;
    let lasting = app.issue_key("bot", &["mcp"]).await.key;
    // A couple of seconds to open the streams and see them work.
    let expires_at = chrono::Utc::now() + Duration::from_secs(4);
    let created = app.issue_key_with("bot", &json!({"scopes": ["mcp"], "expiresAt": expires_at.to_rfc3339()})).await;
    let key = created["key"].as_str().expect("the key").to_owned();

    let session = Legacy::initialize(&app, "bot", &key, "2025-11-25").await;
    let mut get = session.open(None).await;
    get.next().await;
    let mut listening = listen(&app, "bot", &key, json!("l"), json!({"resourcesListChanged": true})).await;
    listening.next().await;
    // The same key's listen on another replica of the database (PostgreSQL serves several).
    let replica = match backend {
        Backend::Postgres => Some(spawn_app_on_with(app.db.clone(), hourly).await),
        Backend::Sqlite => None,
    };
    let mut elsewhere = match &replica {
        Some(replica) => {
            let mut stream = listen(replica, "bot", &key, json!(2), json!({"resourcesListChanged": true})).await;
            stream.next().await;
            Some(stream)
        }
        None => None,
    };
    let mut kept = listen(&app, "bot", &lasting, json!("kept"), json!({"resourcesListChanged": true})).await;
    kept.next().await;
    // The streams are live until then.
    app.put_text("bot", "test://a", "x").await;
    assert_eq!(summary(&get.message().await), resources_changed());
    assert_eq!(summary(&listening.message().await), resources_changed());
    if let Some(stream) = &mut elsewhere {
        assert_eq!(summary(&stream.message().await), resources_changed());
    }
    assert_eq!(summary(&kept.message().await), resources_changed());

    // Both end at the expiry, with nothing before it (the server's timer, not a keep-alive or a change).
    let not_before = expires_at - Duration::from_millis(250);
    assert!(get.expect_end().await.is_empty(), "the GET stream ends with nothing more");
    assert!(chrono::Utc::now() >= not_before, "the GET stream ended before the key expired");
    let rest = listening.expect_end().await;
    assert!(chrono::Utc::now() >= not_before, "the listen stream ended before the key expired");
    let last = rest.last().map(|event| event.json()).unwrap_or_default();
    assert_eq!(last["id"], "l", "a listen the server ends closes with its result: {rest:?}");
    assert!(last.get("result").is_some(), "{last}");
    if let Some(stream) = &mut elsewhere {
        let rest = stream.expect_end().await;
        assert_eq!(rest.last().map(|event| event.json()["id"].clone()), Some(json!(2)), "{rest:?}");
    }

    // The key is refused from then on; another key's stream goes on.
    let answer = Mcp::new(&app, "bot", &key).legacy("ping", json!({})).await;
    answer.error(StatusCode::UNAUTHORIZED, -31401);
    app.put_text("bot", "test://b", "y").await;
    assert_eq!(summary(&kept.message().await), resources_changed());
}
