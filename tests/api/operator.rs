//! The operator endpoints on a listener of their own (`http.operator_listen`): `/metrics`, health and the
//! admin API there; `/metrics` (and with `http.public_admin = false` the admin API) no longer on the public
//! listener; both listeners drain at shutdown.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{Api, Backend, TestApp, content_type, expect_json, expect_problem, expect_status, spawn_app_with};
use crate::mcp_client::Mcp;

both!(operator_listener_serves_the_operator_endpoints, public_admin_can_be_turned_off);

/// The operator listener of `app`, for the request helpers.
struct Operator<'a>(&'a TestApp, String);

impl Api for Operator<'_> {
    fn base(&self) -> &str {
        &self.1
    }

    fn http(&self) -> &reqwest::Client {
        &self.0.client
    }
}

fn operator(app: &TestApp) -> Operator<'_> {
    Operator(app, app.operator.clone().expect("the operator listener's address"))
}

async fn operator_listener_serves_the_operator_endpoints(backend: Backend) {
    let mut app = spawn_app_with(backend, |config| {
        config.http.operator_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let ops = operator(&app);
    assert_ne!(ops.base(), app.base());

    // The operator listener: metrics, health, the admin API.
    let response = ops.anon(Method::GET, "/metrics").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(content_type(&response).starts_with("application/openmetrics-text"));
    for path in ["/healthz", "/readyz"] {
        expect_status(ops.anon(Method::GET, path).send().await.unwrap(), StatusCode::OK).await;
        expect_status(app.anon(Method::GET, path).send().await.unwrap(), StatusCode::OK).await;
    }
    ops.create_agent("bot").await;
    let key = ops.issue_key("bot", &["mcp", "registry"]).await.key;
    ops.put_text("bot", "test://a", "a").await;
    // The admin API needs its credentials there as anywhere.
    let response = ops.anon(Method::GET, "/admin/v1/agents").send().await.unwrap();
    expect_problem(response, StatusCode::UNAUTHORIZED).await;

    // The public listener: no metrics; the admin API (on by default) and MCP.
    let response = app.anon(Method::GET, "/metrics").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
    let agents = app.list_all("/admin/v1/agents", None).await;
    assert_eq!(agents.len(), 1);
    let response = app.with_key(Method::GET, "/admin/v1/agents/bot/resources", &key).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    let read = Mcp::new(&app, "bot", &key).modern("resources/read", json!({"uri": "test://a"})).await;
    let result = read.result();
    assert_eq!(result["contents"][0]["text"], "a", "{result}");
    // The operator listener does not serve MCP.
    let response = ops.with_key(Method::POST, "/bot/mcp", &key).json(&json!({})).send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;

    // Requests on both listeners are counted in the one set of metrics.
    let text = ops.anon(Method::GET, "/metrics").send().await.unwrap().text().await.unwrap();
    let unmatched = r#"hivegate_http_requests_total{route="unmatched",method="GET",status="404"} "#;
    assert!(text.lines().any(|line| line.starts_with(unmatched)), "{text}");

    // Both listeners stop at shutdown.
    let operator_base = ops.base().to_owned();
    app.stop().await;
    let client = crate::helpers::http_client();
    assert!(client.get(format!("{operator_base}/healthz")).send().await.is_err(), "the operator listener is open");
    assert!(client.get(app.url("/healthz")).send().await.is_err(), "the public listener is open");
}

async fn public_admin_can_be_turned_off(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        config.http.operator_listen = Some("127.0.0.1:0".parse().unwrap());
        config.http.public_admin = false;
    })
    .await;
    let ops = operator(&app);
    ops.create_agent("bot").await;
    let key = ops.issue_key("bot", &["mcp", "registry"]).await.key;
    ops.put_text("bot", "test://a", "a").await;

    // On the public listener the admin API is an unknown path, whoever asks; MCP is served.
    let response = app.op(Method::GET, "/admin/v1/agents").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
    let response = app.with_key(Method::GET, "/admin/v1/agents/bot/resources", &key).send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
    let response = app.anon(Method::GET, "/metrics").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
    let read = Mcp::new(&app, "bot", &key).modern("resources/read", json!({"uri": "test://a"})).await;
    let result = read.result();
    assert_eq!(result["contents"][0]["text"], "a", "{result}");

    // Registry keys work on the operator listener.
    let response = ops.with_key(Method::GET, "/admin/v1/agents/bot/resources", &key).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;

    // Without an operator listener the admin API cannot be turned off.
    let mut config = hivegate::config::Config::default();
    config.http.public_admin = false;
    let error = config.validate().expect_err("the admin API served nowhere").to_string();
    assert!(error.contains("http.public_admin"), "{error}");
}
