//! The MCP endpoint's two eras: detection (envelope, protocol header, plain curl), the lifecycle methods of
//! each, header validation, unknown methods, batches, and the HTTP methods that are not served yet.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Api, Backend, spawn_app};
use crate::mcp_client::{Answer, Mcp, SUPPORTED, after_write, agent_with_key, envelope};

both!(
    modern_discover,
    legacy_lifecycle,
    era_detection,
    modern_header_validation,
    unknown_and_era_bound_methods,
    batches_only_in_2025_03_26,
    response_formats
);

async fn modern_discover(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    let answer = mcp.modern("server/discover", json!({})).await;
    assert_eq!(answer.content_type(), "application/json");
    assert!(answer.headers.get("mcp-session-id").is_none());
    assert_eq!(answer.body["id"], 7);
    assert_eq!(
        *answer.result(),
        json!({
            "resultType": "complete",
            "supportedVersions": SUPPORTED,
            "capabilities": {"resources": {"subscribe": true, "listChanged": true},
                "prompts": {"listChanged": true}, "completions": {}},
            "instructions": "Serves bot.",
            "ttlMs": 0,
            "cacheScope": "private",
            "_meta": {"io.modelcontextprotocol/serverInfo":
                {"name": "hivegate", "version": env!("CARGO_PKG_VERSION"), "title": "Agent bot"}}
        })
    );
    // An agent's cacheTtlMs is the ttlMs hint.
    let response =
        app.op(Method::PATCH, "/admin/v1/agents/bot").json(&json!({"cacheTtlMs": 60000})).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    after_write(backend, "the new cacheTtlMs", || async {
        let answer = mcp.modern("server/discover", json!({})).await;
        (answer.result()["ttlMs"] == 60000).then_some(())
    })
    .await;
}

async fn legacy_lifecycle(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    let initialize = |version: &str| json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
    for (requested, answered) in [
        ("2025-06-18", "2025-06-18"),
        ("2024-11-05", "2024-11-05"),
        ("2025-11-25", "2025-11-25"),
        ("2099-01-01", "2025-11-25"),
        ("2026-07-28", "2025-11-25"),
    ] {
        let answer = mcp.legacy("initialize", initialize(requested)).await;
        let session = answer.headers.get("mcp-session-id").expect("initialize issues a session");
        let session = session.to_str().expect("visible ASCII");
        assert!(session.len() >= 32 && session.bytes().all(|b| (0x21..0x7f).contains(&b)), "{session}");
        assert_eq!(
            *answer.result(),
            json!({
                "protocolVersion": answered,
                "capabilities": {"resources": {"subscribe": true, "listChanged": true},
                    "prompts": {"listChanged": true}, "completions": {}, "logging": {}},
                "serverInfo": {"name": "hivegate", "version": env!("CARGO_PKG_VERSION"), "title": "Agent bot"},
                "instructions": "Serves bot."
            }),
            "initialize {requested}"
        );
    }
    // initialize without its required params is -32602.
    mcp.legacy("initialize", json!({})).await.error(StatusCode::OK, -32602);

    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let response = mcp.post().header("mcp-protocol-version", "2025-11-25").json(&initialized).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert!(response.text().await.unwrap().is_empty());

    assert_eq!(*mcp.legacy_at("2025-11-25", "ping", json!({})).await.result(), json!({}));
    assert_eq!(*mcp.legacy("logging/setLevel", json!({"level": "warning"})).await.result(), json!({}));
    mcp.legacy("logging/setLevel", json!({"level": "loud"})).await.error(StatusCode::OK, -32602);
    // A client's response to nothing is accepted too (legacy clients may post responses).
    let response = mcp.post().json(&json!({"jsonrpc": "2.0", "id": 5, "result": {}})).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
}

