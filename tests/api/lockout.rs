//! The failed-authentication lockout: it says what it is and when it ends, is logged and counted, does not
//! count requests that present no credential, and never locks the operator token out on the operator
//! listener.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{
    Api, Backend, HivegateProcess, OPERATOR_TOKEN, TestDatabase, expect_json, expect_problem, free_port,
};

both!(a_lockout_says_why_and_spares_the_operator);

/// The operator listener of a process, for the request helpers.
struct Operator<'a>(&'a HivegateProcess, String);

impl Api for Operator<'_> {
    fn base(&self) -> &str {
        &self.1
    }

    fn http(&self) -> &reqwest::Client {
        &self.0.client
    }

    fn operator_token(&self) -> &str {
        OPERATOR_TOKEN
    }
}

async fn ping(app: &HivegateProcess, key: Option<&str>) -> (StatusCode, Value) {
    let mut request = app.anon(Method::POST, "/bot/mcp").json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}));
    if let Some(key) = key {
        request = request.header("x-agent-api-key", key);
    }
    let response = request.send().await.unwrap();
    (response.status(), response.json().await.unwrap_or(Value::Null))
}

async fn a_lockout_says_why_and_spares_the_operator(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let operator_port = free_port();
    let operator_listen = format!("127.0.0.1:{operator_port}");
    let env = [
        ("HIVEGATE_RATE_LIMITS__FAILED_AUTH_ATTEMPTS", "3"),
        ("HIVEGATE_RATE_LIMITS__FAILED_AUTH_WINDOW_SECS", "600"),
        ("HIVEGATE_HTTP__OPERATOR_LISTEN", operator_listen.as_str()),
    ];
    let app = HivegateProcess::start_with_env(db.url(), Some(OPERATOR_TOKEN), &env).await;
    let ops = Operator(&app, format!("http://{operator_listen}"));
    ops.create_agent("bot").await;
    let key = ops.issue_key("bot", &["mcp"]).await.key;

    // Requests without any credential are not guesses: however many, they lock nobody out.
    for _ in 0..10 {
        assert_eq!(ping(&app, None).await.0, StatusCode::UNAUTHORIZED);
        expect_problem(app.anon(Method::GET, "/admin/v1/agents").send().await.unwrap(), StatusCode::UNAUTHORIZED).await;
    }
    assert_eq!(ping(&app, Some(&key)).await.0, StatusCode::OK);

    // Three wrong keys lock the address out, and the answer says so and for how long.
    let wrong = format!("bak_{}", "x".repeat(43));
    for _ in 0..3 {
        assert_eq!(ping(&app, Some(&wrong)).await.0, StatusCode::UNAUTHORIZED);
    }
    let (status, body) = ping(&app, Some(&key)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("locked out") && message.contains("3 failed authentications"), "{body}");
    assert_eq!(body["error"]["data"]["reason"], "failedAuthentications", "{body}");
    // The admin API on the public listener: locked out too, even with the operator token, saying why.
    let response = app.op(Method::GET, "/admin/v1/agents").send().await.unwrap();
    let problem = expect_problem(response, StatusCode::TOO_MANY_REQUESTS).await;
    let detail = problem["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("locked out") && detail.contains("rate_limits.failed_auth_attempts"), "{problem}");

    // The operator listener serves the operator token whatever the lockout; a wrong token stays locked out.
    let response = ops.op(Method::GET, "/admin/v1/agents").send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    let response =
        ops.anon(Method::GET, "/admin/v1/agents").bearer_auth("not-the-operator-token").send().await.unwrap();
    expect_problem(response, StatusCode::TOO_MANY_REQUESTS).await;

    // Logged once, with the address and the count, and counted.
    let logs = app.stderr();
    let lines: Vec<&str> =
        logs.lines().filter(|line| line.contains("locked out after failed authentications")).collect();
    assert_eq!(lines.len(), 1, "{logs}");
    assert!(lines[0].contains("127.0.0.1") && lines[0].contains('3'), "{}", lines[0]);
    let metrics = ops.anon(Method::GET, "/metrics").send().await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|line| line == "hivegate_auth_lockouts_total 1"), "{metrics}");
}
