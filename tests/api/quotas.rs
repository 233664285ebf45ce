//! What an agent, and the gateway, may hold: a change over a quota is refused and changes nothing.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Api, Backend, TestApp, expect_json, expect_problem, spawn_app_with, uris};

both!(quotas_refuse_and_change_nothing);

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
    let app = spawn_app_with(backend, |config| {
        config.limits.max_resources_per_agent = 3;
        config.limits.max_agent_bytes = 20;
        config.limits.max_total_bytes = 30;
        config.limits.max_templates_per_agent = 1;
        config.limits.max_prompts_per_agent = 1;
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
    // Replacing one with more bytes than the agent may hold: 413; the old content stays.
    let big = text("test://3", "123456789012345");
    let detail = problem_detail(app.put_resource("bot", &big).await, StatusCode::PAYLOAD_TOO_LARGE).await;
    assert!(detail.contains("limits.max_agent_bytes"), "{detail}");
    let read = expect_json(app.get_content("bot", "test://3").await, StatusCode::OK).await;
    assert_eq!(read["text"], "12345");
    // A batch that ends over the quota is refused whole, even when it deletes too.
    let batch = json!({"upsert": [text("test://4", "a"), text("test://5", "b")], "delete": ["test://1"]});
    let response = app.op(Method::POST, &format!("{resources}/batch")).json(&batch).send().await.unwrap();
    expect_problem(response, StatusCode::CONFLICT).await;
    assert_eq!(uris(&app.list_all(resources, None).await), ["test://1", "test://2", "test://3"]);
    assert_eq!(event_count(&app).await, events, "a refused change makes no event");
    // Within the quota again after a delete; a batch that stays within it passes.
    let batch = json!({"upsert": [text("test://4", "a")], "delete": ["test://1"]});
    let response = app.op(Method::POST, &format!("{resources}/batch")).json(&batch).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;

    // The gateway's total: another agent cannot take it over 30 bytes (bot holds 11).
    app.create_agent("other").await;
    let detail = problem_detail(
        app.put_resource("other", &text("test://x", &"y".repeat(20))).await,
        StatusCode::PAYLOAD_TOO_LARGE,
    )
    .await;
    assert!(detail.contains("limits.max_total_bytes"), "{detail}");
    app.put_text("other", "test://x", &"y".repeat(19)).await;

    // One template and one prompt each: a second is refused, replacing the first is not.
    let template = |uri_template: &str| json!({"uriTemplate": uri_template, "name": "t"});
    let path = "/admin/v1/agents/bot/resource-templates";
    let response = app.op(Method::PUT, path).json(&template("t://{a}")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let response = app.op(Method::PUT, path).json(&template("t://{b}")).send().await.unwrap();
    let detail = problem_detail(response, StatusCode::CONFLICT).await;
    assert!(detail.contains("limits.max_templates_per_agent"), "{detail}");
    let response = app.op(Method::PUT, path).json(&template("t://{a}")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let prompt = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]});
    let response = app.op(Method::PUT, "/admin/v1/agents/bot/prompts/first").json(&prompt).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let response = app.op(Method::PUT, "/admin/v1/agents/bot/prompts/second").json(&prompt).send().await.unwrap();
    let detail = problem_detail(response, StatusCode::CONFLICT).await;
    assert!(detail.contains("limits.max_prompts_per_agent"), "{detail}");
    let response = app.op(Method::GET, "/admin/v1/agents/bot/prompts/second").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
}
