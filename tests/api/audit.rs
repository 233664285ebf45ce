//! The audit log of MCP requests, and its hash chain as `hivegate audit verify` checks it.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{
    Api, Backend, TempDir, TestApp, eventually, expect_json, expect_problem, list_pages_with, run_hivegate, spawn_app,
    spawn_app_with,
};
use crate::live_client::Legacy;
use crate::mcp_client::{Mcp, agent_with_key};

both!(
    mcp_requests_are_audited,
    session_requests_are_audited_by_the_sessions_digest,
    nul_in_what_a_client_sends_is_audited,
    the_chain_verifies_and_tampering_is_detected,
    many_agents_in_one_batch_verify_one_by_one,
    a_full_queue_refuses_requests_with_reject,
    export_and_retention,
    retention_by_agent,
    audit_pages
);

/// The audit records of `agent` for `method` (an MCP method or an admin action), newest first.
pub async fn records(app: &TestApp, agent: &str, method: &str) -> Vec<Value> {
    let query = [("agent", agent), ("method", method)];
    let response = app.op(Method::GET, "/admin/v1/audit").query(&query).send().await.unwrap();
    let page = expect_json(response, StatusCode::OK).await;
    page["items"].as_array().cloned().unwrap_or_default()
}

/// Waits until `count` records of `method` are written (MCP records are written in batches).
pub async fn written(app: &TestApp, agent: &str, method: &str, count: usize) -> Vec<Value> {
    eventually(&format!("{count} audit record(s) of {method}"), || async {
        let found = records(app, agent, method).await;
        (found.len() >= count).then_some(found)
    })
    .await
}

/// A request naming a legacy session is audited with the hex SHA-256 of the session id it presented (never
/// the id itself), whether or not the session exists and when another agent's key is refused with it; a value
/// that cannot be a session id, and a request without one, are audited with none.
async fn session_requests_are_audited_by_the_sessions_digest(backend: Backend) {
    use sha2::Digest as _;
    let digest = |id: &str| hex::encode(sha2::Sha256::digest(id.as_bytes()));
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    app.put_text("bot", "test://a", "hello").await;
    let client = Legacy::initialize(&app, "bot", &key, "2025-11-25").await;
    assert_eq!(
        client.call("resources/read", json!({"uri": "test://a"})).await.result()["contents"][0]["text"],
        "hello"
    );

    let unknown = format!("hgs_{}", "a".repeat(43));
    let malformed = "not-a-session";
    let mcp = Mcp::new(&app, "bot", &key);
    for (session, method) in [(unknown.as_str(), "resources/list"), (malformed, "prompts/list")] {
        let body = json!({"jsonrpc": "2.0", "id": 2, "method": method});
        let response = mcp
            .post()
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-11-25")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{method} with session {session:?}");
    }
    mcp.legacy("resources/templates/list", json!({})).await.result();
    // Refused before it is admitted (another agent's key): still audited with the digest it presented.
    let intruder = agent_with_key(&app, "intruder").await;
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "ping"});
    let intruding = Mcp::new(&app, "bot", &intruder).post().header("mcp-session-id", &client.session);
    assert_eq!(intruding.json(&body).send().await.unwrap().status(), StatusCode::FORBIDDEN);
    let ended = client.request(Method::DELETE).send().await.unwrap();
    assert_eq!(ended.status(), StatusCode::NO_CONTENT);

    let read = &written(&app, "bot", "resources/read", 1).await[0];
    assert_eq!(read["sessionId"], digest(&client.session), "{read}");
    assert_ne!(read["sessionId"], client.session.as_str());
    let refused = &written(&app, "bot", "resources/list", 1).await[0];
    assert_eq!(refused["sessionId"], digest(&unknown), "{refused}");
    assert_eq!(refused["outcome"], "error", "{refused}");
    let malformed = &written(&app, "bot", "prompts/list", 1).await[0];
    assert!(malformed.get("sessionId").is_none(), "{malformed}");
    let sessionless = &written(&app, "bot", "resources/templates/list", 1).await[0];
    assert!(sessionless.get("sessionId").is_none(), "{sessionless}");
    let deleted = &written(&app, "bot", "DELETE", 1).await[0];
    assert_eq!(deleted["sessionId"], digest(&client.session), "{deleted}");
    let intruded = &written(&app, "bot", "-", 1).await[0];
    assert_eq!(intruded["target"], "agent:intruder", "{intruded}");
    assert_eq!(intruded["sessionId"], digest(&client.session), "{intruded}");
}

