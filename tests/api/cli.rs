//! The admin API client commands (`hivegate agent|key|resource`) against a running gateway.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Api, Backend, HivegateProcess, OPERATOR_TOKEN, TempDir, TestDatabase, run_hivegate};

both!(the_cli_round_trips);

/// Runs `hivegate <args> --url <app>` and returns (success, stdout JSON or text, stderr).
async fn cli(app: &HivegateProcess, dir: &TempDir, db: &TestDatabase, args: &[&str]) -> (bool, Value, String) {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--url", &app.address]);
    let output = run_hivegate(dir.path(), db.url(), &all).await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let value = serde_json::from_str(&stdout).unwrap_or(Value::String(stdout));
    (output.status.success(), value, stderr)
}

async fn the_cli_round_trips(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = HivegateProcess::start(db.url(), Some(OPERATOR_TOKEN)).await;
    let dir = TempDir::new();

    let (ok, agent, stderr) = cli(&app, &dir, &db, &["agent", "create", "bot", "--name", "Bot"]).await;
    assert!(ok, "{stderr}");
    assert_eq!((agent["id"].as_str(), agent["name"].as_str()), (Some("bot"), Some("Bot")));
    let (ok, _, stderr) = cli(&app, &dir, &db, &["agent", "create", "bot"]).await;
    assert!(!ok && stderr.contains("409"), "a duplicate is refused with the API's answer: {stderr}");
    let (_, agents, _) = cli(&app, &dir, &db, &["agent", "list"]).await;
    assert_eq!(
        agents.as_array().map(|a| a.iter().map(|x| x["id"].clone()).collect::<Vec<_>>()),
        Some(vec![json!("bot")])
    );

    let (ok, key, stderr) = cli(&app, &dir, &db, &["key", "issue", "bot", "--scope", "mcp", "--name", "cli"]).await;
    assert!(ok, "{stderr}");
    let secret = key["key"].as_str().expect("the key is shown once").to_owned();
    let key_id = key["id"].as_str().expect("key id").to_owned();

    let file = dir.path().join("notes.md");
    std::fs::write(&file, "# from a file").unwrap();
    let file = file.to_string_lossy().into_owned();
    let (ok, resource, stderr) =
        cli(&app, &dir, &db, &["resource", "put", "bot", "--uri", "test://notes", "--file", &file]).await;
    assert!(ok, "{stderr}");
    assert_eq!(resource["uri"], "test://notes");

    // What the CLI stored is what an MCP client reads with the key it issued.
    let read = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "test://notes"}});
    let response = app.with_key(Method::POST, "/bot/mcp", &secret).json(&read).send().await.unwrap();
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["result"]["contents"][0]["text"], "# from a file", "{answer}");

    let (ok, _, stderr) = cli(&app, &dir, &db, &["key", "revoke", "bot", &key_id]).await;
    assert!(ok, "{stderr}");
    let response = app.with_key(Method::POST, "/bot/mcp", &secret).json(&read).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    let (ok, _, stderr) = cli(&app, &dir, &db, &["resource", "delete", "bot", "--uri", "test://notes"]).await;
    assert!(ok, "{stderr}");
    let (_, resources, _) = cli(&app, &dir, &db, &["resource", "list", "bot"]).await;
    assert_eq!(resources, json!([]));
    let (ok, _, stderr) = cli(&app, &dir, &db, &["agent", "delete", "bot"]).await;
    assert!(ok, "{stderr}");
    let (_, agents, _) = cli(&app, &dir, &db, &["agent", "list"]).await;
    assert_eq!(agents, json!([]));

    // A wrong token is refused, and says so.
    let (ok, _, stderr) = cli(&app, &dir, &db, &["agent", "list", "--token", "not-the-operator-token"]).await;
    assert!(!ok && stderr.contains("401"), "{stderr}");
}
