use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::helpers::{Api, Backend, expect_json, expect_problem, expect_problem_in, expect_status, spawn_app};

both!(health_and_readiness, openapi_document, unknown_endpoints, audit_log, request_ids);

async fn health_and_readiness(backend: Backend) {
    let app = spawn_app(backend).await;
    // No credentials needed.
    expect_status(app.anon(Method::GET, "/healthz").send().await.unwrap(), StatusCode::OK).await;
    expect_status(app.anon(Method::GET, "/readyz").send().await.unwrap(), StatusCode::OK).await;
}

/// Every answer, refusals and unknown paths included, carries a request id: the client's, else a new UUID.
async fn request_ids(backend: Backend) {
    let app = spawn_app(backend).await;
    let id_of = |response: &reqwest::Response| {
        response.headers().get("x-request-id").and_then(|v| v.to_str().ok()).map(str::to_owned)
    };
    let mut generated = Vec::new();
    for path in ["/healthz", "/no/such/endpoint", "/admin/v1/agents"] {
        let response = app.anon(Method::GET, path).send().await.unwrap();
        let id = id_of(&response).unwrap_or_else(|| panic!("{path}: no x-request-id"));
        assert!(uuid::Uuid::parse_str(&id).is_ok_and(|id| id.get_version_num() == 4), "{path}: {id}");
        generated.push(id);
        let response = app.anon(Method::GET, path).header("x-request-id", "client-chosen-7").send().await.unwrap();
        assert_eq!(id_of(&response).as_deref(), Some("client-chosen-7"), "{path}");
    }
    generated.sort();
    generated.dedup();
    assert_eq!(generated.len(), 3, "ids repeat: {generated:?}");
    // A request refused for its header fields (431) is answered with its id too.
    let response = app
        .anon(Method::GET, "/healthz")
        .header("x-request-id", "client-chosen-8")
        .header("x-filler", "a".repeat(64 * 1024))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert_eq!(id_of(&response).as_deref(), Some("client-chosen-8"));
}

/// A path of the document with its parameter names erased: `/a/{agent_id}` and `/a/{agentId}` are one path.
fn shape(path: &str) -> String {
    let mut out = String::new();
    let mut in_param = false;
    for c in path.chars() {
        match c {
            '{' => {
                in_param = true;
                out.push_str("{}");
            }
            '}' => in_param = false,
            _ if in_param => {}
            _ => out.push(c),
        }
    }
    out
}

async fn openapi_document(backend: Backend) {
    let app = spawn_app(backend).await;
    let response = app.op(Method::GET, "/admin/v1/openapi.json").send().await.unwrap();
    let document = expect_json(response, StatusCode::OK).await;
    let version = document["openapi"].as_str().unwrap_or_else(|| panic!("no `openapi` member: {document}"));
    assert!(version.starts_with("3.1"), "OpenAPI version {version}");
    assert!(document["info"]["title"].is_string() && document["info"]["version"].is_string());

    let paths = document["paths"].as_object().unwrap_or_else(|| panic!("no `paths`: {document}"));
    assert!(paths.contains_key("/admin/v1/agents"), "paths: {:?}", paths.keys().collect::<Vec<_>>());
    let shapes: Vec<String> = paths.keys().map(|p| shape(p)).collect();
    let expected = [
        ("/admin/v1/agents", &["get", "post"][..]),
        ("/admin/v1/agents/{}", &["get", "patch", "delete"]),
        ("/admin/v1/agents/{}/keys", &["get", "post"]),
        ("/admin/v1/agents/{}/keys/{}", &["delete"]),
        ("/admin/v1/agents/{}/resources", &["get", "put", "delete"]),
        ("/admin/v1/agents/{}/resources/content", &["get"]),
        ("/admin/v1/agents/{}/resources/batch", &["post"]),
        ("/admin/v1/agents/{}/resource-templates", &["get", "put", "delete"]),
        ("/admin/v1/agents/{}/prompts", &["get"]),
        ("/admin/v1/agents/{}/prompts/{}", &["get", "put", "delete"]),
        ("/admin/v1/audit", &["get"]),
    ];
    for (path, methods) in expected {
        let index =
            shapes.iter().position(|s| s == path).unwrap_or_else(|| panic!("the document lacks {path}: {shapes:?}"));
        let item: &Value = paths.values().nth(index).unwrap();
        for method in methods {
            assert!(item.get(*method).is_some(), "the document lacks {method} {path}");
        }
    }
}