async fn mcp_requests_are_audited(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    app.put_text("bot", "test://a", "hello").await;
    let mcp = Mcp::new(&app, "bot", &key);

    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "resources/read", "params": {"uri": "test://a"}});
    let response = mcp
        .post()
        .header("user-agent", "audit-test/1.0")
        .header("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        .header("x-request-id", "req-audit-1")
        .json(&body)
        .send()
        .await
        .unwrap();
    let answer = expect_json(response, StatusCode::OK).await;
    assert_eq!(answer["result"]["contents"][0]["text"], "hello");
    mcp.legacy("no/such/method", json!({})).await;
    mcp.legacy("resources/list", json!({})).await;

    let read = &written(&app, "bot", "resources/read", 1).await[0];
    assert_eq!(read["kind"], "mcp");
    assert_eq!(read["agentId"], "bot");
    assert_eq!(read["action"], "resources/read");
    assert_eq!(read["method"], "resources/read");
    assert_eq!(read["target"], "test://a");
    assert_eq!(read["outcome"], "ok");
    assert!(read.get("errorCode").is_none(), "{read}");
    let key_id = read["keyId"].as_str().expect("keyId");
    assert_eq!(read["actor"], format!("key:{key_id}"));
    assert_eq!(read["keyPrefix"].as_str(), Some(&key[..12]));
    assert!(read["bytesOut"].as_i64().is_some_and(|bytes| bytes > 0), "{read}");
    assert!(read["latencyUs"].as_i64().is_some_and(|us| us >= 0), "{read}");
    assert_eq!(read["clientIp"], "127.0.0.1");
    assert_eq!(read["userAgent"], "audit-test/1.0");
    assert_eq!(read["requestId"], "req-audit-1");
    assert_eq!(read["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert!(read["hash"].as_str().is_some_and(|hash| hash.len() == 64), "{read}");

    let failed = &written(&app, "bot", "no/such/method", 1).await[0];
    assert_eq!(failed["outcome"], "error");
    assert_eq!(failed["errorCode"], -32601);
    written(&app, "bot", "resources/list", 1).await;

    // Refused before the key was accepted: no agent's record.
    let response = app.with_key(Method::POST, "/bot/mcp", "bak_wrong").json(&body).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let all = written(&app, "bot", "resources/read", 1).await;
    assert_eq!(all.len(), 1, "only the accepted read is recorded: {all:?}");

    // Another agent's records are not in this agent's log.
    let other = agent_with_key(&app, "other").await;
    Mcp::new(&app, "other", &other).legacy("resources/list", json!({})).await;
    written(&app, "other", "resources/list", 1).await;
    assert!(written(&app, "bot", "resources/list", 1).await.iter().all(|record| record["agentId"] == "bot"));
}

/// A JSON string may hold `\u0000`, which PostgreSQL's text refuses: the record keeps it escaped, and the
/// batch it is written in (with the records around it) is stored at once, not retried forever.
async fn nul_in_what_a_client_sends_is_audited(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    mcp.legacy("resources/list", json!({})).await;
    let answer = mcp.legacy("resources/read", json!({"uri": "test://a\u{0}b"})).await;
    assert!(answer.body["error"]["code"].is_i64(), "{}", answer.body);
    mcp.legacy("resources/list", json!({})).await;
    mcp.legacy("no/such\u{0}method", json!({})).await;

    let read = &written(&app, "bot", "resources/read", 1).await[0];
    assert_eq!(read["target"], "test://a\\u0000b");
    assert_eq!(read["outcome"], "error");
    written(&app, "bot", "resources/list", 2).await;
    let unknown = &written(&app, "bot", "no/such\\u0000method", 1).await[0];
    assert_eq!(unknown["errorCode"], -32601);
    let metrics = app.anon(Method::GET, "/metrics").send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("hivegate_audit_batches_failed_total 0"), "{metrics}");
}

async fn the_chain_verifies_and_tampering_is_detected(backend: Backend) {
    // Five requests make a batch, and a batch of one agent is one row of the writer's stream.
    let app = spawn_app_with(backend, |config| {
        config.audit.batch_size = 5;
        config.audit.flush_interval_ms = 3_600_000;
    })
    .await;
    let dir = TempDir::new();
    let key = agent_with_key(&app, "bot").await;
    app.put_text("bot", "test://a", "a").await;
    let mcp = Mcp::new(&app, "bot", &key);
    for _ in 0..10 {
        mcp.legacy("resources/list", json!({})).await;
    }
    // The listing gives each record in the stream its hash, which the rows do not store, linked to the hash
    // before it: the first to the stream's id (a UUID).
    let mut listed = written(&app, "bot", "resources/list", 10).await;
    listed.sort_by_key(|record| record["chainSeq"].as_i64());
    assert!(listed[0]["prevHash"].as_str().is_some_and(|id| uuid::Uuid::parse_str(id).is_ok()), "{}", listed[0]);
    for (n, record) in listed.iter().enumerate() {
        assert_eq!(record["chainSeq"], n as i64 + 1);
        assert!(record["hash"].as_str().is_some_and(|hash| hash.len() == 64), "{record}");
    }
    for pair in listed.windows(2) {
        assert_eq!(pair[1]["prevHash"], pair[0]["hash"]);
    }

    let verify = || run_hivegate(dir.path(), app.db.url(), &["audit", "verify"]);
    let output = verify().await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    // agent.create, key.create, resource.put (the agent's own chain) and ten MCP requests (the stream's).
    assert!(stdout.contains("ok      bot: 13 records"), "{stdout}");

    // A row past the stream's head (which its writer moves in the row's own transaction) was added from
    // outside: rows a live writer stores while verification runs move the head with them, and pass.
    app.db
        .execute("update audit_stream set last_seq = 1, last_hash = (select hash from audit_batch where seq = 1)")
        .await;
    let output = verify().await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(!output.status.success(), "{stdout}");
    assert!(stdout.contains("BROKEN  stream ") && stdout.contains("row 2 lies past the stream's head (1)"), "{stdout}");
    app.db
        .execute("update audit_stream set last_seq = 2, last_hash = (select hash from audit_batch where seq = 2)")
        .await;
    assert!(verify().await.status.success());

    // Deleting the newest records (the stream's newest row) is caught by the stream's head.
    app.db.execute("delete from audit_batch where seq = 2").await;
    let output = verify().await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(!output.status.success(), "{stdout}");
    assert!(stdout.contains("BROKEN  stream ") && stdout.contains("newer rows were deleted"), "{stdout}");

    // An edited record breaks its hash: in the stream's row (where the agent's chain no longer ends at the
    // hash the row's heads give), and in the agent's own chain (the resource.put, below).
    app.db
        .execute("update audit_batch set records = replace(records, '\"resources/list\"', '\"resources/lost\"')")
        .await;
    let stdout = String::from_utf8_lossy(&verify().await.stdout).into_owned();
    assert!(stdout.contains("BROKEN  bot:") && stdout.contains("a record was altered"), "{stdout}");
    app.db
        .execute("update audit_batch set records = replace(records, '\"resources/lost\"', '\"resources/list\"')")
        .await;

    // A record deleted from the middle of a row leaves a gap in the agent's chain.
    app.db
        .execute(match backend {
            Backend::Sqlite => "update audit_batch set records = json_remove(records, '$[2]') where seq = 1",
            Backend::Postgres => {
                "update audit_batch set records = (select json_agg(value)::text from \
                 json_array_elements(records::json) with ordinality as stored (value, n) where n <> 3) where seq = 1"
            }
        })
        .await;
    let stdout = String::from_utf8_lossy(&verify().await.stdout).into_owned();
    assert!(stdout.contains("BROKEN  bot:") && stdout.contains("position 4, expected 3"), "{stdout}");

    app.db.execute("delete from audit_batch").await;
    app.db
        .execute(
            "update audit_segment set records = replace(records, '\"test://a\"', '\"test://forged\"') \
             where agent_id = 'bot' and first_seq = 3",
        )
        .await;
    let stdout = String::from_utf8_lossy(&verify().await.stdout).into_owned();
    assert!(stdout.contains("(position 3)") && stdout.contains("altered"), "{stdout}");

    // So does a deleted one.
    app.db.execute("delete from audit_segment where agent_id = 'bot' and first_seq = 2").await;
    let stdout = String::from_utf8_lossy(&verify().await.stdout).into_owned();
    assert!(stdout.contains("expected 2") && stdout.contains("missing"), "{stdout}");
}

/// Requests of many agents written in one batch: every agent's records verify, and one agent's on their own,
/// without reading the others' (here made unreadable), while the others' damage shows in theirs.
async fn many_agents_in_one_batch_verify_one_by_one(backend: Backend) {
    const AGENTS: usize = 40;
    let app = spawn_app_with(backend, |config| {
        config.audit.batch_size = AGENTS * 2;
        config.audit.flush_interval_ms = 3_600_000;
    })
    .await;
    let dir = TempDir::new();
    let mut clients = Vec::new();
    for n in 0..AGENTS {
        let agent = format!("agent-{n:02}");
        let key = agent_with_key(&app, &agent).await;
        clients.push((agent, key));
    }
    // "agent-00" and the agent whose records are damaged below are in different buckets.
    let bucket = hivegate::audit::stream::bucket_of;
    let damaged = clients
        .iter()
        .map(|(agent, _)| agent.clone())
        .find(|agent| bucket(agent) != bucket("agent-00"))
        .expect("another bucket");
    for round in 0..2 {
        for (agent, key) in &clients {
            Mcp::new(&app, agent, key).legacy("resources/list", json!({ "round": round })).await;
        }
    }
    for (agent, _) in &clients {
        written(&app, agent, "resources/list", 2).await;
    }
    let rows = app.db.count("select count(*) from audit_batch").await;
    assert!(rows <= 64, "one batch is at most a row per bucket: {rows}");

    let verify = |agent: Option<&str>| {
        let mut args = vec!["audit", "verify"];
        args.extend(agent.map(|agent| ["--agent", agent]).into_iter().flatten());
        let (dir, url) = (dir.path().to_owned(), app.db.url().to_owned());
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let output = run_hivegate(&dir, &url, &args).await;
            (output.status.success(), String::from_utf8_lossy(&output.stdout).into_owned())
        }
    };
    let (ok, stdout) = verify(None).await;
    assert!(ok, "{stdout}");
    assert_eq!(stdout.lines().filter(|line| line.ends_with(": 4 records")).count(), AGENTS, "{stdout}");

    // Every row but agent-00's no longer holds readable records.
    app.db.execute("update audit_batch set records = 'not json' where heads not like '%[\"agent-00\",%'").await;
    let (ok, stdout) = verify(Some("agent-00")).await;
    assert!(ok, "{stdout}");
    assert!(stdout.contains("ok      agent-00: 4 records"), "{stdout}");
    let (ok, _) = verify(Some(&damaged)).await;
    assert!(!ok, "the damaged agent's records do not verify");
    // One agent's listing reads its own bucket only.
    assert_eq!(records(&app, "agent-00", "resources/list").await.len(), 2);
}

