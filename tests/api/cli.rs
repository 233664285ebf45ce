//! The command line against a running gateway (`hivegate agent|key|resource|template|prompt`, `audit tail`)
//! and on its own (`config check`, the offline commands `audit verify` and `admin-token rotate`).

use std::process::Stdio;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

use crate::helpers::{
    Api, Backend, DEADLINE, HivegateProcess, OPERATOR_TOKEN, TempDir, TestDatabase, hivegate_command, run_hivegate,
};

both!(
    the_cli_round_trips,
    the_cli_covers_agents_keys_templates_prompts_and_the_audit_log,
    oversized_resources_are_refused_with_the_limit,
    audit_verify_of_an_unknown_agent_fails
);

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
    // The error is printed once, plain: stderr is a pipe here, not a terminal.
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("hivegate: ") && !stderr.contains('\x1b'), "{stderr:?}");
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
    assert_eq!(resource["mimeType"], "text/markdown", "the MIME type is guessed from the extension");
    let (ok, resource, stderr) = cli(
        &app,
        &dir,
        &db,
        &["resource", "put", "bot", "--uri", "test://plain", "--file", &file, "--mime-type", "text/plain"],
    )
    .await;
    assert!(ok, "{stderr}");
    assert_eq!(resource["mimeType"], "text/plain", "--mime-type wins over the guess");

    // What the CLI stored is what an MCP client reads with the key it issued.
    let read = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "test://notes"}});
    let response = app.with_key(Method::POST, "/bot/mcp", &secret).json(&read).send().await.unwrap();
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["result"]["contents"][0]["text"], "# from a file", "{answer}");

    let (ok, _, stderr) = cli(&app, &dir, &db, &["key", "revoke", "bot", &key_id]).await;
    assert!(ok, "{stderr}");
    let response = app.with_key(Method::POST, "/bot/mcp", &secret).json(&read).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    for uri in ["test://notes", "test://plain"] {
        let (ok, _, stderr) = cli(&app, &dir, &db, &["resource", "delete", "bot", "--uri", uri]).await;
        assert!(ok, "{stderr}");
    }
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

/// Runs `hivegate <args>` with the operator token and `env` besides the database, to completion.
async fn run_with_env(dir: &TempDir, database_url: &str, env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    let mut command = tokio::process::Command::from(hivegate_command(dir.path(), database_url, Some(OPERATOR_TOKEN)));
    command.envs(env.iter().copied()).args(args).stdin(Stdio::null()).kill_on_drop(true);
    tokio::time::timeout(DEADLINE, command.output())
        .await
        .unwrap_or_else(|_| panic!("hivegate {args:?} did not finish within {DEADLINE:?}"))
        .expect("the hivegate binary runs")
}