async fn unknown_endpoints(backend: Backend) {
    let app = spawn_app(backend).await;
    let response = app.op(Method::GET, "/admin/v1/nothing-here").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
    let response = app.op(Method::GET, "/admin/v2/agents").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
}

async fn audit_log(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;
    app.put_text("bot", "test://a", "a").await;

    // Admin changes are recorded in their own transaction: present at once, newest first, with their fields.
    let response = app.op(Method::GET, "/admin/v1/audit").send().await.unwrap();
    let page = expect_json(response, StatusCode::OK).await;
    let items = page["items"].as_array().unwrap_or_else(|| panic!("no `items`: {page}")).clone();
    let actions: Vec<&str> = items.iter().map(|r| r["action"].as_str().unwrap_or_default()).collect();
    assert_eq!(actions, ["resource.put", "agent.create"], "newest first: {page}");
    assert_eq!(items[0]["actor"], "operator");
    assert_eq!(items[0]["target"], "test://a");
    assert_eq!(items[0]["agentId"], "bot");
    assert_eq!(items[0]["kind"], "admin");
    assert!(items[0]["beforeDigest"].is_null() && items[0]["afterDigest"].is_string(), "{page}");

    // Filters narrow; empty parameters (the contract's `?agent=&since=&...` template) mean "no filter".
    let query = |pairs: Vec<(&'static str, String)>| {
        let app = &app;
        async move {
            let response = app.op(Method::GET, "/admin/v1/audit").query(&pairs).send().await.unwrap();
            let page = expect_json(response, StatusCode::OK).await;
            page["items"].as_array().map(Vec::len).unwrap_or_default()
        }
    };
    let empty = ["agent", "since", "until", "method", "cursor"].map(|name| (name, String::new()));
    assert_eq!(query(empty.to_vec()).await, 2);
    assert_eq!(query(vec![("method", "resource.put".to_owned())]).await, 1);
    assert_eq!(query(vec![("agent", "bot".to_owned())]).await, 2);
    assert_eq!(query(vec![("since", "2999-01-01T00:00:00Z".to_owned())]).await, 0);
    assert_eq!(query(vec![("until", "2999-01-01T00:00:00Z".to_owned())]).await, 2);
    assert_eq!(query(vec![("until", "2000-01-01T00:00:00Z".to_owned())]).await, 0);

    // Filtered by an agent that never existed: nothing.
    let response = app.op(Method::GET, "/admin/v1/audit").query(&[("agent", "nobody")]).send().await.unwrap();
    let page = expect_json(response, StatusCode::OK).await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(0), "{page}");

    // Only the operator may read it.
    let response = app.anon(Method::GET, "/admin/v1/audit").send().await.unwrap();
    expect_problem(response, StatusCode::UNAUTHORIZED).await;
    for scopes in [&["registry"][..], &["mcp"], &["mcp", "registry"]] {
        let key = app.issue_key("bot", scopes).await;
        let response = app.with_key(Method::GET, "/admin/v1/audit", &key.key).send().await.unwrap();
        expect_problem(response, StatusCode::FORBIDDEN).await;
    }

    // Paginated like every list.
    let pages = app.list_pages("/admin/v1/audit", Some(1)).await;
    assert!(pages.len() >= 2, "one record per page: {pages:?}");

    // Bad filters.
    for (name, value) in [("limit", "0"), ("limit", "1001"), ("since", "yesterday"), ("until", "later")] {
        let response = app.op(Method::GET, "/admin/v1/audit").query(&[(name, value)]).send().await.unwrap();
        expect_problem_in(response, &[StatusCode::BAD_REQUEST, StatusCode::UNPROCESSABLE_ENTITY]).await;
    }
    let response = app.op(Method::GET, "/admin/v1/audit").query(&[("cursor", "garbage")]).send().await.unwrap();
    expect_problem(response, StatusCode::BAD_REQUEST).await;
}
