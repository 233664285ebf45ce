use reqwest::{Method, StatusCode};

use serde_json::json;

use crate::helpers::{
    Api, Backend, HivegateProcess, OPERATOR_TOKEN, TempDir, TestDatabase, eventually, expect_json, expect_problem,
    hivegate_command, run_hivegate,
};
use crate::live_client::Legacy;

both!(operator_token_is_generated_once, the_operator_token_rotates, concurrent_migrations, sigterm_exits_cleanly);
both!(log_lines_name_the_request_and_the_agent, at_the_default_level_a_line_in_a_request_names_it);

/// The `hgo_...` token in `text`, if any.
fn generated_tokens(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("hgo_"))
        .map(str::to_owned)
        .collect()
}

/// The mappings of process `pid` that are advised `MADV_HUGEPAGE` (the `hg` flag of /proc/PID/smaps), each
/// with its size and its resident and huge-page memory, in KiB.
#[cfg(target_os = "linux")]
fn advised_huge(pid: u32) -> Vec<(u64, u64, u64)> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let (mut advised, mut current) = (Vec::new(), (0, 0, 0));
    for line in smaps.lines() {
        let kib = |value: &str| value.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap();
        if let Some(size) = line.strip_prefix("Size:") {
            current = (kib(size), 0, 0);
        } else if let Some(rss) = line.strip_prefix("Rss:") {
            current.1 = kib(rss);
        } else if let Some(huge) = line.strip_prefix("AnonHugePages:") {
            current.2 = kib(huge);
        } else if let Some(flags) = line.strip_prefix("VmFlags:")
            && flags.split_whitespace().any(|flag| flag == "hg")
        {
            advised.push(current);
        }
    }
    advised
}

/// The serving process has transparent huge pages off except in the caches' arena (src/allocator.rs): with
/// them, a 2 MiB page of mimalloc's arenas is resident as a whole once any of it is written. Since Linux
/// 6.18 the arena, and it alone, is advised `MADV_HUGEPAGE` (twice the cache's budget and 128 MiB), and what the
/// caches keep lies in it; before, nothing is advised and huge pages are off. The environment can choose
/// otherwise (`MIMALLOC_ALLOW_THP`), as mimalloc documents. On SQLite only: the setting belongs to the
/// process, whatever its database.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_keeps_huge_pages_to_the_caches_arena() {
    let thp_enabled = |pid: &str| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status.lines().find_map(|line| line.strip_prefix("THP_enabled:")).map(|value| value.trim().to_owned())
    };
    // What the servers would have without the setting: this process's, which they inherit. A kernel without
    // the field (before 5.0) or where huge pages are already off for this process cannot show the setting.
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() || thp_enabled("self").as_deref() != Some("1") {
        eprintln!("skipped: huge pages are not on for this process, or MIMALLOC_ALLOW_THP is set");
        return;
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut version = release.trim().split(['.', '-']).map(|part| part.parse::<u32>().unwrap_or(0));
    let strict = std::fs::read_to_string("/proc/sys/vm/overcommit_memory").is_ok_and(|mode| mode.trim() == "2");
    let confines = (version.next().unwrap_or(0), version.next().unwrap_or(0)) >= (6, 18) && !strict;

    let db = TestDatabase::new(Backend::Sqlite).await;
    let env = [("HIVEGATE_CACHE__MAX_BYTES", "67108864")];
    let server = HivegateProcess::start_with_env(db.url(), Some(OPERATOR_TOKEN), &env).await;
    let advised = advised_huge(server.pid());
    if !confines {
        // An older kernel refuses the mode, and huge pages go off altogether; under strict overcommit no
        // arena is made. Either way nothing is advised.
        let enabled = thp_enabled(&server.pid().to_string());
        assert!(strict || enabled.as_deref() == Some("0"), "{enabled:?}: {}", server.logs());
        assert!(advised.is_empty(), "no memory advised for huge pages: {advised:?}");
        return;
    }
    // Off except where advised shows as on; the one mapping advised is the arena, of 2 x 64 + 128 MiB.
    assert_eq!(thp_enabled(&server.pid().to_string()).as_deref(), Some("1"), "{}", server.logs());
    assert_eq!(advised.iter().map(|(size, ..)| *size).collect::<Vec<_>>(), [256 * 1024], "{advised:?}");
    let before = advised[0].1;
    // 40 contents of 60 KB, read once each: kept by the cache, in the arena.
    server.create_agent("bot").await;
    for i in 0..40 {
        server.put_text("bot", &format!("test://{i}"), &"x".repeat(60_000)).await;
    }
    let key = server.issue_key("bot", &["mcp"]).await.key;
    let session = Legacy::initialize(&server, "bot", &key, "2025-11-25").await;
    for i in 0..40 {
        let read = session.call("resources/read", json!({"uri": format!("test://{i}")})).await;
        let text = read.result()["contents"][0]["text"].as_str().map(str::len);
        assert_eq!(text, Some(60_000), "{}", read.body);
    }
    let after = advised_huge(server.pid());
    assert!(after[0].1 >= before + 2048, "2.4 MB kept in the arena: {before} KiB resident before, {after:?} after");

    let db = TestDatabase::new(Backend::Sqlite).await;
    let chosen = HivegateProcess::start_with_env(db.url(), Some(OPERATOR_TOKEN), &[("MIMALLOC_ALLOW_THP", "1")]).await;
    assert_eq!(thp_enabled(&chosen.pid().to_string()).as_deref(), Some("1"), "{}", chosen.logs());
}

