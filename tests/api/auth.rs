use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{Api, Backend, expect_json, expect_problem, expect_status, spawn_app};

both!(
    credentials_are_required,
    registry_key_manages_its_own_agent_only,
    mcp_key_cannot_use_the_admin_api,
    revoked_key_is_refused_at_once,
    expired_key_is_refused
);

/// Every admin endpoint but the audit log (see `health::audit_log`), as (method, path, body).
fn every_endpoint() -> Vec<(Method, &'static str, Option<serde_json::Value>)> {
    let resource = json!({"uri": "test://a", "name": "a", "text": "a"});
    vec![
        (Method::GET, "/admin/v1/agents", None),
        (Method::POST, "/admin/v1/agents", Some(json!({"id": "new", "name": "x"}))),
        (Method::GET, "/admin/v1/agents/bot", None),
        (Method::PATCH, "/admin/v1/agents/bot", Some(json!({"name": "x"}))),
        (Method::DELETE, "/admin/v1/agents/bot", None),
        (Method::POST, "/admin/v1/agents/bot/keys", Some(json!({}))),
        (Method::GET, "/admin/v1/agents/bot/keys", None),
        (Method::DELETE, "/admin/v1/agents/bot/keys/some-key", None),
        (Method::PUT, "/admin/v1/agents/bot/resources", Some(resource.clone())),
        (Method::GET, "/admin/v1/agents/bot/resources", None),
        (Method::GET, "/admin/v1/agents/bot/resources/content?uri=test://a", None),
        (Method::DELETE, "/admin/v1/agents/bot/resources?uri=test://a", None),
        (Method::POST, "/admin/v1/agents/bot/resources/batch", Some(json!({"upsert": [resource]}))),
        (Method::PUT, "/admin/v1/agents/bot/resource-templates", Some(json!({"uriTemplate": "t://{x}", "name": "t"}))),
        (Method::GET, "/admin/v1/agents/bot/resource-templates", None),
        (Method::DELETE, "/admin/v1/agents/bot/resource-templates?uriTemplate=t://{x}", None),
        (
            Method::PUT,
            "/admin/v1/agents/bot/prompts/p",
            Some(json!({"messages": [{"role": "user", "content": {"type": "text", "text": "x"}}]})),
        ),
        (Method::GET, "/admin/v1/agents/bot/prompts", None),
        (Method::GET, "/admin/v1/agents/bot/prompts/p", None),
        (Method::DELETE, "/admin/v1/agents/bot/prompts/p", None),
        (Method::GET, "/admin/v1/agents/absent/resources", None),
    ]
}

