//! Who reaches the MCP endpoint, in the contract's order of checks: `Host`/`Origin`, key, agent, key of the
//! agent with scope `mcp`, body size, JSON, JSON-RPC shape; and tenant isolation between agents.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Api, Backend, DEADLINE, spawn_app, spawn_app_with};
use crate::mcp_client::{Answer, Mcp, after_write, agent_with_key, seed_fixtures};
use crate::raw::{Reader, connect};

both!(
    order_of_checks,
    duplicate_or_malformed_host_and_origin_are_refused,
    keys_and_scopes,
    revoked_key_is_refused_next,
    tenant_isolation,
    body_and_envelope_errors,
    escaped_and_plain_paths_answer_alike
);

const BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"resources/list"}"#;

async fn order_of_checks(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let post = |path: &str| app.anon(Method::POST, path).body(BODY);

    // Host/Origin first: even without a key, a rebinding attempt is 403 (with a JSON-RPC body, id null).
    let answer = Answer::of(post("/bot/mcp").header("origin", "http://evil.example.com").send().await.unwrap()).await;
    answer.error(StatusCode::FORBIDDEN, -31403);
    assert_eq!(answer.body["id"], Value::Null);
    let answer = Answer::of(post("/bot/mcp").header("host", "evil.example.com").send().await.unwrap()).await;
    answer.error(StatusCode::FORBIDDEN, -31403);
    let answer = Answer::of(
        post("/bot/mcp")
            .header("x-agent-api-key", &key)
            .header("origin", "http://localhost:5173")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "loopback origins are allowed: {}", answer.body);

    // Then the key: missing, malformed, unknown → 401 with the challenge, whether or not the agent exists.
    for path in ["/bot/mcp", "/nobody/mcp"] {
        let answer = Answer::of(post(path).send().await.unwrap()).await;
        answer.error(StatusCode::UNAUTHORIZED, -31401);
        assert_eq!(answer.headers["www-authenticate"], "Bearer realm=\"hivegate\"");
        assert_eq!(answer.body["id"], Value::Null);
        let unknown = format!("bak_{}", "x".repeat(43));
        let answer = Answer::of(post(path).header("x-agent-api-key", unknown).send().await.unwrap()).await;
        answer.error(StatusCode::UNAUTHORIZED, -31401);
    }
    // The operator token is not an agent key: 401 too, with a message that says what is needed instead.
    let answer = Answer::of(app.op(Method::POST, "/bot/mcp").body(BODY).send().await.unwrap()).await;
    answer.error(StatusCode::UNAUTHORIZED, -31401);
    assert_eq!(answer.headers["www-authenticate"], "Bearer realm=\"hivegate\"");
    assert_eq!(
        answer.body["error"]["message"],
        "the operator token is not an agent key: MCP requests need a key of the agent with scope mcp"
    );
    let answer =
        Answer::of(post("/bot/mcp").header("x-agent-api-key", "bak_not-the-operator-token").send().await.unwrap())
            .await;
    assert_eq!(answer.body["error"]["message"], "missing, unknown, revoked or expired API key", "{}", answer.body);
    // Then the agent: a valid key and an unknown agent (or an invalid id) → 404.
    for path in ["/nobody/mcp", "/Not_An_Id/mcp"] {
        let answer = Answer::of(post(path).header("x-agent-api-key", &key).send().await.unwrap()).await;
        answer.error(StatusCode::NOT_FOUND, -31404);
    }
    // The bad body comes after all of these: unauthenticated garbage is 401, not 400.
    let response = app.anon(Method::POST, "/bot/mcp").body("{nope").send().await.unwrap();
    Answer::of(response).await.error(StatusCode::UNAUTHORIZED, -31401);
}

