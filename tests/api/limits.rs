//! The hardening limits: JSON nesting, header fields, request target, resource URI length, request time; each
//! refused with its status and code in the endpoint's format, changing nothing, and counted in
//! `hivegate_limit_refused_total{limit}`. Secrets never reach the logs.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{
    Api, Backend, HivegateProcess, TestDatabase, expect_json, expect_problem, spawn_app, spawn_app_with, str_of, uris,
};
use crate::live_client::{Legacy, Next, QUIET, listen, listen_request};
use crate::mcp_client::{Answer, Mcp, agent_with_key};

both!(
    json_nesting_is_limited,
    duplicate_keys_are_refused,
    request_head_is_limited,
    resource_uris_are_limited_everywhere,
    late_answers_are_408_in_the_endpoints_format,
    every_limit_refusal_is_counted,
    secrets_never_reach_the_logs,
);

/// `hivegate_limit_refused_total{limit="<limit>"}` (0 while the series does not exist).
async fn refused(app: &impl Api, limit: &str) -> f64 {
    let text = app.anon(Method::GET, "/metrics").send().await.unwrap().text().await.unwrap();
    let series = format!("hivegate_limit_refused_total{{limit=\"{limit}\"}} ");
    text.lines().find_map(|line| line.strip_prefix(&series)?.parse().ok()).unwrap_or(0.0)
}

/// `{"a": {"a": ... 1}}`, `levels` objects deep.
fn nested(levels: usize) -> Value {
    (0..levels).fold(json!(1), |inner, _| json!({ "a": inner }))
}

/// A ping whose body nests `levels` levels deep (the envelope and the params are two of them).
fn ping_nesting(levels: usize) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": nested(levels - 2)}}).to_string()
}

