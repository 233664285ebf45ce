use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{
    Api, Backend, expect_json, expect_problem, expect_problem_in, expect_status, is_unset, spawn_app, str_of, timestamp,
};

both!(agents_crud, agent_create_errors, agent_patch_is_merge_patch, agent_delete_removes_keys_and_registry);

async fn agents_crud(backend: Backend) {
    let app = spawn_app(backend).await;

    let response = app
        .op(Method::POST, "/admin/v1/agents")
        .json(&json!({
            "id": "research-bot",
            "name": "Research Assistant",
            "description": "Finds papers",
            "rateLimit": {"requestsPerSecond": 50, "burst": 100},
            "cacheTtlMs": 60000
        }))
        .send()
        .await
        .unwrap();
    let created = expect_json(response, StatusCode::CREATED).await;
    assert_eq!(created["id"], "research-bot");
    assert_eq!(created["name"], "Research Assistant");
    assert_eq!(created["description"], "Finds papers");
    assert_eq!(created["rateLimit"], json!({"requestsPerSecond": 50, "burst": 100}));
    assert_eq!(created["cacheTtlMs"], 60000);
    let created_at = timestamp(&created, "createdAt");
    let updated_at = timestamp(&created, "updatedAt");
    assert!(updated_at >= created_at);
    assert!((chrono::Utc::now() - created_at).num_seconds().abs() < 60, "createdAt is not now: {created}");

    // Optional members not given are unset.
    let minimal = app.create_agent("minimal").await;
    assert_eq!(minimal["name"], "Agent minimal");
    for member in ["description", "rateLimit", "cacheTtlMs"] {
        assert!(is_unset(&minimal, member), "`{member}` should be unset: {minimal}");
    }

    // Get.
    let response = app.op(Method::GET, "/admin/v1/agents/research-bot").send().await.unwrap();
    let fetched = expect_json(response, StatusCode::OK).await;
    assert_eq!(fetched, created);

    // List, ordered by id.
    let response = app.op(Method::GET, "/admin/v1/agents").send().await.unwrap();
    let list = expect_json(response, StatusCode::OK).await;
    let ids: Vec<&str> = list["items"].as_array().unwrap().iter().map(|a| str_of(a, "id")).collect();
    assert_eq!(ids, ["minimal", "research-bot"]);
    assert!(list.get("nextCursor").is_none(), "a single page has no nextCursor: {list}");
    assert_eq!(list["items"][1], created);

    // Get an absent agent.
    let response = app.op(Method::GET, "/admin/v1/agents/nobody").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;

    // Delete: 204, then absent everywhere.
    let response = app.op(Method::DELETE, "/admin/v1/agents/research-bot").send().await.unwrap();
    let body = expect_status(response, StatusCode::NO_CONTENT).await;
    assert!(body.is_empty(), "204 with a body: {body}");
    let response = app.op(Method::GET, "/admin/v1/agents/research-bot").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
    let response = app.op(Method::DELETE, "/admin/v1/agents/research-bot").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
    let response = app.op(Method::PATCH, "/admin/v1/agents/research-bot").json(&json!({"name": "x"})).send().await;
    expect_problem(response.unwrap(), StatusCode::NOT_FOUND).await;
    let response = app.op(Method::GET, "/admin/v1/agents").send().await.unwrap();
    let list = expect_json(response, StatusCode::OK).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1);

    // The id can be used again after deletion.
    app.create_agent("research-bot").await;
}