/// A `Host` or `Origin` given twice (even with the same value) or malformed is refused before anything else,
/// whatever the allow-lists say: 403 with a JSON-RPC error (id null) on the MCP endpoint, 400 problem+json
/// elsewhere; the same request with the field once is served.
async fn duplicate_or_malformed_host_and_origin_are_refused(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        config.mcp.allowed_hosts = vec!["*".to_owned()];
        config.mcp.allowed_origins = vec!["*".to_owned()];
    })
    .await;
    let key = agent_with_key(&app, "bot").await;
    let ask = |head: String| {
        let app = &app;
        async move {
            let mut reader = Reader::new(connect(app).await);
            reader.send(head.as_bytes()).await;
            reader.answer().await
        }
    };
    let mcp = |fields: &str| {
        format!(
            "POST /bot/mcp HTTP/1.1\r\n{fields}x-agent-api-key: {key}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{BODY}",
            BODY.len()
        )
    };
    let admin = |fields: &str| {
        format!("GET /admin/v1/agents HTTP/1.1\r\n{fields}authorization: Bearer {}\r\n\r\n", app.operator_token())
    };
    let good = "host: localhost\r\norigin: http://localhost:5173\r\n";
    assert_eq!(ask(mcp(good)).await.status, 200);
    assert_eq!(ask(admin(good)).await.status, 200);
    let bad = [
        "host: localhost\r\nhost: localhost\r\n",
        "host: localhost\r\nhost: evil.example\r\n",
        "host: localhost\r\norigin: http://localhost\r\norigin: http://evil.example\r\n",
        "host: localhost:abc\r\n",
        "host: user@localhost\r\n",
        "host: localhost\r\norigin: http://localhost/path\r\n",
        "host: localhost\r\norigin: localhost\r\n",
    ];
    for fields in bad {
        let answer = ask(mcp(fields)).await;
        assert_eq!(answer.status, 403, "{fields:?}: {}", answer.text());
        let body = answer.json();
        assert_eq!((body["error"]["code"].clone(), body["id"].clone()), (json!(-31403), Value::Null), "{fields:?}");
        let answer = ask(admin(fields)).await;
        assert_eq!(answer.status, 400, "{fields:?}: {}", answer.text());
        assert_eq!(answer.header("content-type"), Some("application/problem+json"), "{fields:?}");
        assert_eq!(answer.json()["status"], 400);
    }
}

async fn keys_and_scopes(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    let other = agent_with_key(&app, "other").await;
    let registry_only = app.issue_key("bot", &["registry"]).await.key;
    let both = app.issue_key("bot", &["registry", "mcp"]).await.key;
    let post = || app.anon(Method::POST, "/bot/mcp").body(BODY);

    // Authorization: Bearer works too; X-Agent-API-Key wins when both are present.
    assert_eq!(Answer::of(post().bearer_auth(&key).send().await.unwrap()).await.status, StatusCode::OK);
    let answer =
        Answer::of(post().header("x-agent-api-key", &key).bearer_auth("bak_wrong").send().await.unwrap()).await;
    assert_eq!(answer.status, StatusCode::OK);
    let answer =
        Answer::of(post().header("x-agent-api-key", "bak_wrong").bearer_auth(&key).send().await.unwrap()).await;
    answer.error(StatusCode::UNAUTHORIZED, -31401);
    // Another agent's key, or one without scope mcp: 403.
    Answer::of(post().header("x-agent-api-key", &other).send().await.unwrap())
        .await
        .error(StatusCode::FORBIDDEN, -31403);
    let answer = Answer::of(post().header("x-agent-api-key", &registry_only).send().await.unwrap()).await;
    answer.error(StatusCode::FORBIDDEN, -31403);
    assert_eq!(Answer::of(post().header("x-agent-api-key", &both).send().await.unwrap()).await.status, StatusCode::OK);
}

async fn revoked_key_is_refused_next(backend: Backend) {
    let app = spawn_app(backend).await;
    agent_with_key(&app, "bot").await;
    let issued = app.issue_key("bot", &["mcp"]).await;
    let mcp = Mcp::new(&app, "bot", &issued.key);
    assert_eq!(mcp.legacy("ping", json!({})).await.status, StatusCode::OK);
    app.revoke_key("bot", &issued.id).await;
    after_write(backend, "the revocation", || async {
        let answer = mcp.legacy("ping", json!({})).await;
        (answer.status == StatusCode::UNAUTHORIZED).then_some(())
    })
    .await;
    // A deleted agent: its keys stop working.
    let key = agent_with_key(&app, "gone").await;
    let gone = Mcp::new(&app, "gone", &key);
    assert_eq!(gone.legacy("ping", json!({})).await.status, StatusCode::OK);
    assert_eq!(app.op(Method::DELETE, "/admin/v1/agents/gone").send().await.unwrap().status(), StatusCode::NO_CONTENT);
    after_write(backend, "the agent's deletion", || async {
        let answer = gone.legacy("ping", json!({})).await;
        (answer.status == StatusCode::UNAUTHORIZED || answer.status == StatusCode::NOT_FOUND).then_some(())
    })
    .await;
}

