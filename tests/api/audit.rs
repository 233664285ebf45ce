//! The audit log of MCP requests, and its hash chain as `hivegate audit verify` checks it.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{
    Api, Backend, TempDir, TestApp, eventually, expect_json, expect_problem, list_pages_with, run_hivegate, spawn_app,
    spawn_app_with,
};
use crate::mcp_client::{Mcp, agent_with_key};

both!(
    mcp_requests_are_audited,
    nul_in_what_a_client_sends_is_audited,
    the_chain_verifies_and_tampering_is_detected,
    export_and_retention,
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
    let app = spawn_app(backend).await;
    let dir = TempDir::new();
    let key = agent_with_key(&app, "bot").await;
    app.put_text("bot", "test://a", "a").await;
    let mcp = Mcp::new(&app, "bot", &key);
    for _ in 0..3 {
        mcp.legacy("resources/list", json!({})).await;
    }
    written(&app, "bot", "resources/list", 3).await;

    let verify = || run_hivegate(dir.path(), app.db.url(), &["audit", "verify"]);
    let output = verify().await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    // agent.create, key.create, resource.put and three MCP requests.
    assert!(stdout.contains("ok      bot: 6 records"), "{stdout}");

    // Deleting the newest record (with the segment that holds it) is caught by the chain's head.
    app.db.execute("delete from audit_segment where agent_id = 'bot' and last_seq = 6").await;
    let output = verify().await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(!output.status.success(), "{stdout}");
    assert!(stdout.contains("BROKEN  bot:") && stdout.contains("newer records were deleted"), "{stdout}");

    // An edited record (the resource.put, a segment of its own) breaks the chain where it is.
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
    let seqs: Vec<i64> = lines.iter().filter_map(|record| record["chainSeq"].as_i64()).collect();
    assert_eq!(seqs, [6, 5, 4, 3, 2, 1]);
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

/// The listing pages in its order (time desc, id desc) with cursors that carry the position, also through
/// records of the same time, and across agents; a cursor of one agent's listing is refused for another's.
async fn audit_pages(backend: Backend) {
    let app = spawn_app(backend).await;
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

/// Makes the records at positions 1 to 3 of every chain two days older (each a segment of one record).
const AGE_FIRST_THREE_BY_TWO_DAYS: &str = "update audit_segment \
     set records = replace(records, ',' || first_at || ',', ',' || (first_at - 172800000000) || ','), \
     first_at = first_at - 172800000000, last_at = last_at - 172800000000 \
     where first_seq between 1 and 3 and last_seq = first_seq";

/// Gives bot's records at positions 2 to 5 (admin changes, a segment each) one time.
const ONE_TIME_FOR_FOUR: &str = "update audit_segment \
     set records = replace(records, ',' || first_at || ',', ',1700000000000000,'), \
     first_at = 1700000000000000, last_at = 1700000000000000 \
     where agent_id = 'bot' and first_seq between 2 and 5 and last_seq = first_seq";