async fn export_and_retention(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        config.audit.retention_days = 1;
        config.events.prune_interval_ms = 100;
        // Each MCP request's record a segment of its own: retention deletes whole segments.
        config.audit.batch_size = 1;
    })
    .await;
    let dir = TempDir::new();
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    for _ in 0..4 {
        mcp.legacy("resources/list", json!({})).await;
    }
    written(&app, "bot", "resources/list", 4).await;

    // The export streams every record as one JSON object per line, newest first, with the filters.
    let response = app.op(Method::GET, "/admin/v1/audit/export").query(&[("agent", "bot")]).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let text = response.text().await.unwrap();
    let lines: Vec<Value> = text.lines().map(|line| serde_json::from_str(line).expect("a JSON line")).collect();
    // agent.create, key.create and the four requests.
    assert_eq!(lines.len(), 6, "{text}");
    // The four requests in the writer's stream, the admin changes in the agent's own chain.
    let seqs: Vec<i64> = lines.iter().filter_map(|record| record["chainSeq"].as_i64()).collect();
    assert_eq!(seqs, [4, 3, 2, 1, 2, 1]);
    let response = app
        .op(Method::GET, "/admin/v1/audit/export")
        .query(&[("agent", "bot"), ("method", "resources/list")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.text().await.unwrap().lines().count(), 4);
    let response = app.op(Method::GET, "/admin/v1/audit/export").query(&[("since", "soon")]).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let response = app.with_key(Method::GET, "/admin/v1/audit/export", &key).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);

    // An agent whose own retention (admin API) is longer than the configuration's.
    let response = app
        .op(Method::POST, "/admin/v1/agents")
        .json(&json!({"id": "kept", "name": "Kept", "auditRetentionDays": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(expect_json(response, StatusCode::CREATED).await["auditRetentionDays"], 3);
    let exported = |agent: &'static str| {
        let app = &app;
        async move {
            let response = app.op(Method::GET, "/admin/v1/audit/export").query(&[("agent", agent)]).send().await;
            response.unwrap().text().await.unwrap().lines().count()
        }
    };
    assert_eq!(exported("kept").await, 1, "agent.create");

    // Records older than the retention are pruned from the start of the chain; the rest still verifies.
    app.db.execute(AGE_FIRST_THREE_BY_TWO_DAYS).await;
    app.db.execute(AGE_FIRST_STREAM_ROW_BY_TWO_DAYS).await;
    eventually("the three old records to be pruned", || async { (exported("bot").await == 3).then_some(()) }).await;
    // The same prune kept the other agent's two-day-old record: its own 3 days win over the configured 1.
    assert_eq!(exported("kept").await, 1);
    let response = app.op(Method::PATCH, "/admin/v1/agents/kept").json(&json!({"auditRetentionDays": 1})).send();
    assert_eq!(expect_json(response.await.unwrap(), StatusCode::OK).await["auditRetentionDays"], 1);
    // agent.create (two days old) and agent.update (now): only the update is left once the shorter retention
    // applies.
    eventually("the kept agent's old record to be pruned", || async {
        let response = app.op(Method::GET, "/admin/v1/audit/export").query(&[("agent", "kept")]).send().await;
        let text = response.unwrap().text().await.unwrap();
        let actions: Vec<String> = text
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).expect("a JSON line")["action"].to_string())
            .collect();
        (actions == [r#""agent.update""#]).then_some(())
    })
    .await;
    let output = run_hivegate(dir.path(), app.db.url(), &["audit", "verify", "--agent", "bot"]).await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("ok      bot: 3 records"), "{stdout}");
}

