//! The OpenAPI document against the server it describes, the landing page and the API reference.
//!
//! The document's full validation and the property-based run are `openapi/run` (CI's `openapi` step); these
//! stories check what a client relies on first: every operation named once, the answers the server gives to
//! a sample of bad requests declared for their operation, and the pages that lead a newcomer to it.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Api, Backend, TestApp, content_type, expect_json, expect_problem, spawn_app, spawn_app_with};

both!(operation_ids_are_unique, bad_requests_are_declared, revoked_keys_do_not_change, landing_and_reference_pages);

const METHODS: [&str; 5] = ["get", "put", "post", "patch", "delete"];

async fn document(app: &TestApp) -> Value {
    expect_json(app.anon(Method::GET, "/admin/v1/openapi.json").send().await.unwrap(), StatusCode::OK).await
}

/// Every operation has an operationId, a camelCase verb and noun, and no two share one; the document names
/// the server it describes.
async fn operation_ids_are_unique(backend: Backend) {
    let app = spawn_app(backend).await;
    let document = document(&app).await;
    let mut ids = Vec::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for method in METHODS.iter().filter(|m| item.get(**m).is_some()) {
            let id = item[*method]["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path}: no operationId"));
            let camel = id.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                && id.chars().any(|c| c.is_ascii_uppercase())
                && id.chars().all(|c| c.is_ascii_alphanumeric());
            assert!(camel, "{method} {path}: operationId {id:?} is not a camelCase verb and noun");
            ids.push(id.to_owned());
        }
    }
    assert!(ids.len() >= 23, "{ids:?}");
    for expected in ["listKeys", "putResource", "createAgent", "patchKey", "listAudit"] {
        assert!(ids.iter().any(|id| id == expected), "no {expected} in {ids:?}");
    }
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "operationIds repeat: {ids:?}");
    assert_eq!(document["servers"][0]["url"], "/", "{}", document["servers"]);
}

/// The statuses `operation_id` declares.
fn declared(document: &Value, operation_id: &str) -> Vec<String> {
    let paths = document["paths"].as_object().expect("paths");
    let operation = paths
        .values()
        .flat_map(|item| METHODS.iter().filter_map(move |m| item.get(*m)))
        .find(|operation| operation["operationId"] == operation_id)
        .unwrap_or_else(|| panic!("no operation {operation_id}"));
    operation["responses"].as_object().expect("responses").keys().cloned().collect()
}

