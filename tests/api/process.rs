use reqwest::{Method, StatusCode};

use crate::helpers::{
    Api, Backend, HivegateProcess, OPERATOR_TOKEN, TempDir, TestDatabase, expect_json, expect_problem, run_hivegate,
};

both!(operator_token_is_generated_once, concurrent_migrations, sigterm_exits_cleanly);

/// The `hgo_...` token in `text`, if any.
fn generated_tokens(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("hgo_"))
        .map(str::to_owned)
        .collect()
}

async fn operator_token_is_generated_once(backend: Backend) {
    let db = TestDatabase::new(backend).await;

    // First start without HIVEGATE_ADMIN_TOKEN: one stderr line names the generated token.
    let mut first = HivegateProcess::start(db.url(), None).await;
    let stderr = first.stderr();
    let lines: Vec<&str> = stderr.lines().filter(|line| line.contains("hgo_")).collect();
    assert_eq!(lines.len(), 1, "exactly one line should carry the generated token:\n{}", first.logs());
    assert!(lines[0].contains("operator token"), "the token line does not say what it is: {}", lines[0]);
    let tokens = generated_tokens(lines[0]);
    assert_eq!(tokens.len(), 1, "{}", lines[0]);
    let token = tokens[0].clone();
    assert!(token.len() >= 4 + 32, "the generated token is too short: {token}");
    // It is the one secret printed, once: never in the log output.
    assert!(!first.stdout().contains(&token), "the token reached stdout:\n{}", first.logs());
    assert_eq!(stderr.matches(&token).count(), 1, "the token is printed more than once:\n{}", first.logs());

    first.set_operator_token(&token);
    let response = first.op(Method::GET, "/admin/v1/agents").send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    first.create_agent("bot").await;
    first.set_operator_token("hgo_not-the-token-that-was-generated");
    let response = first.op(Method::GET, "/admin/v1/agents").send().await.unwrap();
    expect_problem(response, StatusCode::UNAUTHORIZED).await;
    first.terminate().await;

    // Restart on the same database: nothing is printed, the first token still works.
    let mut second = HivegateProcess::start(db.url(), None).await;
    assert!(
        generated_tokens(&second.stderr()).is_empty() && generated_tokens(&second.stdout()).is_empty(),
        "a token was printed again on restart:\n{}",
        second.logs()
    );
    second.set_operator_token(&token);
    let agents = second.list_all("/admin/v1/agents", None).await;
    assert_eq!(agents.len(), 1);
    assert_eq!(agents[0]["id"], "bot");
    second.terminate().await;

    // With HIVEGATE_ADMIN_TOKEN set, that is the only operator token.
    let mut third = HivegateProcess::start(db.url(), Some(OPERATOR_TOKEN)).await;
    assert!(generated_tokens(&third.stderr()).is_empty(), "{}", third.logs());
    let response = third.op(Method::GET, "/admin/v1/agents").send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    third.set_operator_token(&token);
    let response = third.op(Method::GET, "/admin/v1/agents").send().await.unwrap();
    expect_problem(response, StatusCode::UNAUTHORIZED).await;
}

async fn concurrent_migrations(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let dir = TempDir::new();

    // Two `hivegate migrate` at once on a fresh database: both succeed.
    let (a, b) = tokio::join!(
        run_hivegate(dir.path(), db.url(), &["migrate"]),
        run_hivegate(dir.path(), db.url(), &["migrate"])
    );
    for (name, output) in [("first", &a), ("second", &b)] {
        assert!(
            output.status.success(),
            "the {name} concurrent migrate failed with {}:\n--- stdout ---\n{}\n--- stderr ---\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // Once more: idempotent.
    let again = run_hivegate(dir.path(), db.url(), &["migrate"]).await;
    assert!(again.status.success(), "a repeated migrate failed:\n{}", String::from_utf8_lossy(&again.stderr));

    // Then two servers start at once on the migrated database and work.
    let (one, two) = tokio::join!(
        HivegateProcess::start(db.url(), Some(OPERATOR_TOKEN)),
        HivegateProcess::start(db.url(), Some(OPERATOR_TOKEN))
    );
    one.create_agent("bot").await;
    one.put_text("bot", "test://a", "hello").await;
    let read = expect_json(two.get_content("bot", "test://a").await, StatusCode::OK).await;
    assert_eq!(read["text"], "hello");
    let response = two.anon(Method::GET, "/readyz").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

async fn sigterm_exits_cleanly(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let mut process = HivegateProcess::start(db.url(), Some(OPERATOR_TOKEN)).await;
    process.create_agent("bot").await;
    let status = process.terminate().await;
    assert!(status.success(), "SIGTERM: expected exit 0, got {status}\n{}", process.logs());
}