/// Each agent's admin records are pruned to its own retention: its stored `auditRetentionDays`, else the
/// configuration's exception for it, else `audit.retention_days`; a deleted agent's by the configuration.
async fn retention_by_agent(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        config.audit.retention_days = 3;
        config.audit.agent_retention_days.insert("brief".to_owned(), 1);
        config.audit.agent_retention_days.insert("forever".to_owned(), 0);
        // An exception for an agent whose own stored retention wins over it.
        config.audit.agent_retention_days.insert("stored".to_owned(), 5);
        config.events.prune_interval_ms = 100;
    })
    .await;
    // "short" keeps its records for a day by its own retention, shorter than anything configured, and
    // "keeper" forever by its own.
    let agents = [
        ("plain", None),
        ("brief", None),
        ("forever", None),
        ("stored", Some(1)),
        ("short", Some(1)),
        ("keeper", Some(0)),
        ("gone", Some(1)),
    ];
    for (agent, days) in agents {
        let mut body = json!({"id": agent, "name": agent});
        if let Some(days) = days {
            body["auditRetentionDays"] = json!(days);
        }
        let response = app.op(Method::POST, "/admin/v1/agents").json(&body).send().await.unwrap();
        expect_json(response, StatusCode::CREATED).await;
        app.put_text(agent, "test://a", "x").await;
    }
    // Deleted, "gone" keeps its records, now by the configured three days rather than its own one.
    let response = app.op(Method::DELETE, "/admin/v1/agents/gone").send().await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let actions = |agent: &'static str| {
        let app = &app;
        async move {
            let response = app.op(Method::GET, "/admin/v1/audit/export").query(&[("agent", agent)]).send().await;
            let text = response.unwrap().text().await.unwrap();
            let mut actions: Vec<String> = text
                .lines()
                .map(|line| {
                    serde_json::from_str::<Value>(line).expect("a JSON line")["action"].as_str().unwrap().to_owned()
                })
                .collect();
            actions.reverse();
            actions
        }
    };
    assert_eq!(actions("gone").await, ["agent.create", "resource.put", "agent.delete"]);

    // Every agent's agent.create two days old: past one day (brief by its exception, stored and short by
    // their own retention), within three (plain, gone) and forever.
    app.db.execute(AGE_FIRST_BY_TWO_DAYS).await;
    eventually("the one-day-old records to be pruned", || async {
        let pruned = ["brief", "stored", "short"];
        let mut left = Vec::new();
        for agent in pruned {
            left.push(actions(agent).await);
        }
        left.iter().all(|actions| actions == &["resource.put"]).then_some(())
    })
    .await;
    // Sweeps every 100 ms: a few more have passed, and kept the others.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(actions("plain").await, ["agent.create", "resource.put"]);
    assert_eq!(actions("forever").await, ["agent.create", "resource.put"]);
    assert_eq!(actions("gone").await, ["agent.create", "resource.put", "agent.delete"]);

    // Four days old: past the configured three.
    app.db.execute(AGE_FIRST_BY_TWO_DAYS).await;
    eventually("the three-day records to be pruned", || async {
        (actions("plain").await == ["resource.put"] && actions("gone").await == ["resource.put", "agent.delete"])
            .then_some(())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(actions("forever").await, ["agent.create", "resource.put"]);
    assert_eq!(actions("keeper").await, ["agent.create", "resource.put"]);
    let dir = TempDir::new();
    // The pruned chains verify from their anchors. "forever" and "keeper" kept the record this test aged,
    // which is an alteration that verification finds.
    let output = run_hivegate(dir.path(), app.db.url(), &["audit", "verify"]).await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    for line in
        ["ok      brief: 1 records", "ok      stored: 1 records", "ok      plain: 1 records", "ok      gone: 2 records"]
    {
        assert!(stdout.contains(line), "{stdout}");
    }
    assert!(stdout.contains("ok      short: 1 records"), "{stdout}");
    assert!(stdout.contains("BROKEN  forever: record") && stdout.contains("BROKEN  keeper: record"), "{stdout}");
    assert!(!output.status.success(), "{stdout}");
}

/// The listing pages in its order (time desc, id desc) with cursors that carry the position, also through
/// records of the same time, and across agents; a cursor of one agent's listing is refused for another's.
async fn audit_pages(backend: Backend) {
    // The tied records are given a time years past the default retention: kept forever, so that the pruner
    // (it runs at start and then every minute) cannot take them, and the chain before them, mid-test.
    let app = spawn_app_with(backend, |config| config.audit.retention_days = 0).await;
    agent_with_key(&app, "bot").await;
    agent_with_key(&app, "other").await;
    for i in 0..5 {
        app.put_text("bot", &format!("test://{i}"), "x").await;
    }
    // bot: agent.create, key.create and five resource.put; other: agent.create and key.create. Four of bot's
    // records get one time, so that only the id orders them.
    app.db.execute(ONE_TIME_FOR_FOUR).await;
    let everything = |agent: Option<&'static str>| {
        let app = &app;
        async move {
            let mut query = vec![("limit", "1000".to_owned())];
            query.extend(agent.map(|agent| ("agent", agent.to_owned())));
            let response = app.op(Method::GET, "/admin/v1/audit").query(&query).send().await.unwrap();
            expect_json(response, StatusCode::OK).await["items"].as_array().cloned().unwrap_or_default()
        }
    };
    for agent in [Some("bot"), None] {
        let all = everything(agent).await;
        assert_eq!(all.len(), if agent.is_some() { 7 } else { 9 });
        let keys: Vec<(String, String)> = all
            .iter()
            .map(|record| {
                (record["occurredAt"].as_str().unwrap().to_owned(), record["id"].as_str().unwrap().to_owned())
            })
            .collect();
        // Times at the API's millisecond precision never increase; the four of one time come by id, desc.
        assert!(keys.windows(2).all(|pair| pair[0].0 >= pair[1].0), "not newest first: {keys:?}");
        let tied: Vec<&String> =
            keys.iter().filter(|(time, _)| time == "2023-11-14T22:13:20.000Z").map(|(_, id)| id).collect();
        assert_eq!(tied.len(), 4, "{keys:?}");
        assert!(tied.windows(2).all(|pair| pair[0] > pair[1]), "ties not by id desc: {keys:?}");
        for limit in [1, 2, 3] {
            let pages = list_pages_with(
                |cursor| {
                    let mut query = vec![("limit", limit.to_string())];
                    query.extend(agent.map(|agent| ("agent", agent.to_owned())));
                    query.extend(cursor.map(|cursor| ("cursor", cursor)));
                    app.op(Method::GET, "/admin/v1/audit").query(&query)
                },
                Some(limit),
            )
            .await;
            let paged: Vec<Value> = pages.into_iter().flatten().collect();
            assert_eq!(paged, all, "pages of {limit} for {agent:?}");
        }
    }
    // A cursor is bound to the listing it came from.
    let response = app.op(Method::GET, "/admin/v1/audit").query(&[("agent", "bot"), ("limit", "1")]).send().await;
    let cursor = expect_json(response.unwrap(), StatusCode::OK).await["nextCursor"].as_str().unwrap().to_owned();
    let query = [("agent", "other"), ("cursor", cursor.as_str())];
    let response = app.op(Method::GET, "/admin/v1/audit").query(&query).send().await.unwrap();
    expect_problem(response, StatusCode::BAD_REQUEST).await;
}