async fn credentials_are_required(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;
    app.put_text("bot", "test://a", "a").await;
    let registry = app.issue_key("bot", &["registry"]).await;

    for (method, path, body) in every_endpoint() {
        let attempts = [
            ("no credentials", app.anon(method.clone(), path)),
            ("wrong operator token", app.anon(method.clone(), path).bearer_auth("not-the-operator-token-at-all")),
            ("a malformed key", app.anon(method.clone(), path).header("x-agent-api-key", "nonsense")),
            (
                "an unknown key",
                app.anon(method.clone(), path).header("x-agent-api-key", format!("bak_{}", "A".repeat(43))),
            ),
            // On the admin API `Authorization` only ever carries the operator token, never an agent key.
            ("a key as bearer", app.anon(method.clone(), path).bearer_auth(&registry.key)),
            ("basic auth", app.anon(method.clone(), path).basic_auth("operator", Some(crate::helpers::OPERATOR_TOKEN))),
        ];
        for (case, request) in attempts {
            let request = match &body {
                Some(body) => request.json(body),
                None => request,
            };
            let response = request.send().await.unwrap();
            let challenge = response
                .headers()
                .get(reqwest::header::WWW_AUTHENTICATE)
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_else(|| panic!("{method} {path} ({case}): 401 without WWW-Authenticate"));
            assert_eq!(challenge, r#"Bearer realm="hivegate""#, "{method} {path} ({case})");
            expect_problem(response, StatusCode::UNAUTHORIZED).await;
        }
    }

    // Nothing changed.
    let response = app.op(Method::GET, "/admin/v1/agents/bot").send().await.unwrap();
    assert_eq!(expect_json(response, StatusCode::OK).await["name"], "Agent bot");
    assert_eq!(app.list_all("/admin/v1/agents", None).await.len(), 1);
    assert_eq!(app.list_all("/admin/v1/agents/bot/keys", None).await.len(), 1);
    assert_eq!(app.list_all("/admin/v1/agents/bot/resources", None).await.len(), 1);
}

async fn registry_key_manages_its_own_agent_only(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;
    app.create_agent("other").await;
    app.put_text("other", "test://other", "theirs").await;
    let key = app.issue_key("bot", &["registry"]).await.key;
    let call = |method: Method, path: &str| app.with_key(method, path, &key);

    // Its own agent's resources, templates and prompts: everything.
    let resource = json!({"uri": "test://mine", "name": "mine", "text": "v1"});
    let response = call(Method::PUT, "/admin/v1/agents/bot/resources").json(&resource).send().await.unwrap();
    expect_json(response, StatusCode::CREATED).await;
    let response = call(Method::PUT, "/admin/v1/agents/bot/resources").json(&resource).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    let response = call(Method::GET, "/admin/v1/agents/bot/resources").send().await.unwrap();
    assert_eq!(expect_json(response, StatusCode::OK).await["items"][0]["uri"], "test://mine");
    let response =
        call(Method::GET, "/admin/v1/agents/bot/resources/content").query(&[("uri", "test://mine")]).send().await;
    assert_eq!(expect_json(response.unwrap(), StatusCode::OK).await["text"], "v1");
    let batch = json!({"upsert": [{"uri": "test://batched", "name": "b", "text": "b"}], "delete": ["test://mine"]});
    let response = call(Method::POST, "/admin/v1/agents/bot/resources/batch").json(&batch).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    let response =
        call(Method::DELETE, "/admin/v1/agents/bot/resources").query(&[("uri", "test://batched")]).send().await;
    expect_status(response.unwrap(), StatusCode::NO_CONTENT).await;

    let template = json!({"uriTemplate": "test://{id}", "name": "t", "text": "{{ id }}"});
    let response = call(Method::PUT, "/admin/v1/agents/bot/resource-templates").json(&template).send().await;
    expect_json(response.unwrap(), StatusCode::CREATED).await;
    let response = call(Method::GET, "/admin/v1/agents/bot/resource-templates").send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    let response = call(Method::DELETE, "/admin/v1/agents/bot/resource-templates")
        .query(&[("uriTemplate", "test://{id}")])
        .send()
        .await;
    expect_status(response.unwrap(), StatusCode::NO_CONTENT).await;

    let prompt = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]});
    let response = call(Method::PUT, "/admin/v1/agents/bot/prompts/hello").json(&prompt).send().await.unwrap();
    expect_json(response, StatusCode::CREATED).await;
    let response = call(Method::GET, "/admin/v1/agents/bot/prompts").send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    let response = call(Method::GET, "/admin/v1/agents/bot/prompts/hello").send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    let response = call(Method::DELETE, "/admin/v1/agents/bot/prompts/hello").send().await.unwrap();
    expect_status(response, StatusCode::NO_CONTENT).await;

    // Anything else: 403, and nothing changes.
    let forbidden: Vec<(Method, &str, Option<serde_json::Value>)> = vec![
        // Another agent's registry.
        (Method::GET, "/admin/v1/agents/other/resources", None),
        (Method::GET, "/admin/v1/agents/other/resources/content?uri=test://other", None),
        (Method::PUT, "/admin/v1/agents/other/resources", Some(json!({"uri": "test://x", "name": "x", "text": "x"}))),
        (Method::DELETE, "/admin/v1/agents/other/resources?uri=test://other", None),
        (Method::POST, "/admin/v1/agents/other/resources/batch", Some(json!({"delete": ["test://other"]}))),
        (
            Method::PUT,
            "/admin/v1/agents/other/resource-templates",
            Some(json!({"uriTemplate": "t://{x}", "name": "t"})),
        ),
        (Method::GET, "/admin/v1/agents/other/resource-templates", None),
        (Method::GET, "/admin/v1/agents/other/prompts", None),
        (Method::PUT, "/admin/v1/agents/other/prompts/p", Some(prompt.clone())),
        // A registry that does not exist.
        (Method::GET, "/admin/v1/agents/absent/resources", None),
        // Agents, including its own agent record.
        (Method::GET, "/admin/v1/agents", None),
        (Method::POST, "/admin/v1/agents", Some(json!({"id": "spawned", "name": "x"}))),
        (Method::GET, "/admin/v1/agents/bot", None),
        (Method::PATCH, "/admin/v1/agents/bot", Some(json!({"name": "hijacked"}))),
        (Method::DELETE, "/admin/v1/agents/bot", None),
        (Method::DELETE, "/admin/v1/agents/other", None),
        // Keys, including its own agent's.
        (Method::POST, "/admin/v1/agents/bot/keys", Some(json!({"scopes": ["registry"]}))),
        (Method::GET, "/admin/v1/agents/bot/keys", None),
        (Method::POST, "/admin/v1/agents/other/keys", Some(json!({}))),
        (Method::DELETE, "/admin/v1/agents/bot/keys/any", None),
    ];
    for (method, path, body) in forbidden {
        let mut request = call(method.clone(), path);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{method} {path}");
        expect_problem(response, StatusCode::FORBIDDEN).await;
    }

    let agents = app.list_all("/admin/v1/agents", None).await;
    assert_eq!(agents.len(), 2);
    assert_eq!(agents[0]["name"], "Agent bot");
    assert_eq!(app.list_all("/admin/v1/agents/bot/keys", None).await.len(), 1);
    let read = expect_json(app.get_content("other", "test://other").await, StatusCode::OK).await;
    assert_eq!(read["text"], "theirs");
    assert_eq!(app.list_all("/admin/v1/agents/other/resources", None).await.len(), 1);
    assert!(app.list_all("/admin/v1/agents/other/prompts", None).await.is_empty());
}