async fn the_operator_token_rotates(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    // Waiting for the new token means failing with it a few times: no blocking for that here.
    let env = [("HIVEGATE_RATE_LIMITS__FAILED_AUTH_ATTEMPTS", "0")];
    let mut app = HivegateProcess::start_with_env(db.url(), None, &env).await;
    let old = generated_tokens(&app.stderr()).pop().expect("a generated token");
    let dir = TempDir::new();

    // Rotated from another process while the server runs: the new token is printed once, on stdout.
    let output = hivegate_command(dir.path(), db.url(), None).args(["admin-token", "rotate"]).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    let new = generated_tokens(&printed).pop().expect("the new token on stdout");
    assert_ne!(new, old);

    // The running server takes it within its refresh interval: the old token stops working.
    app.set_operator_token(&new);
    eventually("the new operator token to be accepted", || async {
        let response = app.op(Method::GET, "/admin/v1/agents").send().await.unwrap();
        (response.status() == StatusCode::OK).then_some(())
    })
    .await;
    app.set_operator_token(&old);
    let response = app.op(Method::GET, "/admin/v1/agents").send().await.unwrap();
    expect_problem(response, StatusCode::UNAUTHORIZED).await;

    // With HIVEGATE_ADMIN_TOKEN set there is nothing stored to rotate: refused, and nothing changes.
    let refused = run_hivegate(dir.path(), db.url(), &["admin-token", "rotate"]).await;
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("HIVEGATE_ADMIN_TOKEN"));
    app.set_operator_token(&new);
    let response = app.op(Method::GET, "/admin/v1/agents").send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
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
    // Audit records are only written at shutdown: the interval is an hour, the batch large.
    let env = [("HIVEGATE_AUDIT__FLUSH_INTERVAL_MS", "3600000")];
    let mut process = HivegateProcess::start_with_env(db.url(), Some(OPERATOR_TOKEN), &env).await;
    process.create_agent("bot").await;
    let key = process.issue_key("bot", &["mcp"]).await.key;
    let session = Legacy::initialize(&process, "bot", &key, "2025-11-25").await;
    session.call("resources/list", json!({})).await;
    let mut stream = session.open(None).await;
    stream.next().await;

    // A write in flight when SIGTERM arrives: its body is still being sent.
    let (chunks, body) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    let write = process
        .op(Method::PUT, "/admin/v1/agents/bot/resources")
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(tokio_stream_of(body)))
        .send();
    let in_flight = tokio::spawn(write);
    chunks.send(Ok(br#"{"uri": "test://in-flight", "name": "n", "#.to_vec())).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let pid = process.pid();
    let sent = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status().unwrap();
    assert!(sent.success(), "kill -TERM failed");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    chunks.send(Ok(br#""text": "finished after SIGTERM"}"#.to_vec())).await.unwrap();
    drop(chunks);

    // The in-flight write is finished and acknowledged; the stream is closed; the process exits 0.
    let response = in_flight.await.unwrap().unwrap();
    assert_eq!(response.status(), StatusCode::CREATED, "{}", process.logs());
    stream.expect_end().await;
    let status = process.exited().await;
    assert!(status.success(), "SIGTERM: expected exit 0, got {status}\n{}", process.logs());

    // Everything acknowledged is stored, and the queued audit records were written on the way out:
    // initialize, resources/list and the stream's GET.
    assert_eq!(db.count("select count(*) from resource where uri = 'test://in-flight'").await, 1);
    assert_eq!(db.count("select count(*) from audit_record where kind = 'mcp'").await, 3, "{}", process.logs());
}

async fn log_lines_name_the_request_and_the_agent(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    // tower-http logs each answer at debug level, inside the request's span.
    let env = [("RUST_LOG", "info,tower_http=debug")];
    let mut process = HivegateProcess::start_with_env(db.url(), Some(OPERATOR_TOKEN), &env).await;
    process.create_agent("bot").await;
    let key = process.issue_key("bot", &["mcp"]).await.key;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list", "params": {}});
    let response = process
        .with_key(Method::POST, "/bot/mcp", &key)
        .header("x-request-id", "req-log-1")
        .json(&body)
        .send()
        .await
        .unwrap();
    expect_json(response, StatusCode::OK).await;
    // A body that is not JSON: the request still names its agent, without a method.
    let response = process
        .with_key(Method::POST, "/bot/mcp", &key)
        .header("x-request-id", "req-log-2")
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(process.terminate().await.success(), "{}", process.logs());

    let stderr = process.stderr();
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|line| line["span"]["request_id"] == "req-log-1")
        .collect();
    assert!(!lines.is_empty(), "no JSON log line of the request:\n{stderr}");
    let answered = lines.iter().find(|line| line["status"] == 200).unwrap_or_else(|| panic!("{stderr}"));
    let span = &answered["span"];
    assert_eq!(span["name"], "request", "{answered}");
    assert_eq!(span["agent"], "bot", "{answered}");
    assert_eq!(span["route"], "/{agent_id}/mcp", "{answered}");
    assert_eq!(span["mcp.method"], "resources/list", "{answered}");
    assert_eq!(span["mcp.era"], "legacy", "{answered}");
    // The status is recorded on the span once a line after the answer can show it; the export's fields are not.
    assert_eq!(span["status"], 200, "{answered}");
    assert!(span.get("otel.kind").is_none() && span.get("otel.name").is_none(), "{answered}");
    let unparsed = stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|line| line["span"]["request_id"] == "req-log-2" && line["status"] == 400)
        .unwrap_or_else(|| panic!("no answer line of the unparsed request:\n{stderr}"));
    assert_eq!(unparsed["span"]["agent"], "bot", "{unparsed}");
    assert!(unparsed["span"].get("mcp.method").is_none(), "{unparsed}");
    assert!(!stderr.contains(&key), "the key reached the log");
}

/// At the default level a request that goes well writes no line, and its span is made only when something
/// is written in it: then the line carries every field the span was given so far.
async fn at_the_default_level_a_line_in_a_request_names_it(backend: Backend) {
    let (warning, stderr) = a_failed_render_logged(backend, &[("RUST_LOG", "info")]).await;
    assert_names_the_request(&warning);
    // A request that went well wrote nothing.
    assert!(!stderr.contains("req-fine"), "{stderr}");
}

/// Serves, in a server started with `env`, a read of a template whose text compiles but cannot render
/// (which logs a warning while the request is served, request id `req-broken`) and a list that goes well
/// (`req-fine`); the warning's line, and everything the server wrote to stderr.
pub(crate) async fn a_failed_render_logged(backend: Backend, env: &[(&str, &str)]) -> (serde_json::Value, String) {
    let db = TestDatabase::new(backend).await;
    let mut process = HivegateProcess::start_with_env(db.url(), Some(OPERATOR_TOKEN), env).await;
    process.create_agent("bot").await;
    let key = process.issue_key("bot", &["mcp"]).await.key;
    let template = json!({"uriTemplate": "broken://{id}", "name": "broken", "text": "{{ id + 1 }}"});
    let response =
        process.op(Method::PUT, "/admin/v1/agents/bot/resource-templates").json(&template).send().await.unwrap();
    expect_json(response, StatusCode::CREATED).await;
    let read = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "broken://7"}});
    let response = process
        .with_key(Method::POST, "/bot/mcp", &key)
        .header("x-request-id", "req-broken")
        .json(&read)
        .send()
        .await
        .unwrap();
    let answer = expect_json(response, StatusCode::OK).await;
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/list"});
    let response =
        process.with_key(Method::POST, "/bot/mcp", &key).header("x-request-id", "req-fine").json(&list).send().await;
    expect_json(response.unwrap(), StatusCode::OK).await;
    assert!(process.terminate().await.success(), "{}", process.logs());

    let stderr = process.stderr();
    let warning = stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|line| line["message"] == "template text failed to render")
        .unwrap_or_else(|| panic!("no line of the failed render:\n{stderr}"));
    (warning, stderr)
}

/// Asserts that `warning`, written while `req-broken` was served ([`a_failed_render_logged`]), is in that
/// request's span alone, with every field the span had by then.
pub(crate) fn assert_names_the_request(warning: &serde_json::Value) {
    assert_eq!(warning["level"], "WARN", "{warning}");
    let span = &warning["span"];
    assert_eq!(span["name"], "request", "{warning}");
    assert_eq!(span["request_id"], "req-broken", "{warning}");
    assert_eq!(span["method"], "POST", "{warning}");
    assert_eq!(span["route"], "/{agent_id}/mcp", "{warning}");
    assert_eq!(span["agent"], "bot", "{warning}");
    assert_eq!(span["mcp.method"], "resources/read", "{warning}");
    assert_eq!(span["mcp.era"], "legacy", "{warning}");
    // Not answered yet when the line was written.
    assert!(span.get("status").is_none(), "{warning}");
    assert_eq!(warning["spans"].as_array().map(Vec::len), Some(1), "{warning}");
}

/// The receiving end of a channel as a stream (for a request body sent piece by piece).
fn tokio_stream_of<T: Send + 'static>(
    mut receiver: tokio::sync::mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |context| receiver.poll_recv(context))
}