/// A sample of bad requests: each is refused with the status the server gives, and that status is one its
/// operation declares (with a problem+json body).
async fn bad_requests_are_declared(backend: Backend) {
    let app = spawn_app_with(backend, |config| config.limits.max_body_bytes = 4096).await;
    app.create_agent("bot").await;
    let document = document(&app).await;
    let resource = json!({"uri": "test://a", "name": "a", "text": "a"});
    let cases: Vec<(&str, Method, &str, Option<Value>, StatusCode)> = vec![
        ("listAgents", Method::GET, "/admin/v1/agents?limit=0", None, StatusCode::UNPROCESSABLE_ENTITY),
        ("listAgents", Method::GET, "/admin/v1/agents?limit=ten", None, StatusCode::BAD_REQUEST),
        ("listAgents", Method::GET, "/admin/v1/agents?cursor=garbage", None, StatusCode::BAD_REQUEST),
        ("listKeys", Method::GET, "/admin/v1/agents/nobody/keys", None, StatusCode::NOT_FOUND),
        (
            "listResources",
            Method::GET,
            "/admin/v1/agents/bot/resources?limit=1001",
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        ("listPrompts", Method::GET, "/admin/v1/agents/nobody/prompts", None, StatusCode::NOT_FOUND),
        (
            "putResource",
            Method::PUT,
            "/admin/v1/agents/nobody/resources",
            Some(resource.clone()),
            StatusCode::NOT_FOUND,
        ),
        (
            "putResource",
            Method::PUT,
            "/admin/v1/agents/bot/resources",
            Some(json!({"uri": "x", "name": "a", "text": ""})),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "putResource",
            Method::PUT,
            "/admin/v1/agents/bot/resources",
            Some(json!({"uri": "test://a", "name": "a", "text": "a".repeat(5000)})),
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
        (
            "putResource",
            Method::PUT,
            "/admin/v1/agents/bot/resources",
            Some(json!({"uri": 5, "name": "a", "text": ""})),
            StatusCode::BAD_REQUEST,
        ),
        ("deleteResource", Method::DELETE, "/admin/v1/agents/bot/resources", None, StatusCode::UNPROCESSABLE_ENTITY),
        (
            "deleteResourceTemplate",
            Method::DELETE,
            "/admin/v1/agents/bot/resource-templates",
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "putPrompt",
            Method::PUT,
            "/admin/v1/agents/bot/prompts/p",
            Some(json!({"messages": []})),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "putPrompt",
            Method::PUT,
            "/admin/v1/agents/nobody/prompts/p",
            Some(json!({"messages": [{"role": "user", "content": {"type": "text", "text": "x"}}]})),
            StatusCode::NOT_FOUND,
        ),
        (
            "createAgent",
            Method::POST,
            "/admin/v1/agents",
            Some(json!({"id": "bot", "name": "again"})),
            StatusCode::CONFLICT,
        ),
        (
            "patchAgent",
            Method::PATCH,
            "/admin/v1/agents/bot",
            Some(json!({"rateLimit": {"burst": null}})),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        ("listAudit", Method::GET, "/admin/v1/audit?since=yesterday", None, StatusCode::UNPROCESSABLE_ENTITY),
    ];
    for (operation, method, path, body, status) in cases {
        let mut request = app.op(method.clone(), path);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let what = format!("{operation}: {method} {path}");
        let problem = expect_problem(request.send().await.unwrap(), status).await;
        let statuses = declared(&document, operation);
        assert!(
            statuses.contains(&status.as_u16().to_string()),
            "{what} answered {status}, undeclared: {statuses:?} ({problem})"
        );
    }
    // Unparsable JSON, and no credentials.
    let response = app.op(Method::POST, "/admin/v1/agents").body("{").send().await.unwrap();
    expect_problem(response, StatusCode::BAD_REQUEST).await;
    assert!(declared(&document, "createAgent").contains(&"400".to_owned()));
    let response = app.anon(Method::GET, "/admin/v1/agents").send().await.unwrap();
    expect_problem(response, StatusCode::UNAUTHORIZED).await;
    assert!(declared(&document, "listAgents").contains(&"401".to_owned()));
}

/// A revoked key keeps the name and limit it was revoked with: a merge-patch of it is a 409, and changes
/// nothing.
async fn revoked_keys_do_not_change(backend: Backend) {
    let app = spawn_app(backend).await;
    app.create_agent("bot").await;
    let key = app.issue_key("bot", &["mcp"]).await;
    let path = format!("/admin/v1/agents/bot/keys/{}", key.id);
    let response = app.op(Method::PATCH, &path).json(&json!({"name": "renamed"})).send().await.unwrap();
    assert_eq!(expect_json(response, StatusCode::OK).await["name"], "renamed", "a live key may change");
    let response = app.op(Method::DELETE, &path).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    for patch in [json!({"name": "after"}), json!({"rateLimit": {"requestsPerSecond": 1, "burst": 1}}), json!({})] {
        let response = app.op(Method::PATCH, &path).json(&patch).send().await.unwrap();
        let problem = expect_problem(response, StatusCode::CONFLICT).await;
        assert!(problem["detail"].as_str().is_some_and(|d| d.contains("revoked")), "{problem}");
    }
    let response = app.op(Method::GET, "/admin/v1/agents/bot/keys").send().await.unwrap();
    let keys = expect_json(response, StatusCode::OK).await;
    let listed = &keys["items"][0];
    assert_eq!(listed["name"], "renamed", "{keys}");
    assert!(listed["revokedAt"].is_string() && listed.get("rateLimit").is_none(), "{keys}");
    let document = document(&app).await;
    assert!(declared(&document, "patchKey").contains(&"409".to_owned()));
}

/// The checks of a page: 200, its type, a Content-Security-Policy, and nothing from another origin.
async fn page(app: &TestApp, path: &str, media_type: &str) -> String {
    let response = app.anon(Method::GET, path).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{path}");
    assert!(content_type(&response).contains(media_type), "{path}: {}", content_type(&response));
    let policy = response.headers().get("content-security-policy").and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert!(policy.starts_with("default-src 'none'"), "{path}: Content-Security-Policy {policy:?}");
    assert!(!policy.contains("http"), "{path}: the policy allows another origin: {policy}");
    let body = response.text().await.unwrap();
    assert!(!body.contains("http://") && !body.contains("https://") && !body.contains("//cdn"), "{path}: {body}");
    body
}

/// `GET /` leads to the console, the API reference, health and the MCP endpoint pattern; the reference is
/// Swagger UI over our document, from files the binary carries.
async fn landing_and_reference_pages(backend: Backend) {
    let app = spawn_app(backend).await;
    let landing = page(&app, "/", "text/html").await;
    for link in [
        "href=\"/console/\"",
        "href=\"/admin/docs/\"",
        "href=\"/admin/v1/openapi.json\"",
        "href=\"/healthz\"",
        "href=\"/readyz\"",
        "/{agent_id}/mcp",
    ] {
        assert!(landing.contains(link), "the landing page lacks {link}: {landing}");
    }

    let reference = page(&app, "/admin/docs/", "text/html").await;
    assert!(reference.contains("swagger-initializer.js"), "{reference}");
    let initializer = page(&app, "/admin/docs/swagger-initializer.js", "javascript").await;
    assert!(initializer.contains("\"/admin/v1/openapi.json\""), "{initializer}");
    assert!(initializer.contains("\"validatorUrl\": \"none\""), "no online validator: {initializer}");
    let response = app.anon(Method::GET, "/admin/docs/swagger-ui-bundle.js").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let response = app.anon(Method::GET, "/admin/docs/no-such-file.js").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
    let response = app.anon(Method::GET, "/admin/docs").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::PERMANENT_REDIRECT);
    assert_eq!(response.headers().get("location").and_then(|v| v.to_str().ok()), Some("/admin/docs/"));
}