async fn the_cli_covers_agents_keys_templates_prompts_and_the_audit_log(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    // Pretty logs, as a person would run it, with stderr redirected to a file.
    let app =
        HivegateProcess::start_with_env(db.url(), Some(OPERATOR_TOKEN), &[("HIVEGATE_LOG__FORMAT", "pretty")]).await;
    let dir = TempDir::new();
    let (ok, _, stderr) = cli(&app, &dir, &db, &["agent", "create", "bot"]).await;
    assert!(ok, "{stderr}");

    // Agents: get and patch (options and a merge-patch).
    let (ok, agent, stderr) = cli(&app, &dir, &db, &["agent", "get", "bot"]).await;
    assert!(ok, "{stderr}");
    assert_eq!(agent["name"], "bot");
    let patch = r#"{"rateLimit": {"requestsPerSecond": 5, "burst": 10}, "description": "old"}"#;
    let (ok, agent, stderr) =
        cli(&app, &dir, &db, &["agent", "patch", "bot", "--name", "Bot", "--description", "new", "--json", patch])
            .await;
    assert!(ok, "{stderr}");
    assert_eq!((agent["name"].as_str(), agent["description"].as_str()), (Some("Bot"), Some("new")), "{agent}");
    assert_eq!(agent["rateLimit"]["requestsPerSecond"], 5, "{agent}");
    let (ok, _, stderr) = cli(&app, &dir, &db, &["agent", "patch", "bot", "--json", "[1]"]).await;
    assert!(!ok && stderr.contains("--json must be a JSON object"), "{stderr}");
    let (ok, _, stderr) = cli(&app, &dir, &db, &["agent", "get", "nobody"]).await;
    assert!(!ok && stderr.contains("404"), "{stderr}");

    // Keys: patch the name.
    let (ok, key, stderr) = cli(&app, &dir, &db, &["key", "issue", "bot", "--scope", "mcp"]).await;
    assert!(ok, "{stderr}");
    let (secret, key_id) = (key["key"].as_str().unwrap().to_owned(), key["id"].as_str().unwrap().to_owned());
    let (ok, key, stderr) = cli(&app, &dir, &db, &["key", "patch", "bot", &key_id, "--name", "renamed"]).await;
    assert!(ok, "{stderr}");
    assert_eq!(key["name"], "renamed");
    let (_, keys, _) = cli(&app, &dir, &db, &["key", "list", "bot"]).await;
    assert_eq!(keys[0]["name"], "renamed", "{keys}");

    // Templates from a JSON file.
    let template = dir.path().join("template.json");
    std::fs::write(&template, r#"{"uriTemplate": "test://items/{id}", "name": "Item", "text": "item {{ id }}"}"#)
        .unwrap();
    let template = template.to_string_lossy().into_owned();
    let (ok, put, stderr) = cli(&app, &dir, &db, &["template", "put", "bot", "--file", &template]).await;
    assert!(ok, "{stderr}");
    assert_eq!(put["uriTemplate"], "test://items/{id}");
    let (_, templates, _) = cli(&app, &dir, &db, &["template", "list", "bot"]).await;
    assert_eq!(templates.as_array().map(Vec::len), Some(1), "{templates}");
    let (ok, _, stderr) =
        cli(&app, &dir, &db, &["template", "delete", "bot", "--uri-template", "test://items/{id}"]).await;
    assert!(ok, "{stderr}");
    let (_, templates, _) = cli(&app, &dir, &db, &["template", "list", "bot"]).await;
    assert_eq!(templates, json!([]));
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{not json").unwrap();
    let broken = broken.to_string_lossy().into_owned();
    let (ok, _, stderr) = cli(&app, &dir, &db, &["template", "put", "bot", "--file", &broken]).await;
    assert!(!ok && stderr.contains("is not valid JSON"), "{stderr}");

    // Prompts from a JSON file.
    let prompt = dir.path().join("prompt.json");
    let body = json!({"description": "Greets", "arguments": [{"name": "who", "required": true}],
        "messages": [{"role": "user", "content": {"type": "text", "text": "Hello {{ who }}"}}]});
    std::fs::write(&prompt, body.to_string()).unwrap();
    let prompt = prompt.to_string_lossy().into_owned();
    let (ok, put, stderr) = cli(&app, &dir, &db, &["prompt", "put", "bot", "greet", "--file", &prompt]).await;
    assert!(ok, "{stderr}");
    assert_eq!(put["name"], "greet");
    let (ok, got, stderr) = cli(&app, &dir, &db, &["prompt", "get", "bot", "greet"]).await;
    assert!(ok, "{stderr}");
    assert_eq!(got["description"], "Greets");
    let (_, prompts, _) = cli(&app, &dir, &db, &["prompt", "list", "bot"]).await;
    assert_eq!(prompts.as_array().map(|p| p.iter().map(|x| x["name"].clone()).collect()), Some(vec![json!("greet")]));
    let (ok, _, stderr) = cli(&app, &dir, &db, &["prompt", "delete", "bot", "greet"]).await;
    assert!(ok, "{stderr}");
    let (ok, _, stderr) = cli(&app, &dir, &db, &["prompt", "get", "bot", "greet"]).await;
    assert!(!ok && stderr.contains("404"), "{stderr}");

    // The audit log: the newest admin records, oldest first, one JSON object a line.
    let (ok, tail, stderr) = cli(&app, &dir, &db, &["audit", "tail", "--agent", "bot", "-n", "2"]).await;
    assert!(ok, "{stderr}");
    let lines: Vec<Value> =
        tail.as_str().unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let actions: Vec<&str> = lines.iter().filter_map(|record| record["action"].as_str()).collect();
    assert_eq!(actions, ["prompt.put", "prompt.delete"], "{tail}");

    // --follow prints records written after it started, as they come.
    let mut command = tokio::process::Command::from(hivegate_command(dir.path(), db.url(), Some(OPERATOR_TOKEN)));
    command
        .args([
            "audit",
            "tail",
            "--follow",
            "--interval-ms",
            "100",
            "--method",
            "resources/list",
            "--url",
            &app.address,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut follower = command.spawn().unwrap();
    let mut stdout = tokio::io::BufReader::new(follower.stdout.take().unwrap()).lines();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list"});
    let response = app.with_key(Method::POST, "/bot/mcp", &secret).json(&list).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let line = tokio::time::timeout(DEADLINE, stdout.next_line()).await.expect("a record within the deadline");
    let record: Value = serde_json::from_str(&line.unwrap().expect("a line")).unwrap();
    assert_eq!((record["method"].as_str(), record["agentId"].as_str()), (Some("resources/list"), Some("bot")));
    follower.start_kill().unwrap();
    let _ = follower.wait().await;

    // serve's own log, redirected to a file, has no colour codes.
    let log = app.stderr();
    assert!(!log.is_empty() && !log.contains('\x1b'), "{log:?}");
}

async fn oversized_resources_are_refused_with_the_limit(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let limits = [("HIVEGATE_LIMITS__MAX_BODY_BYTES", "100000"), ("HIVEGATE_LIMITS__MAX_RESOURCE_BYTES", "1000")];
    let app = HivegateProcess::start_with_env(db.url(), Some(OPERATOR_TOKEN), &limits).await;
    let dir = TempDir::new();
    let (ok, _, stderr) = cli(&app, &dir, &db, &["agent", "create", "bot"]).await;
    assert!(ok, "{stderr}");
    let put = |file: &str| {
        ["resource", "put", "bot", "--uri", "test://big", "--file", file, "--url", &app.address].map(str::to_owned)
    };
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();

    // With the gateway's limits (the same configuration), the CLI refuses before sending, in its words.
    std::fs::write(path("big.txt"), "x".repeat(2000)).unwrap();
    let output = run_with_env(&dir, db.url(), &limits, &put(&path("big.txt")).each_ref().map(String::as_str)).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("the content is 2000 bytes; at most 1000 are allowed (limits.max_resource_bytes)"),
        "{stderr}"
    );
    std::fs::write(path("huge.bin"), vec![0xffu8; 200_000]).unwrap();
    let output =
        run_with_env(&dir, db.url(), &limits[..1], &put(&path("huge.bin")).each_ref().map(String::as_str)).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("(limits.max_body_bytes)"), "{stderr}");

    // With larger limits of its own, it sends, and reports the gateway's refusal instead of a broken pipe.
    let output = run_hivegate(dir.path(), db.url(), &put(&path("huge.bin")).each_ref().map(String::as_str)).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("limits.max_body_bytes"), "{stderr}");
    let output = run_hivegate(dir.path(), db.url(), &put(&path("big.txt")).each_ref().map(String::as_str)).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("413") && stderr.contains("limits.max_resource_bytes"),
        "{stderr}"
    );

    // Nothing was stored.
    let (_, resources, _) = cli(&app, &dir, &db, &["resource", "list", "bot"]).await;
    assert_eq!(resources, json!([]));
}