async fn agent_create_errors(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("taken").await;

    let post = |body: Value| app.op(Method::POST, "/admin/v1/agents").json(&body).send();

    // Duplicate id.
    let response = post(json!({"id": "taken", "name": "Again"})).await.unwrap();
    expect_problem(response, StatusCode::CONFLICT).await;

    // Ids that do not match the pattern, and reserved ids.
    let long = "a".repeat(64);
    for id in ["Upper", "-dash-first", "_underscore-first", "has space", "dot.ted", "", "ünï", long.as_str()] {
        let response = post(json!({"id": id, "name": "x"})).await.unwrap();
        let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
        assert!(!str_of(&problem, "detail").is_empty());
    }
    for id in ["admin", "healthz", "readyz", "metrics", "static"] {
        let response = post(json!({"id": id, "name": "x"})).await.unwrap();
        expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    }
    // The longest valid id is accepted.
    let longest = "a".repeat(63);
    let response = post(json!({"id": longest, "name": "x"})).await.unwrap();
    expect_json(response, StatusCode::CREATED).await;

    // Unparsable JSON.
    let response = app
        .op(Method::POST, "/admin/v1/agents")
        .header("content-type", "application/json")
        .body(r#"{"id": "broken", "name": "#)
        .send()
        .await
        .unwrap();
    expect_problem(response, StatusCode::BAD_REQUEST).await;

    // Wrong types.
    for body in [
        json!({"id": "typed", "name": 5}),
        json!({"id": 7, "name": "x"}),
        json!({"id": "typed", "name": "x", "cacheTtlMs": "soon"}),
        json!({"id": "typed", "name": "x", "rateLimit": "fast"}),
        json!("typed"),
    ] {
        let response = post(body.clone()).await.unwrap();
        expect_problem(response, StatusCode::BAD_REQUEST).await;
    }

    // Unknown fields, at the top and inside `rateLimit`.
    for body in [
        json!({"id": "unknown", "name": "x", "colour": "red"}),
        json!({"id": "unknown", "name": "x", "rateLimit": {"requestsPerSecond": 1, "burst": 1, "extra": 1}}),
    ] {
        let response = post(body).await.unwrap();
        expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    }

    // A missing required member is refused (the contract leaves 400 or 422 open).
    let response = post(json!({"id": "nameless"})).await.unwrap();
    expect_problem_in(response, &[StatusCode::BAD_REQUEST, StatusCode::UNPROCESSABLE_ENTITY]).await;

    // None of the refused requests created anything.
    let response = app.op(Method::GET, "/admin/v1/agents").send().await.unwrap();
    let list = expect_json(response, StatusCode::OK).await;
    let ids: Vec<&str> = list["items"].as_array().unwrap().iter().map(|a| str_of(a, "id")).collect();
    assert_eq!(ids, [longest.as_str(), "taken"]);
    let response = app.op(Method::GET, "/admin/v1/agents/taken").send().await.unwrap();
    assert_eq!(expect_json(response, StatusCode::OK).await["name"], "Agent taken");

    // An array where an object belongs is a wrong type too, even when its length fits the object's fields.
    for body in [json!(["array-agent", "x"]), json!({"id": "array-limit", "name": "x", "rateLimit": [1, 2]})] {
        let response = post(body).await.unwrap();
        expect_problem(response, StatusCode::BAD_REQUEST).await;
    }
    assert_eq!(app.list_all("/admin/v1/agents", None).await.len(), 2);
}

async fn agent_patch_is_merge_patch(backend: Backend) {
    let app = spawn_app(backend).await;
    let response = app
        .op(Method::POST, "/admin/v1/agents")
        .json(&json!({
            "id": "bot",
            "name": "Bot",
            "description": "Original",
            "rateLimit": {"requestsPerSecond": 5, "burst": 10},
            "cacheTtlMs": 1000
        }))
        .send()
        .await
        .unwrap();
    let created = expect_json(response, StatusCode::CREATED).await;

    let patch = |body: &'static str, content_type: &'static str| {
        app.op(Method::PATCH, "/admin/v1/agents/bot").header("content-type", content_type).body(body).send()
    };

    // Only the named member changes (sent as the merge-patch media type).
    let response = patch(r#"{"name": "Renamed"}"#, "application/merge-patch+json").await.unwrap();
    let patched = expect_json(response, StatusCode::OK).await;
    assert_eq!(patched["name"], "Renamed");
    assert_eq!(patched["description"], "Original");
    assert_eq!(patched["rateLimit"], created["rateLimit"]);
    assert_eq!(patched["cacheTtlMs"], 1000);
    assert_eq!(patched["createdAt"], created["createdAt"]);
    assert!(timestamp(&patched, "updatedAt") >= timestamp(&created, "updatedAt"));

    // null clears; a nested object is replaced (sent as plain JSON).
    let response =
        patch(r#"{"description": null, "rateLimit": {"requestsPerSecond": 1, "burst": 2}}"#, "application/json")
            .await
            .unwrap();
    let patched = expect_json(response, StatusCode::OK).await;
    assert!(is_unset(&patched, "description"), "description should be cleared: {patched}");
    assert_eq!(patched["rateLimit"], json!({"requestsPerSecond": 1, "burst": 2}));
    assert_eq!(patched["name"], "Renamed");

    let response = patch(r#"{"rateLimit": null, "cacheTtlMs": null}"#, "application/json").await.unwrap();
    let patched = expect_json(response, StatusCode::OK).await;
    assert!(is_unset(&patched, "rateLimit") && is_unset(&patched, "cacheTtlMs"), "{patched}");

    // `rateLimit` merges like any object of a merge-patch: the members given replace, the others stay. Into no
    // limit at all, a partial one is refused; a null member, or 0, is refused; nothing changes on a refusal.
    let response = patch(r#"{"rateLimit": {"burst": 7}}"#, "application/json").await.unwrap();
    let detail = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await["detail"].to_string();
    assert!(detail.contains("requestsPerSecond and burst"), "{detail}");
    let full = r#"{"rateLimit": {"requestsPerSecond": 3, "burst": 6}}"#;
    expect_json(patch(full, "application/json").await.unwrap(), StatusCode::OK).await;
    let response = patch(r#"{"rateLimit": {"burst": 9}}"#, "application/json").await.unwrap();
    let patched = expect_json(response, StatusCode::OK).await;
    assert_eq!(patched["rateLimit"], json!({"requestsPerSecond": 3, "burst": 9}));
    for invalid in [r#"{"rateLimit": {"burst": null}}"#, r#"{"rateLimit": {"requestsPerSecond": 0}}"#] {
        expect_problem(patch(invalid, "application/json").await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY).await;
    }
    let response = app.op(Method::GET, "/admin/v1/agents/bot").send().await.unwrap();
    assert_eq!(expect_json(response, StatusCode::OK).await["rateLimit"], json!({"requestsPerSecond": 3, "burst": 9}));
    let response = patch(r#"{"rateLimit": null}"#, "application/json").await.unwrap();
    assert!(is_unset(&expect_json(response, StatusCode::OK).await, "rateLimit"));

    // An empty patch changes nothing.
    let response = patch("{}", "application/json").await.unwrap();
    let unchanged = expect_json(response, StatusCode::OK).await;
    assert_eq!(unchanged["name"], "Renamed");

    // The change is stored.
    let response = app.op(Method::GET, "/admin/v1/agents/bot").send().await.unwrap();
    let fetched = expect_json(response, StatusCode::OK).await;
    assert_eq!(fetched["name"], "Renamed");
    assert!(is_unset(&fetched, "description") && is_unset(&fetched, "rateLimit"), "{fetched}");

    // Errors change nothing.
    let response = patch(r#"{"name": "#, "application/json").await.unwrap();
    expect_problem(response, StatusCode::BAD_REQUEST).await;
    let response = patch(r#"{"name": 5}"#, "application/json").await.unwrap();
    expect_problem(response, StatusCode::BAD_REQUEST).await;
    let response = patch(r#"{"colour": "red"}"#, "application/json").await.unwrap();
    expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    let response = app.op(Method::GET, "/admin/v1/agents/bot").send().await.unwrap();
    assert_eq!(expect_json(response, StatusCode::OK).await["name"], "Renamed");

    let response = app.op(Method::PATCH, "/admin/v1/agents/absent").json(&json!({"name": "x"})).send().await;
    expect_problem(response.unwrap(), StatusCode::NOT_FOUND).await;
}

async fn agent_delete_removes_keys_and_registry(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("doomed").await;
    let key = app.issue_key("doomed", &["registry"]).await;
    app.put_text("doomed", "test://doomed/a", "content").await;
    let response = app.with_key(Method::GET, "/admin/v1/agents/doomed/resources", &key.key).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;

    let response = app.op(Method::DELETE, "/admin/v1/agents/doomed").send().await.unwrap();
    expect_status(response, StatusCode::NO_CONTENT).await;

    // Its key stops working at once, and its registry is gone with it.
    let response = app.with_key(Method::GET, "/admin/v1/agents/doomed/resources", &key.key).send().await.unwrap();
    expect_problem(response, StatusCode::UNAUTHORIZED).await;
    let response = app.op(Method::GET, "/admin/v1/agents/doomed/resources").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
    let response = app.op(Method::GET, "/admin/v1/agents/doomed/keys").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;

    // Re-created under the same id, it starts empty and the old key stays dead.
    app.create_agent("doomed").await;
    let items = app.list_all("/admin/v1/agents/doomed/resources", None).await;
    assert!(items.is_empty(), "a re-created agent inherited resources: {items:?}");
    let keys = app.list_all("/admin/v1/agents/doomed/keys", None).await;
    assert!(keys.is_empty(), "a re-created agent inherited keys: {keys:?}");
    let response = app.with_key(Method::GET, "/admin/v1/agents/doomed/resources", &key.key).send().await.unwrap();
    expect_problem(response, StatusCode::UNAUTHORIZED).await;
}