async fn tenant_isolation(backend: Backend) {
    let app = spawn_app(backend).await;
    let key_a = agent_with_key(&app, "alpha").await;
    let key_b = agent_with_key(&app, "beta").await;
    seed_fixtures(&app, "beta").await;
    app.put_text("beta", "test://secret/1", "beta's secret").await;
    app.put_text("alpha", "test://mine", "alpha's").await;
    let alpha = Mcp::new(&app, "alpha", &key_a);

    // Alpha's key on beta's endpoint: 403 for every method.
    let across = Mcp::new(&app, "beta", &key_a);
    for method in ["resources/list", "resources/read", "prompts/list", "completion/complete"] {
        across.legacy(method, json!({"uri": "test://secret/1"})).await.error(StatusCode::FORBIDDEN, -31403);
    }
    // On its own endpoint alpha sees only its own registry.
    let listed = alpha.legacy("resources/list", json!({})).await;
    assert_eq!(listed.result()["resources"].as_array().unwrap().len(), 1);
    alpha.legacy("resources/read", json!({"uri": "test://secret/1"})).await.error(StatusCode::OK, -32002);
    alpha.modern("resources/read", json!({"uri": "test://static-text"})).await.error(StatusCode::OK, -32602);
    alpha.modern("resources/read", json!({"uri": "test://template/1/data"})).await.error(StatusCode::OK, -32602);
    assert_eq!(alpha.legacy("prompts/list", json!({})).await.result()["prompts"], json!([]));
    alpha.legacy("prompts/get", json!({"name": "test_simple_prompt"})).await.error(StatusCode::OK, -32602);
    let prompt = json!({"ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"}, "argument": {"name": "arg1", "value": ""}});
    alpha.legacy("completion/complete", prompt).await.error(StatusCode::OK, -32602);
    let template =
        json!({"ref": {"type": "ref/resource", "uri": "test://secret/{n}"}, "argument": {"name": "n", "value": ""}});
    assert_eq!(alpha.legacy("completion/complete", template.clone()).await.result()["completion"]["values"], json!([]));
    // Beta's own key completes the same template from beta's URIs.
    let beta = Mcp::new(&app, "beta", &key_b);
    assert_eq!(beta.legacy("completion/complete", template).await.result()["completion"]["values"], json!(["1"]));
    // Cursors are bound to the agent.
    for i in 0..101 {
        app.put_text("beta", &format!("test://many/{i:03}"), "x").await;
    }
    let page = beta.legacy("resources/list", json!({})).await;
    let cursor = page.result()["nextCursor"].as_str().expect("a second page").to_owned();
    alpha.legacy("resources/list", json!({"cursor": cursor})).await.error(StatusCode::OK, -32602);
}