async fn json_nesting_is_limited(backend: Backend) {
    let app = spawn_app_with(backend, |config| config.limits.max_json_depth = 8).await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);

    // MCP: a body 8 levels deep is served; 9 levels is 400/-32600 with id null, before it is parsed.
    let answer = Answer::of(mcp.post().body(ping_nesting(8)).send().await.unwrap()).await;
    assert_eq!(answer.result(), &json!({}));
    let answer = Answer::of(mcp.post().body(ping_nesting(9)).send().await.unwrap()).await;
    let error = answer.error(StatusCode::BAD_REQUEST, -32600);
    assert!(str_of(error, "message").contains("limits.max_json_depth"), "{error}");
    assert_eq!(error["data"]["limit"], 8);
    assert_eq!(answer.body["id"], Value::Null);
    // Brackets inside strings are not nesting.
    let stringy = json!({"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"x": "[[[[[[[[[[{{{{{{{{{{"}});
    assert_eq!(Answer::of(mcp.post().json(&stringy).send().await.unwrap()).await.result(), &json!({}));
    // The key is checked first: without one, the same body is a 401.
    let anonymous = app.anon(Method::POST, "/bot/mcp").body(ping_nesting(9)).send().await.unwrap();
    Answer::of(anonymous).await.error(StatusCode::UNAUTHORIZED, -31401);
    // Depth is checked before parsing: too deep and not JSON is still about depth.
    let answer = Answer::of(mcp.post().body("[[[[[[[[[[[[nope").send().await.unwrap()).await;
    answer.error(StatusCode::BAD_REQUEST, -32600);

    // Admin: the same limit on every body, as a 400 problem; nothing is stored.
    let resource =
        |meta_levels: usize| json!({"uri": "test://deep", "name": "deep", "text": "x", "_meta": nested(meta_levels)});
    let problem = expect_problem(app.put_resource("bot", &resource(8)).await, StatusCode::BAD_REQUEST).await;
    assert!(str_of(&problem, "detail").contains("limits.max_json_depth"), "{problem}");
    let batch = json!({"upsert": [resource(6)]});
    let response = app.op(Method::POST, "/admin/v1/agents/bot/resources/batch").json(&batch).send().await.unwrap();
    expect_problem(response, StatusCode::BAD_REQUEST).await;
    assert!(app.list_all("/admin/v1/agents/bot/resources", None).await.is_empty(), "nothing was stored");
    let response = app.put_resource("bot", &resource(7)).await;
    assert_eq!(response.status(), StatusCode::CREATED, "8 levels are allowed: {}", response.text().await.unwrap());

    assert_eq!(refused(&app, "json_depth").await, 4.0);
}

/// A key twice in one object anywhere in a body (the parser would keep the last value) is refused and changes
/// nothing: 400/-32600 on MCP (with the request's id when it has one), 400 problem+json on the admin API.
async fn duplicate_keys_are_refused(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    app.put_text("bot", "test://a", "a").await;
    app.put_text("bot", "test://b", "b").await;
    let mcp = Mcp::new(&app, "bot", &key);

    // MCP: in params, deeper inside them, escaped, in the envelope, in a batch.
    let read = r#"{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":"test://a","uri":"test://b"}}"#;
    let answer = Answer::of(mcp.post().body(read).send().await.unwrap()).await;
    let error = answer.error(StatusCode::BAD_REQUEST, -32600);
    assert!(str_of(error, "message").contains("\"uri\" appears twice"), "{error}");
    assert_eq!(answer.body["id"], 7);
    let bodies = [
        r#"{"jsonrpc":"2.0","id":7,"method":"ping","params":{"_meta":{"a":{"k":1,"k":2}}}}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"ping","params":{"k":1,"\u006b":2}}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"ping","x":[{"y":1,"y":1}]}"#,
    ];
    for body in bodies {
        let answer = Answer::of(mcp.post().body(body).send().await.unwrap()).await;
        answer.error(StatusCode::BAD_REQUEST, -32600);
        assert_eq!(answer.body["id"], 7, "{body}");
    }
    let batch =
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping","params":{"a":1,"a":1}}]"#;
    let answer = Answer::of(mcp.post().body(batch).send().await.unwrap()).await;
    answer.error(StatusCode::BAD_REQUEST, -32600);
    assert_eq!(answer.body["id"], Value::Null, "a batch has no one id");
    // Not JSON is still -32700, whatever it repeats.
    let answer = Answer::of(mcp.post().body(r#"{"a":1,"a":2"#).send().await.unwrap()).await;
    answer.error(StatusCode::BAD_REQUEST, -32700);
    // The same keys in different objects are fine.
    let fine = r#"{"jsonrpc":"2.0","id":7,"method":"ping","params":{"a":{"a":1},"b":{"a":1}}}"#;
    assert_eq!(Answer::of(mcp.post().body(fine).send().await.unwrap()).await.result(), &json!({}));

    // A subscription asked for with two URIs is not made: replacing either sends no update.
    let session = Legacy::initialize(&app, "bot", &key, "2025-06-18").await;
    let mut stream = session.open(None).await;
    let subscribe =
        r#"{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"test://a","uri":"test://b"}}"#;
    let request = session.request(Method::POST).header("accept", "application/json, text/event-stream");
    Answer::of(request.body(subscribe).send().await.unwrap()).await.error(StatusCode::BAD_REQUEST, -32600);
    app.put_text("bot", "test://a", "a2").await;
    app.put_text("bot", "test://b", "b2").await;
    // Their sizes changed: each sends its list change, and nothing else.
    while let Next::Event(event) = stream.next_within(QUIET).await {
        assert_eq!(event.method(), "notifications/resources/list_changed", "no update for a refused subscription");
    }

    // Admin: a resource, an agent patch, a batch; each refused and nothing stored or changed.
    let put = r#"{"uri":"test://c","name":"c","text":"one","text":"two"}"#;
    let response = app.op(Method::PUT, "/admin/v1/agents/bot/resources").body(put).send().await.unwrap();
    let problem = expect_problem(response, StatusCode::BAD_REQUEST).await;
    assert!(str_of(&problem, "detail").contains("\"text\" appears twice"), "{problem}");
    let patch = r#"{"name":"First","description":"d","name":"Second"}"#;
    let response = app.op(Method::PATCH, "/admin/v1/agents/bot").body(patch).send().await.unwrap();
    expect_problem(response, StatusCode::BAD_REQUEST).await;
    let batch = r#"{"upsert":[{"uri":"test://d","name":"d","text":"d","_meta":{"k":1,"k":2}}],"delete":["test://a"]}"#;
    let response = app.op(Method::POST, "/admin/v1/agents/bot/resources/batch").body(batch).send().await.unwrap();
    expect_problem(response, StatusCode::BAD_REQUEST).await;
    let agent = expect_json(app.op(Method::GET, "/admin/v1/agents/bot").send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(agent["name"], "Agent bot");
    assert_eq!(uris(&app.list_all("/admin/v1/agents/bot/resources", None).await), ["test://a", "test://b"]);
}

async fn request_head_is_limited(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        config.limits.max_header_bytes = 4096;
        config.limits.max_uri_bytes = 512;
    })
    .await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    let pad = "p".repeat(5000);
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});

    // Header fields over the limit: 431, a JSON-RPC error on the MCP endpoint (before the key is even
    // looked at), a problem elsewhere; an admin write refused so changes nothing.
    let answer = Answer::of(mcp.post().header("x-pad", &pad).json(&ping).send().await.unwrap()).await;
    let error = answer.error(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, -32600);
    assert!(str_of(error, "message").contains("limits.max_header_bytes"), "{error}");
    assert_eq!(answer.body["id"], Value::Null);
    let anonymous = app.anon(Method::POST, "/bot/mcp").header("x-pad", &pad).json(&ping).send().await.unwrap();
    Answer::of(anonymous).await.error(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, -32600);
    let create =
        app.op(Method::POST, "/admin/v1/agents").header("x-pad", &pad).json(&json!({"id": "padded", "name": "P"}));
    let problem = expect_problem(create.send().await.unwrap(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE).await;
    assert!(str_of(&problem, "detail").contains("limits.max_header_bytes"), "{problem}");
    expect_problem(app.op(Method::GET, "/admin/v1/agents/padded").send().await.unwrap(), StatusCode::NOT_FOUND).await;
    // Under the limit, the same requests pass.
    assert_eq!(
        Answer::of(mcp.post().header("x-pad", "p").json(&ping).send().await.unwrap()).await.result(),
        &json!({})
    );

    // A request target over the limit: 414, likewise in each endpoint's format.
    let long_query = format!("?pad={}", "q".repeat(600));
    let request = app.with_key(Method::POST, &format!("/bot/mcp{long_query}"), &key).json(&ping);
    let answer = Answer::of(request.send().await.unwrap()).await;
    let error = answer.error(StatusCode::URI_TOO_LONG, -32600);
    assert!(str_of(error, "message").contains("limits.max_uri_bytes"), "{error}");
    let path = format!("/admin/v1/agents{long_query}");
    let create = app.op(Method::POST, &path).json(&json!({"id": "long", "name": "L"}));
    let problem = expect_problem(create.send().await.unwrap(), StatusCode::URI_TOO_LONG).await;
    assert!(str_of(&problem, "detail").contains("limits.max_uri_bytes"), "{problem}");
    expect_problem(app.op(Method::GET, "/admin/v1/agents/long").send().await.unwrap(), StatusCode::NOT_FOUND).await;
    let unknown = app.anon(Method::GET, &format!("/{}", "u".repeat(600))).send().await.unwrap();
    expect_problem(unknown, StatusCode::URI_TOO_LONG).await;

    assert_eq!(refused(&app, "header").await, 3.0);
    assert_eq!(refused(&app, "uri").await, 3.0);
}

async fn resource_uris_are_limited_everywhere(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let too_long = format!("test://{}", "a".repeat(2048 - "test://".len() + 1));
    let encoded = format!("test%3A%2F%2F{}", "a".repeat(2048 - "test://".len() + 1));

    // Admin: bodies, batch items and `?uri=` all refuse it with 422, naming the limit.
    let resource = json!({"uri": too_long, "name": "x", "text": "a"});
    let problem = expect_problem(app.put_resource("bot", &resource).await, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert!(str_of(&problem, "detail").contains("2048"), "{problem}");
    let batch = json!({"delete": [too_long]});
    let response = app.op(Method::POST, "/admin/v1/agents/bot/resources/batch").json(&batch).send().await.unwrap();
    let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert!(str_of(&problem, "detail").contains("delete[0]") && str_of(&problem, "detail").contains("2048"));
    for (method, path) in [(Method::GET, "resources/content"), (Method::DELETE, "resources")] {
        let path = format!("/admin/v1/agents/bot/{path}?uri={encoded}");
        let problem =
            expect_problem(app.op(method, &path).send().await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY).await;
        assert!(str_of(&problem, "detail").contains("2048"), "{problem}");
    }

    // MCP: a read, a subscribe and an unsubscribe of it are invalid params (-32602), in both eras.
    let mcp = Mcp::new(&app, "bot", &key);
    let error = mcp.legacy("resources/read", json!({"uri": too_long})).await;
    assert!(str_of(error.error(StatusCode::OK, -32602), "message").contains("2048"), "{}", error.body);
    mcp.modern("resources/read", json!({"uri": too_long})).await.error(StatusCode::OK, -32602);
    let session = Legacy::initialize(&app, "bot", &key, "2025-11-25").await;
    for method in ["resources/subscribe", "resources/unsubscribe"] {
        let body = json!({"jsonrpc": "2.0", "id": 3, "method": method, "params": {"uri": too_long}});
        let answer = Answer::of(session.request(Method::POST).json(&body).send().await.unwrap()).await;
        assert!(str_of(answer.error(StatusCode::OK, -32602), "message").contains("2048"), "{}", answer.body);
    }
    // A listen honours only the URIs that can be subscribed: the acknowledgement leaves it out.
    let mut stream =
        listen(&app, "bot", &key, json!(1), json!({"resourceSubscriptions": ["test://a", too_long]})).await;
    let ack = stream.next().await.json();
    assert_eq!(ack["params"]["notifications"]["resourceSubscriptions"], json!(["test://a"]), "{ack}");
}

async fn late_answers_are_408_in_the_endpoints_format(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        // Long enough for the set-up's own writes on a loaded machine, and shorter than what the database
        // waits (SQLite's 5 s busy timeout, the pool's acquire timeout), so the request deadline is what cuts
        // the held-up writes off.
        config.http.request_timeout_ms = 3000;
        config.database.acquire_timeout_ms = 30_000;
    })
    .await;
    let key = agent_with_key(&app, "bot").await;

    // While the database keeps writes waiting, a write is cut off at the deadline with a body in the
    // endpoint's format.
    let lock = app.db.lock_writes().await;
    let create = app.op(Method::POST, "/admin/v1/agents").json(&json!({"id": "late", "name": "Late"}));
    let problem = expect_problem(create.send().await.unwrap(), StatusCode::REQUEST_TIMEOUT).await;
    assert!(str_of(&problem, "detail").contains("http.request_timeout_ms"), "{problem}");
    let initialize = json!({"jsonrpc": "2.0", "id": 5, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let answer = Answer::of(Mcp::new(&app, "bot", &key).post().json(&initialize).send().await.unwrap()).await;
    let error = answer.error(StatusCode::REQUEST_TIMEOUT, -31408);
    assert_eq!(error["data"]["limitMs"], 3000);
    assert_eq!(answer.content_type(), "application/json");
    lock.release().await;

    // Once the database takes writes again, so does hivegate.
    let create = app.op(Method::POST, "/admin/v1/agents").json(&json!({"id": "on-time", "name": "On time"}));
    expect_json(create.send().await.unwrap(), StatusCode::CREATED).await;
    assert_eq!(refused(&app, "timeout").await, 2.0);
}

async fn every_limit_refusal_is_counted(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        // Small, so a refused body fits in the socket buffers and its answer is always read.
        config.limits.max_body_bytes = 16 * 1024;
        config.limits.max_resource_bytes = 100;
        config.limits.max_resources_per_agent = 1;
        config.sessions.max_subscriptions = 1;
        config.streams.max_per_key = 1;
    })
    .await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    let padding = "x".repeat(20 * 1024);

    // Body: MCP 413/-32600 and admin 413.
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": padding}});
    Answer::of(mcp.post().json(&big).send().await.unwrap()).await.error(StatusCode::PAYLOAD_TOO_LARGE, -32600);
    let resource = json!({"uri": "test://big", "name": "big", "text": padding});
    expect_problem(app.put_resource("bot", &resource).await, StatusCode::PAYLOAD_TOO_LARGE).await;
    // Resource size: 413, naming the limit.
    let resource = json!({"uri": "test://a", "name": "a", "text": "y".repeat(101)});
    let problem = expect_problem(app.put_resource("bot", &resource).await, StatusCode::PAYLOAD_TOO_LARGE).await;
    assert!(str_of(&problem, "detail").contains("limits.max_resource_bytes"), "{problem}");
    // Quota: a second resource is 409.
    app.put_text("bot", "test://a", "a").await;
    expect_problem(
        app.put_resource("bot", &json!({"uri": "test://b", "name": "b", "text": "b"})).await,
        StatusCode::CONFLICT,
    )
    .await;
    assert_eq!(uris(&app.list_all("/admin/v1/agents/bot/resources", None).await), ["test://a"]);

    // Template: a prompt whose render would exceed the output budget is -32602.
    let prompt = json!({"arguments": [{"name": "x"}], "messages": [{"role": "user",
        "content": {"type": "text", "text": "{% for i in range(10000) %}{{ x }}{% endfor %}"}}]});
    let response = app.op(Method::PUT, "/admin/v1/agents/bot/prompts/huge").json(&prompt).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let answer = mcp.legacy("prompts/get", json!({"name": "huge", "arguments": {"x": "z".repeat(200)}})).await;
    assert!(str_of(answer.error(StatusCode::OK, -32602), "message").contains("budget"), "{}", answer.body);
    // Subscriptions: a listen naming more URIs than allowed is -32602.
    let filter = json!({"resourceSubscriptions": ["test://a", "test://b"]});
    let answer = Answer::of(listen_request(&app, "bot", &key, json!(1), filter).send().await.unwrap()).await;
    answer.error(StatusCode::OK, -32602);
    // Streams: a second open stream for the key is 429.
    let mut stream = listen(&app, "bot", &key, json!(2), json!({})).await;
    stream.next().await;
    let answer = Answer::of(listen_request(&app, "bot", &key, json!(3), json!({})).send().await.unwrap()).await;
    answer.error(StatusCode::TOO_MANY_REQUESTS, -31429);
    // Batch: more messages than one answer may hold is 400/-32600.
    let pings: Vec<Value> = (0..101).map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "ping"})).collect();
    Answer::of(mcp.post().json(&pings).send().await.unwrap()).await.error(StatusCode::BAD_REQUEST, -32600);

    for (limit, count) in [
        ("body", 2.0),
        ("resource_size", 1.0),
        ("quota", 1.0),
        ("template", 1.0),
        ("subscriptions", 1.0),
        ("streams", 1.0),
        ("batch", 1.0),
    ] {
        assert_eq!(refused(&app, limit).await, count, "limit {limit}");
    }
    // What is no limit's refusal is not counted.
    mcp.legacy("resources/read", json!({"uri": "test://none"})).await.error(StatusCode::OK, -32002);
    assert_eq!(refused(&app, "body").await, 2.0);
}

/// A real request sequence against the binary logging at debug level in JSON: no key, operator token or
/// digest of either appears anywhere in what it writes.
async fn secrets_never_reach_the_logs(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let token = format!("op-{}", uuid::Uuid::new_v4().simple());
    let env = [("HIVEGATE_LOG__LEVEL", "debug"), ("RUST_LOG", "debug")];
    let mut process = HivegateProcess::start_with_env(db.url(), Some(&token), &env).await;

    expect_json(
        process.op(Method::POST, "/admin/v1/agents").json(&json!({"id": "bot", "name": "Bot"})).send().await.unwrap(),
        StatusCode::CREATED,
    )
    .await;
    let issued = process.issue_key("bot", &["mcp", "registry"]).await;
    let key = issued.key.clone();
    // The key as an MCP client sends it (both headers) and as a registry client does.
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list"});
    let response = process.with_key(Method::POST, "/bot/mcp", &key).json(&list).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let response = process.anon(Method::POST, "/bot/mcp").bearer_auth(&key).json(&list).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let resource = json!({"uri": "test://a", "name": "a", "text": "a"});
    let response =
        process.with_key(Method::PUT, "/admin/v1/agents/bot/resources", &key).json(&resource).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    // Failed authentications: an unknown key, a wrong operator token, then the key once revoked.
    let wrong_key = format!("bak_{}", uuid::Uuid::new_v4().simple());
    let response = process.with_key(Method::POST, "/bot/mcp", &wrong_key).json(&list).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let wrong_token = format!("op-{}", uuid::Uuid::new_v4().simple());
    let response = process.anon(Method::GET, "/admin/v1/agents").bearer_auth(&wrong_token).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    process.revoke_key("bot", &issued.id).await;
    let response = process.with_key(Method::POST, "/bot/mcp", &key).json(&list).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let response = process.op(Method::GET, "/admin/v1/audit?agent=bot").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(process.terminate().await.success());

    let logs = process.logs();
    assert!(logs.contains(r#""level":"DEBUG""#), "the logs are at debug level:\n{logs}");
    // Request spans name the route template, never the raw path.
    let is_logged = logs.contains(r#""route":"/{agent_id}/mcp""#) && logs.contains(r#""route":"/admin/v1/agents""#);
    assert!(is_logged, "the requests are logged:\n{logs}");
    let hasher = hivegate::domain::KeyHasher::new(None);
    for (what, secret) in
        [("key", &key), ("unknown key", &wrong_key), ("operator token", &token), ("wrong token", &wrong_token)]
    {
        let digest = hasher.digest(secret).to_hex();
        let body = secret.strip_prefix("bak_").unwrap_or(secret);
        for (form, text) in [("itself", secret.as_str()), ("without its prefix", body), ("its digest", digest.as_str())]
        {
            assert!(!logs.contains(text), "the {what} ({form}) appears in the logs:\n{logs}");
        }
    }
}
