//! The live legacy sessions of one key are capped (`sessions.max_per_key`), counted in the database: across
//! replicas and concurrent `initialize`s; ended and expired sessions do not count.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{Api, Backend, spawn_app_on_with, spawn_app_with};
use crate::live_client::Legacy;
use crate::mcp_client::{Answer, agent_with_key};

both!(sessions_per_key_are_capped);

const CAP: u32 = 3;

/// `initialize` at 2025-11-25, answered as it comes.
async fn initialize(api: &impl Api, agent: &str, key: &str) -> Answer {
    let body = json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {"protocolVersion": "2025-11-25",
        "capabilities": {}, "clientInfo": {"name": "cap-tests", "version": "1"}}});
    let request = api.with_key(Method::POST, &format!("/{agent}/mcp"), key).header("accept", "application/json");
    Answer::of(request.json(&body).send().await.unwrap()).await
}

/// Asserts the refusal at the cap: 429, -31429 naming the limit, the request's id, no session.
fn assert_capped(answer: &Answer) {
    let error = answer.error(StatusCode::TOO_MANY_REQUESTS, -31429);
    assert_eq!(error["data"], json!({"limit": CAP, "per": "key"}));
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("sessions.max_per_key") && message.contains(&CAP.to_string()), "{message}");
    assert_eq!(answer.body["id"], "init");
    assert!(answer.headers.get("mcp-session-id").is_none(), "a refused initialize issues no session");
}

async fn sessions_per_key_are_capped(backend: Backend) {
    let app = spawn_app_with(backend, |config| config.sessions.max_per_key = CAP).await;
    let key = agent_with_key(&app, "bot").await;
    let mut sessions = Vec::new();
    for _ in 0..CAP {
        sessions.push(Legacy::initialize(&app, "bot", &key, "2025-11-25").await);
    }
    assert_capped(&initialize(&app, "bot", &key).await);
    // The sessions held keep working; another key of the agent has a cap of its own.
    assert_eq!(*sessions[0].call("ping", json!({})).await.result(), json!({}));
    let other = app.issue_key("bot", &["mcp"]).await.key;
    Legacy::initialize(&app, "bot", &other, "2025-11-25").await;
    // Sessionless requests need no session and are not capped.
    let answer = crate::mcp_client::Mcp::new(&app, "bot", &key).legacy("ping", json!({})).await;
    assert_eq!(*answer.result(), json!({}));

    // Counted in the database: another replica refuses the key too (PostgreSQL serves several).
    if backend == Backend::Postgres {
        let replica = spawn_app_on_with(app.db.clone(), |config| config.sessions.max_per_key = CAP).await;
        assert_capped(&initialize(&replica, "bot", &key).await);
    }

    // An ended session does not count.
    let ended = sessions.pop().expect("a session");
    let response = ended.request(Method::DELETE).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    sessions.push(Legacy::initialize(&app, "bot", &key, "2025-11-25").await);
    assert_capped(&initialize(&app, "bot", &key).await);

    // Nor do expired ones: in the database, last seen longer ago than the idle timeout (30 minutes here).
    app.db.execute("update session set last_seen_at = 0").await;
    for _ in 0..CAP {
        Legacy::initialize(&app, "bot", &key, "2025-11-25").await;
    }
    assert_capped(&initialize(&app, "bot", &key).await);

    // Concurrent initializes of a fresh key: exactly the cap gets through.
    let fresh = app.issue_key("bot", &["mcp"]).await.key;
    let answers = futures::future::join_all((0..10).map(|_| initialize(&app, "bot", &fresh))).await;
    let issued = answers.iter().filter(|answer| answer.status == StatusCode::OK).count();
    assert_eq!(issued, CAP as usize, "{:?}", answers.iter().map(|a| a.status).collect::<Vec<_>>());
    for answer in answers.iter().filter(|answer| answer.status != StatusCode::OK) {
        assert_capped(answer);
    }
}