async fn era_detection(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    app.put_text("bot", "test://a", "alpha").await;

    // Plain curl: no envelope, header or session, any Content-Type, Accept */* → legacy JSON, no resultType.
    let body = r#"{"jsonrpc":"2.0","id":"curl","method":"resources/list"}"#;
    for content_type in ["application/json", "application/x-www-form-urlencoded", "text/plain"] {
        let response =
            mcp.post().header("content-type", content_type).header("accept", "*/*").body(body).send().await.unwrap();
        let answer = Answer::of(response).await;
        assert_eq!(answer.content_type(), "application/json");
        assert_eq!(answer.body["id"], "curl");
        assert!(answer.result().get("resultType").is_none(), "legacy results have no resultType");
        assert!(answer.result().get("ttlMs").is_none());
        assert_eq!(answer.result()["resources"][0]["uri"], "test://a");
    }
    // No Accept at all is JSON too.
    let answer = Answer::of(mcp.post().body(body).send().await.unwrap()).await;
    assert_eq!(answer.content_type(), "application/json");

    // A legacy protocol header: legacy; an unsupported one: 400/-32022 with the supported list.
    let answer = mcp.legacy_at("2025-06-18", "resources/list", json!({})).await;
    assert!(answer.result().get("resultType").is_none());
    let answer = mcp.legacy_at("1999-01-01", "resources/list", json!({})).await;
    let error = answer.error(StatusCode::BAD_REQUEST, -32022);
    assert_eq!(error["data"]["supported"], json!(SUPPORTED));
    assert_eq!(error["data"]["requested"], "1999-01-01");
    assert_eq!(answer.body["id"], 1);

    // The envelope makes it modern: resultType and caching hints.
    let answer = mcp.modern("resources/list", json!({})).await;
    assert_eq!(answer.result()["resultType"], "complete");
    assert_eq!(answer.result()["ttlMs"], 0);
    assert_eq!(answer.result()["cacheScope"], "private");
    assert_eq!(answer.result()["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "hivegate");

    // A 2026-07-28 header without the envelope is modern and malformed: -32602 with HTTP 400.
    let response = mcp
        .post()
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "resources/list")
        .json(&json!({"jsonrpc": "2.0", "id": 3, "method": "resources/list"}))
        .send()
        .await
        .unwrap();
    let answer = Answer::of(response).await;
    answer.error(StatusCode::BAD_REQUEST, -32602);
    assert_eq!(answer.body["id"], 3);
}

async fn modern_header_validation(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    app.put_text("bot", "test://cafe", "accented").await;
    let read = json!({"jsonrpc": "2.0", "id": 9, "method": "resources/read",
        "params": {"uri": "test://cafe", "_meta": envelope()}});
    let send = |headers: Vec<(&'static str, &'static str)>| {
        let mut request = mcp.post();
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let body = read.clone();
        async move { Answer::of(request.json(&body).send().await.unwrap()).await }
    };
    // Clients may always use the sentinel encoding; the server decodes before comparing.
    let encoded = "=?base64?dGVzdDovL2NhZmU=?=";

    let ok =
        send(vec![("mcp-protocol-version", "2026-07-28"), ("mcp-method", "resources/read"), ("mcp-name", encoded)])
            .await;
    assert_eq!(ok.result()["contents"][0]["text"], "accented");
    for (case, headers) in [
        ("no version header", vec![("mcp-method", "resources/read"), ("mcp-name", encoded)]),
        (
            "disagreeing version",
            vec![("mcp-protocol-version", "2025-11-25"), ("mcp-method", "resources/read"), ("mcp-name", encoded)],
        ),
        ("no method header", vec![("mcp-protocol-version", "2026-07-28"), ("mcp-name", encoded)]),
        (
            "wrong method header",
            vec![("mcp-protocol-version", "2026-07-28"), ("mcp-method", "prompts/get"), ("mcp-name", encoded)],
        ),
        ("no name header", vec![("mcp-protocol-version", "2026-07-28"), ("mcp-method", "resources/read")]),
        (
            "wrong name",
            vec![("mcp-protocol-version", "2026-07-28"), ("mcp-method", "resources/read"), ("mcp-name", "test://caff")],
        ),
        (
            "bad base64",
            vec![
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "resources/read"),
                ("mcp-name", "=?base64?@@@?="),
            ],
        ),
    ] {
        let answer = send(headers).await;
        answer.error(StatusCode::BAD_REQUEST, -32020);
        assert_eq!(answer.body["id"], 9, "{case}: the request's id is kept");
    }

    // An unsupported modern version, in header and envelope alike: -32022 echoing it.
    let mut meta = envelope();
    meta["io.modelcontextprotocol/protocolVersion"] = json!("v999.0.0");
    let response = mcp
        .post()
        .header("mcp-protocol-version", "v999.0.0")
        .header("mcp-method", "server/discover")
        .json(&json!({"jsonrpc": "2.0", "id": 301, "method": "server/discover", "params": {"_meta": meta}}))
        .send()
        .await
        .unwrap();
    let answer = Answer::of(response).await;
    let error = answer.error(StatusCode::BAD_REQUEST, -32022);
    assert_eq!(error["data"], json!({"supported": SUPPORTED, "requested": "v999.0.0"}));
    assert_eq!(answer.body["id"], 301);

    // Required _meta fields: -32602 with HTTP 400.
    for meta in [json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"}), json!({})] {
        let response = mcp
            .post()
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "server/discover")
            .json(&json!({"jsonrpc": "2.0", "id": 104, "method": "server/discover", "params": {"_meta": meta}}))
            .send()
            .await
            .unwrap();
        Answer::of(response).await.error(StatusCode::BAD_REQUEST, -32602);
    }

    // A modern notification needs no Mcp-Method header: 202.
    let response = mcp
        .post()
        .header("mcp-protocol-version", "2026-07-28")
        .json(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
}