/// With `audit.on_overload = "reject"`, a request that finds the audit queue full is refused with 503,
/// `Retry-After` and -31503 instead of being served unaudited, and counted; once the writer catches up,
/// requests are served again and every served request was audited.
async fn a_full_queue_refuses_requests_with_reject(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        config.audit.queue_capacity = Some(1);
        config.audit.batch_size = 1;
        config.audit.on_overload = hivegate::config::OnOverload::Reject;
    })
    .await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    // The writer's table goes away before its first write: it holds its batch and retries.
    app.db.execute("alter table audit_batch rename to audit_away").await;
    let metric = |name: &'static str| {
        let app = &app;
        async move {
            let metrics = app.anon(Method::GET, "/metrics").send().await.unwrap().text().await.unwrap();
            let line = metrics.lines().find(|line| line.starts_with(name)).map(str::to_owned);
            line.and_then(|line| line.rsplit(' ').next()?.parse::<u64>().ok()).unwrap_or_default()
        }
    };
    // The first record is taken by the writer, which keeps failing to write it.
    assert_eq!(mcp.legacy("resources/list", json!({})).await.status, StatusCode::OK);
    eventually("a failed batch", || async { (metric("hivegate_audit_batches_failed_total").await > 0).then_some(()) })
        .await;
    // The second fills the queue; the third finds it full.
    assert_eq!(mcp.legacy("resources/list", json!({})).await.status, StatusCode::OK);
    let refused = mcp.legacy("resources/list", json!({})).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers["retry-after"], "1");
    assert_eq!(refused.body["error"]["code"], -31503, "{:?}", refused.body);
    assert_eq!(metric("hivegate_audit_requests_rejected_total").await, 1);
    assert_eq!(metric("hivegate_audit_records_dropped_total").await, 0);

    app.db.execute("alter table audit_away rename to audit_batch").await;
    written(&app, "bot", "resources/list", 2).await;
    assert_eq!(mcp.legacy("resources/list", json!({})).await.status, StatusCode::OK);
    written(&app, "bot", "resources/list", 3).await;
    assert_eq!(metric("hivegate_audit_records_dropped_total").await, 0);
}

