//! What an agent, and the gateway, may hold: a change over a quota is refused and changes nothing.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Api, Backend, TestApp, expect_json, expect_problem, spawn_app_with, uris};

both!(quotas_refuse_and_change_nothing, byte_quotas_count_every_stored_byte);

async fn problem_detail(response: reqwest::Response, status: StatusCode) -> String {
    expect_problem(response, status).await["detail"].as_str().unwrap_or_default().to_owned()
}

fn text(uri: &str, text: &str) -> Value {
    json!({"uri": uri, "name": uri, "text": text})
}

async fn event_count(app: &TestApp) -> i64 {
    app.db.count("select count(*) from event").await
}

async fn quotas_refuse_and_change_nothing(backend: Backend) {
    // Every stored byte counts: agent `bot` ("Agent bot", 9 bytes) and each `test://N` resource named by its
    // URI with 5 bytes of text (8 + 8 + 5 = 21 bytes) hold 72 bytes together.
    let app = spawn_app_with(backend, |config| {
        config.limits.max_resources_per_agent = 3;
        config.limits.max_agent_bytes = 80;
        config.limits.max_total_bytes = 120;
    })
    .await;
    let resources = "/admin/v1/agents/bot/resources";
    app.create_agent("bot").await;
    for uri in ["test://1", "test://2", "test://3"] {
        app.put_text("bot", uri, "12345").await;
    }
    let events = event_count(&app).await;

    // A fourth resource: 409, naming the limit.
    let detail = problem_detail(app.put_resource("bot", &text("test://4", "x")).await, StatusCode::CONFLICT).await;
    assert!(detail.contains("limits.max_resources_per_agent"), "{detail}");
    // Replacing one with more bytes than the agent may hold (72 - 5 + 15 = 82): 413; the old content stays.
    let big = text("test://3", "123456789012345");
    let detail = problem_detail(app.put_resource("bot", &big).await, StatusCode::PAYLOAD_TOO_LARGE).await;
    assert!(detail.contains("limits.max_agent_bytes") && detail.contains("82 bytes"), "{detail}");
    let read = expect_json(app.get_content("bot", "test://3").await, StatusCode::OK).await;
    assert_eq!(read["text"], "12345");
    // A batch that ends over the quota is refused whole, even when it deletes too.
    let batch = json!({"upsert": [text("test://4", "a"), text("test://5", "b")], "delete": ["test://1"]});
    let response = app.op(Method::POST, &format!("{resources}/batch")).json(&batch).send().await.unwrap();
    expect_problem(response, StatusCode::CONFLICT).await;
    assert_eq!(uris(&app.list_all(resources, None).await), ["test://1", "test://2", "test://3"]);
    assert_eq!(event_count(&app).await, events, "a refused change makes no event");
    // Within the quota again after a delete (72 - 21 + 17 = 68); a batch that stays within it passes.
    let batch = json!({"upsert": [text("test://4", "a")], "delete": ["test://1"]});
    let response = app.op(Method::POST, &format!("{resources}/batch")).json(&batch).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;

    // The gateway's total: another agent ("Agent other", 11 bytes; 79 in all) cannot take it over 120 bytes.
    app.create_agent("other").await;
    let detail = problem_detail(
        app.put_resource("other", &text("test://x", &"y".repeat(26))).await,
        StatusCode::PAYLOAD_TOO_LARGE,
    )
    .await;
    assert!(detail.contains("limits.max_total_bytes") && detail.contains("121 bytes"), "{detail}");
    app.put_text("other", "test://x", &"y".repeat(25)).await;
}

/// Templates, prompts and the agent's own fields count against the byte quota too, and the count quotas of
/// templates and prompts hold.
async fn byte_quotas_count_every_stored_byte(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        config.limits.max_agent_bytes = 200;
        config.limits.max_templates_per_agent = 1;
        config.limits.max_prompts_per_agent = 1;
    })
    .await;
    app.create_agent("bot").await;

    // One template and one prompt each: a second is refused, replacing the first is not.
    let template = |uri_template: &str, text: &str| json!({"uriTemplate": uri_template, "name": "t", "text": text});
    let path = "/admin/v1/agents/bot/resource-templates";
    let response = app.op(Method::PUT, path).json(&template("t://{a}", "")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let response = app.op(Method::PUT, path).json(&template("t://{b}", "")).send().await.unwrap();
    let detail = problem_detail(response, StatusCode::CONFLICT).await;
    assert!(detail.contains("limits.max_templates_per_agent"), "{detail}");
    // A template's text is stored bytes: "Agent bot" (9) + "t://{a}" (7) + "t" (1) + 184 = 201.
    let response = app.op(Method::PUT, path).json(&template("t://{a}", &"z".repeat(184))).send().await.unwrap();
    let detail = problem_detail(response, StatusCode::PAYLOAD_TOO_LARGE).await;
    assert!(detail.contains("limits.max_agent_bytes") && detail.contains("201 bytes"), "{detail}");
    let response = app.op(Method::PUT, path).json(&template("t://{a}", &"z".repeat(100))).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    // A prompt's messages are stored bytes: 117 so far, and this one would add more than 83.
    let prompt = |text: &str| json!({"messages": [{"role": "user", "content": {"type": "text", "text": text}}]});
    let prompts = "/admin/v1/agents/bot/prompts";
    let response =
        app.op(Method::PUT, &format!("{prompts}/first")).json(&prompt(&"p".repeat(60))).send().await.unwrap();
    let detail = problem_detail(response, StatusCode::PAYLOAD_TOO_LARGE).await;
    assert!(detail.contains("limits.max_agent_bytes"), "{detail}");
    let response = app.op(Method::PUT, &format!("{prompts}/first")).json(&prompt("hi")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let response = app.op(Method::PUT, &format!("{prompts}/second")).json(&prompt("hi")).send().await.unwrap();
    let detail = problem_detail(response, StatusCode::CONFLICT).await;
    assert!(detail.contains("limits.max_prompts_per_agent"), "{detail}");
    let response = app.op(Method::GET, &format!("{prompts}/second")).send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;

    // The agent's own description counts as well; a refused patch changes nothing.
    let agent = "/admin/v1/agents/bot";
    let response = app.op(Method::PATCH, agent).json(&json!({"description": "d".repeat(100)})).send().await.unwrap();
    let detail = problem_detail(response, StatusCode::PAYLOAD_TOO_LARGE).await;
    assert!(detail.contains("limits.max_agent_bytes"), "{detail}");
    let current = expect_json(app.op(Method::GET, agent).send().await.unwrap(), StatusCode::OK).await;
    assert!(current["description"].is_null(), "{current}");
}