async fn body_and_envelope_errors(backend: Backend) {
    // A small limit, so the refused body fits in the socket buffers and the answer is always readable.
    let app = crate::helpers::spawn_app_with(backend, |config| config.limits.max_body_bytes = 16 * 1024).await;
    let key = agent_with_key(&app, "bot").await;
    let mcp = Mcp::new(&app, "bot", &key);
    // Over the body limit: 413 with a JSON-RPC body.
    let padding = "x".repeat(20 * 1024);
    let big = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{padding}"}}}}"#);
    let answer = Answer::of(mcp.post().body(big).send().await.unwrap()).await;
    answer.error(StatusCode::PAYLOAD_TOO_LARGE, -32600);
    assert_eq!(answer.body["id"], Value::Null);
    // Unparsable JSON: 400/-32700, id null.
    for body in ["{nope", "", "\u{feff}{}"] {
        let answer = Answer::of(mcp.post().body(body).send().await.unwrap()).await;
        answer.error(StatusCode::BAD_REQUEST, -32700);
        assert_eq!(answer.body["id"], Value::Null);
    }
    // Valid JSON, not JSON-RPC: 400/-32600, with the id when it can be read.
    for (body, id) in [
        (r#"{"jsonrpc":"2.0","id":5}"#, json!(5)),
        (r#"{"jsonrpc":"1.0","id":"x","method":"ping"}"#, json!("x")),
        (r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#, Value::Null),
        (r#"{"jsonrpc":"2.0","id":2,"method":"ping","params":"x"}"#, json!(2)),
        ("42", Value::Null),
        // JSON whose envelope cannot be read (a number out of range, a lone surrogate, a member twice): the
        // message is malformed, not the JSON, alone as in a batch.
        (r#"{"jsonrpc":"2.0","id":3,"method":"ping","params":[1e400]}"#, Value::Null),
        (r#"{"jsonrpc":"2.0","id":3,"method":"\udc00"}"#, Value::Null),
        (r#"{"jsonrpc":"2.0","id":3,"id":4,"method":"ping"}"#, Value::Null),
        (r#"{"jsonrpc":"2.0","id":3,"result":1e400}"#, Value::Null),
    ] {
        let answer = Answer::of(mcp.post().body(body).send().await.unwrap()).await;
        answer.error(StatusCode::BAD_REQUEST, -32600);
        assert_eq!(answer.body["id"], id, "{body}");
    }
    // The id comes back exactly as sent.
    for id in ["1.0", "\"abc\"", "-3", "12345678901234567890"] {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        let text = mcp.post().body(body).send().await.unwrap().text().await.unwrap();
        assert_eq!(text, format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#));
    }
}

/// The MCP endpoint's requests are served without the router unless the agent segment holds a
/// percent-escape, which the router decodes: both ways answer alike, with the router's finish (a
/// `Content-Length`, no body for `HEAD`), and paths near the endpoint's are still the router's 404s.
async fn escaped_and_plain_paths_answer_alike(backend: Backend) {
    let app = spawn_app(backend).await;
    let key = agent_with_key(&app, "bot").await;
    app.put_text("bot", "test://a", "a").await;
    let read = r#"{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":"test://a"}}"#;
    let mut answers = Vec::new();
    for path in ["/bot/mcp", "/b%6Ft/mcp", "/%62%6f%74/mcp"] {
        let response = app.with_key(Method::POST, path, &key).body(read).send().await.unwrap();
        let length = response.headers().get("content-length").map(|v| v.to_str().unwrap().to_owned());
        let answer = Answer::of(response).await;
        assert_eq!(answer.result()["contents"][0]["text"], "a", "{path}");
        assert_eq!(length, Some(answer.body.to_string().len().to_string()), "{path}: Content-Length of the body");
        answers.push((answer.status, answer.body));
    }
    assert!(answers.windows(2).all(|pair| pair[0] == pair[1]), "{answers:?}");

    // Over HTTP/2 too, where hyper leaves an ended body's length out: a notification's empty 202 says
    // `Content-Length: 0` as the router's answer did, and a result its length, both ways.
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let notification = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    for path in ["/bot/mcp", "/b%6Ft/mcp"] {
        let post = |body: &'static str| {
            h2.post(format!("{}{path}", app.address)).header("x-agent-api-key", &key).body(body).send()
        };
        let response = post(notification).await.unwrap();
        assert_eq!((response.status(), response.version()), (StatusCode::ACCEPTED, reqwest::Version::HTTP_2));
        assert_eq!(response.headers().get("content-length").map(|v| v.to_str().unwrap()), Some("0"), "{path}");
        let response = post(read).await.unwrap();
        let length = response.headers().get("content-length").map(|v| v.to_str().unwrap().to_owned());
        let body = response.bytes().await.unwrap();
        assert_eq!(length, Some(body.len().to_string()), "{path}: Content-Length over HTTP/2");
    }

    // Refusals too: an unknown agent (after the key) and a missing key.
    for path in ["/nobody/mcp", "/n%6Fbody/mcp"] {
        let answer = Answer::of(app.with_key(Method::POST, path, &key).body(read).send().await.unwrap()).await;
        answer.error(StatusCode::NOT_FOUND, -31404);
        let answer = Answer::of(app.anon(Method::POST, path).body(read).send().await.unwrap()).await;
        answer.error(StatusCode::UNAUTHORIZED, -31401);
    }

    // HEAD is answered as GET is, without a body, both ways.
    let mut heads = Vec::new();
    for path in ["/bot/mcp", "/b%6Ft/mcp"] {
        let mut stream = connect(&app).await;
        let head =
            format!("HEAD {path} HTTP/1.1\r\nHost: localhost\r\nX-Agent-API-Key: {key}\r\nConnection: close\r\n\r\n");
        tokio::io::AsyncWriteExt::write_all(&mut stream, head.as_bytes()).await.unwrap();
        // A GET without a session is refused with a body; to HEAD the same answer comes without one. The
        // server closes the connection after it, so everything it sent is read.
        let mut bytes = Vec::new();
        let read = tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut bytes);
        tokio::time::timeout(DEADLINE, read).await.expect("the answer within the deadline").unwrap();
        let text = String::from_utf8(bytes).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").expect("an answer head");
        assert_eq!(body, "", "{path}: no body to HEAD");
        heads.push(head.lines().next().unwrap().to_owned());
    }
    assert_eq!(heads[0], heads[1]);

    // Not the endpoint's path: the router's 404.
    for path in ["/bot/mcp/", "/bot/x/mcp", "/bot/mcpx", "/mcp"] {
        let response = app.with_key(Method::POST, path, &key).body(read).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        assert_eq!(response.headers()["content-type"], "application/problem+json", "{path}");
    }
}
