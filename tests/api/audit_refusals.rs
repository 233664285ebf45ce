//! What the MCP audit log records besides answered requests: refusals after authentication (another agent's
//! key, a key without scope `mcp`, the rate limit), a record per message of a batch, and user agents that
//! are not ASCII.

use reqwest::header::HeaderValue;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::audit::written;
use crate::helpers::{Api, Backend, expect_json, spawn_app};
use crate::mcp_client::{Answer, Mcp, agent_with_key};

both!(refusals_after_authentication_are_audited, batch_messages_are_audited_one_by_one, non_ascii_user_agents_are_kept);

/// The id of the key `key` (the records name keys by id).
async fn key_id(app: &crate::helpers::TestApp, agent: &str, key: &str) -> String {
    let keys = app.list_all(&format!("/admin/v1/agents/{agent}/keys"), None).await;
    let found = keys.iter().find(|listed| key.starts_with(listed["prefix"].as_str().unwrap_or("-")));
    found.and_then(|listed| listed["id"].as_str()).expect("the key is listed").to_owned()
}

/// Asserts a refusal's record: of `agent`, by `key_id`, for `method` on `target`, with `code`.
fn assert_refusal(record: &Value, agent: &str, key_id: &str, method: &str, target: &str, code: i64) {
    assert_eq!(record["agentId"], agent, "{record}");
    assert_eq!(record["kind"], "mcp", "{record}");
    assert_eq!(record["actor"], format!("key:{key_id}"), "{record}");
    assert_eq!(record["keyId"], key_id, "{record}");
    assert_eq!(record["method"], method, "{record}");
    assert_eq!(record["target"], target, "{record}");
    assert_eq!(record["outcome"], "error", "{record}");
    assert_eq!(record["errorCode"], code, "{record}");
}

async fn refusals_after_authentication_are_audited(backend: Backend) {
    let app = spawn_app(backend).await;
    agent_with_key(&app, "bot").await;
    let intruder = agent_with_key(&app, "intruder").await;
    let intruder_id = key_id(&app, "intruder", &intruder).await;

    // Another agent's key on bot's endpoint: in bot's log, the key's own agent as the target.
    Mcp::new(&app, "bot", &intruder).legacy("resources/list", json!({})).await.error(StatusCode::FORBIDDEN, -31403);
    let response = app.with_key(Method::GET, "/bot/mcp", &intruder).header("accept", "text/event-stream");
    Answer::of(response.send().await.unwrap()).await.error(StatusCode::FORBIDDEN, -31403);
    let refused = &written(&app, "bot", "-", 1).await[0];
    assert_refusal(refused, "bot", &intruder_id, "-", "agent:intruder", -31403);
    assert_eq!(refused["clientIp"], "127.0.0.1");
    let refused = &written(&app, "bot", "GET", 1).await[0];
    assert_refusal(refused, "bot", &intruder_id, "GET", "agent:intruder", -31403);
    // Nothing of it in the intruder's own log.
    let response = app.op(Method::GET, "/admin/v1/audit").query(&[("agent", "intruder")]).send().await.unwrap();
    let page = expect_json(response, StatusCode::OK).await;
    assert!(page["items"].as_array().is_some_and(|items| items.iter().all(|r| r["kind"] != "mcp")), "{page}");

    // A key of the agent without scope mcp.
    let registry = app.issue_key("bot", &["registry"]).await;
    Mcp::new(&app, "bot", &registry.key).legacy("ping", json!({})).await.error(StatusCode::FORBIDDEN, -31403);
    let records = written(&app, "bot", "-", 2).await;
    assert_refusal(&records[0], "bot", &registry.id, "-", "", -31403);

    // The rate limit: a key with a bucket of one.
    let created = app.issue_key_with("bot", &json!({"rateLimit": {"requestsPerSecond": 1, "burst": 1}})).await;
    let (limited, limited_id) = (created["key"].as_str().unwrap(), created["id"].as_str().unwrap());
    let mcp = Mcp::new(&app, "bot", limited);
    assert_eq!(*mcp.legacy("ping", json!({})).await.result(), json!({}));
    mcp.legacy("ping", json!({})).await.error(StatusCode::TOO_MANY_REQUESTS, -31429);
    let records = written(&app, "bot", "-", 3).await;
    assert_refusal(&records[0], "bot", limited_id, "-", "", -31429);
    let pings = written(&app, "bot", "ping", 1).await;
    assert_eq!((pings.len(), pings[0]["outcome"].clone()), (1, json!("ok")), "the ping served: {pings:?}");
}

async fn batch_messages_are_audited_one_by_one(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    app.put_text("bot", "test://a", "alpha").await;
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "test://a"}},
        {"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": "test://missing"}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 3, "method": "prompts/get", "params": {"name": "absent"}},
        {"jsonrpc": "2.0", "id": 4, "method": "ping"}
    ]);
    let response = Mcp::new(&app, "bot", &key).post().header("user-agent", "batcher/1").json(&batch).send().await;
    let answer = Answer::of(response.unwrap()).await;
    assert_eq!(answer.body.as_array().map(Vec::len), Some(4), "{}", answer.body);

    let reads = written(&app, "bot", "resources/read", 2).await;
    // Newest first: the missing one was handled after the other.
    assert_eq!(reads[1]["target"], "test://a");
    assert_eq!(reads[1]["outcome"], "ok");
    assert!(reads[1]["bytesOut"].as_i64().is_some_and(|bytes| bytes > 0), "{}", reads[1]);
    assert_eq!(reads[0]["target"], "test://missing");
    assert_eq!((reads[0]["outcome"].clone(), reads[0]["errorCode"].clone()), (json!("error"), json!(-32002)));
    let prompt = &written(&app, "bot", "prompts/get", 1).await[0];
    assert_eq!((prompt["target"].clone(), prompt["outcome"].clone()), (json!("absent"), json!("error")));
    let notification = &written(&app, "bot", "notifications/initialized", 1).await[0];
    assert_eq!((notification["outcome"].clone(), notification["bytesOut"].clone()), (json!("ok"), json!(0)));
    let ping = &written(&app, "bot", "ping", 1).await[0];
    assert_eq!(ping["outcome"], "ok");
    for record in reads.iter().chain([prompt, notification, ping]) {
        assert_eq!(record["userAgent"], "batcher/1", "what the request shares, every record has: {record}");
        assert_eq!(record["actor"], reads[0]["actor"], "{record}");
        assert!(record["latencyUs"].as_i64().is_some(), "{record}");
    }
    // No record for the batch as such.
    let response = app.op(Method::GET, "/admin/v1/audit").query(&[("agent", "bot"), ("method", "batch")]);
    let page = expect_json(response.send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(page["items"], json!([]));
}

async fn non_ascii_user_agents_are_kept(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    // UTF-8 "Ünï\bot" (HTTP carries it as opaque bytes): kept with those bytes and the backslash escaped.
    let user_agent = HeaderValue::from_bytes("Ünï\\bot/1.0".as_bytes()).expect("obs-text is a valid value");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let response = mcp.post().header("user-agent", user_agent).json(&body).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    // A plain one is kept as sent, backslash and all.
    let response = mcp.post().header("user-agent", "plain\\agent/2").json(&body).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let records = written(&app, "bot", "ping", 2).await;
    assert_eq!(records[1]["userAgent"], "\\xc3\\x9cn\\xc3\\xaf\\\\bot/1.0");
    assert_eq!(records[0]["userAgent"], "plain\\agent/2");
}