async fn audit_verify_of_an_unknown_agent_fails(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let app = HivegateProcess::start(db.url(), Some(OPERATOR_TOKEN)).await;
    let dir = TempDir::new();
    let (ok, _, stderr) = cli(&app, &dir, &db, &["agent", "create", "bot"]).await;
    assert!(ok, "{stderr}");
    let output = run_hivegate(dir.path(), db.url(), &["audit", "verify", "--agent", "nobody"]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("there is no agent nobody and no audit records for it"), "{stderr}");
    let output = run_hivegate(dir.path(), db.url(), &["audit", "verify", "--agent", "bot"]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

#[tokio::test]
async fn offline_commands_refuse_to_create_a_database() {
    let dir = TempDir::new();
    let missing = dir.path().join("hivegate.db");
    let url = format!("sqlite://{}?mode=rwc", missing.display());
    for args in [&["audit", "verify"][..], &["audit", "verify", "--agent", "bot"], &["admin-token", "rotate"]] {
        let mut command = tokio::process::Command::from(hivegate_command(dir.path(), &url, None));
        let output = command.args(args).stdin(Stdio::null()).output().await.unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}: {stderr}");
        assert!(stderr.contains(&format!("the database {} does not exist", missing.display())), "{stderr}");
        assert!(!missing.exists(), "{args:?} created {}", missing.display());
    }
}

#[tokio::test]
async fn config_check_prints_the_effective_configuration_with_its_sources() {
    let dir = TempDir::new();
    std::fs::create_dir_all(dir.path().join("config")).unwrap();
    std::fs::write(dir.path().join("config/hivegate.toml"), "[limits]\nmax_body_bytes = 123456\n").unwrap();
    let url = "postgres://hivegate:s3cret-password@db.example:5432/hivegate";
    let mut command = tokio::process::Command::from(hivegate_command(dir.path(), url, Some(OPERATOR_TOKEN)));
    let output = command.args(["config", "check"]).env("HIVEGATE_LISTEN", "127.0.0.1:9999").output().await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.starts_with("# configuration file: config/hivegate.toml\n"), "{stdout}");
    for line in [
        "max_body_bytes = 123456  # file",
        "listen = \"127.0.0.1:9999\"  # environment (HIVEGATE_LISTEN)",
        "max_resource_bytes = 4194304  # default",
        "admin_token = \"(redacted)\"  # environment (HIVEGATE_ADMIN_TOKEN)",
        "database_url = \"postgres://hivegate:***@db.example:5432/hivegate\"  # environment (HIVEGATE_DATABASE_URL)",
    ] {
        assert!(stdout.lines().any(|l| l == line), "no line {line:?} in\n{stdout}");
    }
    assert!(!stdout.contains(OPERATOR_TOKEN) && !stdout.contains("s3cret"), "{stdout}");
    let table: toml::Table = toml::from_str(&stdout).expect("the output is TOML");
    assert_eq!(table["limits"]["max_body_bytes"].as_integer(), Some(123_456));

    // A closed pipe (`| head -1` once it has its line) ends it quietly: here the pipe is closed before it
    // writes at all.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut command = tokio::process::Command::from(hivegate_command(dir.path(), url, None));
    let output = command.args(["config", "check"]).stdout(writer).stderr(Stdio::piped()).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success() && !stderr.contains("panicked"), "{:?}: {stderr}", output.status);

    // An unknown key is named once, with the known ones, without doubled backticks.
    std::fs::write(dir.path().join("config/hivegate.toml"), "[limits]\nmax_bodyy = 1\n").unwrap();
    let output = tokio::process::Command::from(hivegate_command(dir.path(), url, None))
        .args(["config", "check"])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unknown key `max_bodyy` in [limits] in config/hivegate.toml"), "{stderr}");
    assert!(stderr.contains("the known keys are max_body_bytes, ") && !stderr.contains("``"), "{stderr}");
}