async fn unknown_and_era_bound_methods(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    // Modern: unknown or legacy-only methods are 404/-32601 with the request's id.
    for method in ["unknown/method", "initialize", "ping", "logging/setLevel", "resources/subscribe", "tools/list"] {
        let answer = mcp.modern(method, json!({})).await;
        answer.error(StatusCode::NOT_FOUND, -32601);
        assert_eq!(answer.body["id"], 7, "{method}");
    }
    // Legacy: 200/-32601, for unknown and modern-only methods alike.
    for method in ["unknown/method", "server/discover", "subscriptions/listen", "tools/call"] {
        let answer = mcp.legacy(method, json!({"uri": "test://a"})).await;
        answer.error(StatusCode::OK, -32601);
        assert_eq!(answer.body["id"], 1);
    }
    // Subscriptions belong to a session: without one they are 400/-32600 (see live_sessions).
    for method in ["resources/subscribe", "resources/unsubscribe"] {
        let answer = mcp.legacy(method, json!({"uri": "test://a"})).await;
        answer.error(StatusCode::BAD_REQUEST, -32600);
        assert_eq!(answer.body["id"], 1);
    }
    // A known method with bad params is -32602, not -32601.
    mcp.legacy("resources/read", json!({"uri": 5})).await.error(StatusCode::OK, -32602);
    mcp.legacy("resources/read", json!({})).await.error(StatusCode::OK, -32602);
    mcp.legacy("prompts/get", json!({"name": ["x"]})).await.error(StatusCode::OK, -32602);
    mcp.legacy("completion/complete", json!({"ref": {"type": "ref/nothing"}})).await.error(StatusCode::OK, -32602);

    // GET and DELETE need a session (400 without one), after authentication; the modern wire has neither
    // (405).
    for method in [Method::GET, Method::DELETE] {
        let answer = Answer::of(app.with_key(method.clone(), "/bot/mcp", &key).send().await.unwrap()).await;
        answer.error(StatusCode::BAD_REQUEST, -32600);
        let request = app.with_key(method.clone(), "/bot/mcp", &key).header("mcp-protocol-version", "2026-07-28");
        let answer = Answer::of(request.send().await.unwrap()).await;
        answer.error(StatusCode::METHOD_NOT_ALLOWED, -32600);
        assert_eq!(answer.headers["allow"], "POST");
        let anonymous = Answer::of(app.anon(method, "/bot/mcp").send().await.unwrap()).await;
        anonymous.error(StatusCode::UNAUTHORIZED, -31401);
    }
    // HEAD is answered as GET is, without a body.
    let head = app.with_key(Method::HEAD, "/bot/mcp", &key).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::BAD_REQUEST);
    assert!(head.bytes().await.unwrap().is_empty());
    assert_eq!(app.anon(Method::HEAD, "/bot/mcp").send().await.unwrap().status(), StatusCode::UNAUTHORIZED);
    // Any other HTTP method: 405 with Allow and a JSON-RPC error saying why.
    for method in [Method::PUT, Method::PATCH] {
        let answer = Answer::of(app.with_key(method, "/bot/mcp", &key).send().await.unwrap()).await;
        answer.error(StatusCode::METHOD_NOT_ALLOWED, -32600);
        assert_eq!(answer.headers["allow"], "GET, POST, DELETE");
        assert!(answer.body["id"].is_null(), "{}", answer.body);
    }
}