async fn mcp_key_cannot_use_the_admin_api(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;
    app.put_text("bot", "test://a", "a").await;
    let key = app.issue_key("bot", &["mcp"]).await.key;
    for (method, path, body) in every_endpoint() {
        let mut request = app.with_key(method.clone(), path, &key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{method} {path}");
        expect_problem(response, StatusCode::FORBIDDEN).await;
    }
    let read = expect_json(app.get_content("bot", "test://a").await, StatusCode::OK).await;
    assert_eq!(read["text"], "a");

    // A key with both scopes may manage the registry.
    let both = app.issue_key("bot", &["mcp", "registry"]).await.key;
    let response = app.with_key(Method::GET, "/admin/v1/agents/bot/resources", &both).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
}

async fn revoked_key_is_refused_at_once(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;
    let first = app.issue_key("bot", &["registry"]).await;
    let second = app.issue_key("bot", &["registry"]).await;
    let path = "/admin/v1/agents/bot/resources";

    // Used (and so cached) before the revocation …
    for key in [&first, &second] {
        let response = app.with_key(Method::GET, path, &key.key).send().await.unwrap();
        expect_json(response, StatusCode::OK).await;
    }
    app.revoke_key("bot", &first.id).await;
    // … refused on the very next request, with the challenge.
    let response = app.with_key(Method::GET, path, &first.key).send().await.unwrap();
    let challenge = response.headers().get(reqwest::header::WWW_AUTHENTICATE).map(|v| v.to_str().unwrap().to_owned());
    expect_problem(response, StatusCode::UNAUTHORIZED).await;
    assert_eq!(challenge.as_deref(), Some(r#"Bearer realm="hivegate""#));
    let response = app
        .with_key(Method::PUT, path, &first.key)
        .json(&json!({"uri": "test://x", "name": "x", "text": "x"}))
        .send()
        .await
        .unwrap();
    expect_problem(response, StatusCode::UNAUTHORIZED).await;
    assert!(app.list_all(path, None).await.is_empty());

    // The other key of the agent is unaffected.
    let response = app.with_key(Method::GET, path, &second.key).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
}

async fn expired_key_is_refused(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;
    let expires_at = chrono::Utc::now() + chrono::Duration::seconds(3);
    let response = app
        .op(Method::POST, "/admin/v1/agents/bot/keys")
        .json(&json!({"scopes": ["registry"], "expiresAt": expires_at.to_rfc3339()}))
        .send()
        .await
        .unwrap();
    let key = expect_json(response, StatusCode::CREATED).await["key"].as_str().unwrap().to_owned();
    let path = "/admin/v1/agents/bot/resources";

    let response = app.with_key(Method::GET, path, &key).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;

    // Expiry is a point in time, not an event: wait until it has passed, then the very next use is refused.
    let remaining = (expires_at - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(remaining + Duration::from_millis(100)).await;
    let response = app.with_key(Method::GET, path, &key).send().await.unwrap();
    expect_problem(response, StatusCode::UNAUTHORIZED).await;
}