/// Makes the first row of every writer stream (one record: the batch size is 1) two days older.
const AGE_FIRST_STREAM_ROW_BY_TWO_DAYS: &str = "update audit_batch \
     set records = replace(records, ',' || first_at || ',', ',' || (first_at - 172800000000) || ','), \
     first_at = first_at - 172800000000, last_at = last_at - 172800000000 where seq = 1";

/// Makes the first record of every agent's own chain (a segment of one) two days older.
const AGE_FIRST_BY_TWO_DAYS: &str = "update audit_segment \
     set records = replace(records, ',' || first_at || ',', ',' || (first_at - 172800000000) || ','), \
     first_at = first_at - 172800000000, last_at = last_at - 172800000000 \
     where first_seq = 1 and last_seq = 1";

/// Makes the records at positions 1 to 3 of every agent's own chain two days older (each a segment of one
/// record).
const AGE_FIRST_THREE_BY_TWO_DAYS: &str = "update audit_segment \
     set records = replace(records, ',' || first_at || ',', ',' || (first_at - 172800000000) || ','), \
     first_at = first_at - 172800000000, last_at = last_at - 172800000000 \
     where first_seq between 1 and 3 and last_seq = first_seq";

/// Gives bot's records at positions 2 to 5 (admin changes, a segment each) one time.
const ONE_TIME_FOR_FOUR: &str = "update audit_segment \
     set records = replace(records, ',' || first_at || ',', ',1700000000000000,'), \
     first_at = 1700000000000000, last_at = 1700000000000000 \
     where agent_id = 'bot' and first_seq between 2 and 5 and last_seq = first_seq";