async fn batches_only_in_2025_03_26(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    app.put_text("bot", "test://a", "alpha").await;
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": "r", "method": "resources/read", "params": {"uri": "test://a"}},
        {"jsonrpc": "2.0", "id": 3, "method": "nope"},
        {"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {}},
        17
    ]);
    for header in [None, Some("2025-03-26")] {
        let mut request = mcp.post();
        if let Some(version) = header {
            request = request.header("mcp-protocol-version", version);
        }
        let answer = Answer::of(request.json(&batch).send().await.unwrap()).await;
        assert_eq!(answer.status, StatusCode::OK);
        let items = answer.body.as_array().expect("an array of answers");
        assert_eq!(items.len(), 5, "{}", answer.body);
        assert_eq!(items[0], json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
        assert_eq!(items[1]["id"], "r");
        assert_eq!(items[1]["result"]["contents"][0]["text"], "alpha");
        assert_eq!((items[2]["id"].clone(), items[2]["error"]["code"].clone()), (json!(3), json!(-32601)));
        assert_eq!((items[3]["id"].clone(), items[3]["error"]["code"].clone()), (json!(4), json!(-32600)));
        assert_eq!((items[4]["id"].clone(), items[4]["error"]["code"].clone()), (Value::Null, json!(-32600)));
    }
    // Only notifications: 202.
    let notifications = json!([{"jsonrpc": "2.0", "method": "notifications/initialized"}]);
    assert_eq!(mcp.post().json(&notifications).send().await.unwrap().status(), StatusCode::ACCEPTED);
    // Later revisions have no batches; an empty batch is no request.
    for version in ["2025-06-18", "2025-11-25", "2026-07-28"] {
        let response = mcp.post().header("mcp-protocol-version", version).json(&batch).send().await.unwrap();
        Answer::of(response).await.error(StatusCode::BAD_REQUEST, -32600);
    }
    Answer::of(mcp.post().body("[]").send().await.unwrap()).await.error(StatusCode::BAD_REQUEST, -32600);
}

async fn response_formats(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    // A client that accepts only an event stream gets its answer as the stream's one event.
    let response = mcp.post().header("accept", "text/event-stream").json(&body).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = response.text().await.unwrap();
    let data = text.lines().find_map(|line| line.strip_prefix("data: ")).expect("a data line");
    assert_eq!(serde_json::from_str::<Value>(data).unwrap(), json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
    // One that accepts neither: 406.
    let response = mcp.post().header("accept", "text/html").json(&body).send().await.unwrap();
    Answer::of(response).await.error(StatusCode::NOT_ACCEPTABLE, -32600);
}
