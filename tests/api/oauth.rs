//! OAuth on the MCP endpoint: the metadata documents and the challenge, and access tokens of an external
//! issuer that the story runs itself (EC keys made here, its metadata and JWKS served from a local server).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{
    Api, Backend, IssuedKey, TestApp, expect_json, expect_problem, expect_status, spawn_app_on_with, spawn_app_with,
};
use crate::mcp_client::Answer;

both!(metadata_and_challenge_follow_the_mode, external_issuer_tokens, subject_grants_are_managed_and_bounded);

// ---------------------------------------------------------------------------------------------------------
// The external issuer
// ---------------------------------------------------------------------------------------------------------

/// A signing key of the issuer: an ECDSA P-256 key made for the story.
struct SigningKey {
    kid: String,
    encoding: EncodingKey,
    jwk: Value,
}

impl SigningKey {
    fn new(kid: &str) -> Self {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let point = pair.public_key_raw();
        assert_eq!(point.len(), 65, "an uncompressed P-256 point");
        let jwk = json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        });
        Self { kid: kid.to_owned(), encoding: EncodingKey::from_ec_der(&pair.serialize_der()), jwk }
    }
}

/// An authorization server's metadata (RFC 8414) and JWKS on a port of this process; counts JWKS fetches.
struct Issuer {
    url: String,
    keys: Arc<Mutex<Vec<Value>>>,
    fetches: Arc<AtomicUsize>,
    _server: tokio::task::JoinHandle<()>,
}

impl Issuer {
    async fn start(keys: &[&SigningKey]) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let jwks: Arc<Mutex<Vec<Value>>> = Arc::new(Mutex::new(keys.iter().map(|key| key.jwk.clone()).collect()));
        let fetches = Arc::new(AtomicUsize::new(0));
        let metadata = json!({
            "issuer": url,
            "authorization_endpoint": format!("{url}/authorize"),
            "token_endpoint": format!("{url}/token"),
            "jwks_uri": format!("{url}/jwks"),
            "response_types_supported": ["code"],
        });
        let (served, counted) = (jwks.clone(), fetches.clone());
        let router = axum::Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                axum::routing::get(move || async move { axum::Json(metadata) }),
            )
            .route(
                "/jwks",
                axum::routing::get(move || async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    let keys = served.lock().unwrap().clone();
                    axum::Json(json!({ "keys": keys }))
                }),
            );
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self { url, keys: jwks, fetches, _server: server }
    }

    fn add(&self, key: &SigningKey) {
        self.keys.lock().unwrap().push(key.jwk.clone());
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Claims of a token for `resource` as `sub`, valid for a minute from now.
fn claims(issuer: &str, resource: &str, sub: &str) -> Value {
    json!({"iss": issuer, "aud": resource, "sub": sub, "exp": now() + 60, "iat": now(), "scope": "openid mcp"})
}

fn sign(key: &SigningKey, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(key.kid.clone());
    jsonwebtoken::encode(&header, claims, &key.encoding).unwrap()
}

/// A JWT with `alg: none` and no signature.
fn unsigned(kid: &str, claims: &Value) -> String {
    let header = json!({"alg": "none", "typ": "JWT", "kid": kid});
    format!("{}.{}.", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()))
}

// ---------------------------------------------------------------------------------------------------------
// The MCP endpoint, with a bearer credential
// ---------------------------------------------------------------------------------------------------------

/// A legacy (curl-like) request to `agent`'s endpoint with `Authorization: Bearer credential`.
async fn call(app: &TestApp, agent: &str, credential: &str, method: &str, params: Value) -> Answer {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let request = app.anon(Method::POST, &format!("/{agent}/mcp")).bearer_auth(credential).json(&body);
    Answer::of(request.send().await.unwrap()).await
}

/// The `WWW-Authenticate` of an answer.
fn challenge(answer: &Answer) -> String {
    answer.headers.get("www-authenticate").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default()
}

/// Asserts a 401 with `error="invalid_token"` and the agent's metadata URL; returns the error's message.
fn assert_invalid_token(answer: &Answer, app: &TestApp, agent: &str) -> String {
    answer.error(StatusCode::UNAUTHORIZED, -31401);
    let challenge = challenge(answer);
    assert!(challenge.starts_with(r#"Bearer realm="hivegate""#), "{challenge}");
    assert!(challenge.contains(r#"error="invalid_token""#), "{challenge}");
    let metadata = format!(r#"resource_metadata="{}/.well-known/oauth-protected-resource/{agent}/mcp""#, app.address);
    assert!(challenge.contains(&metadata), "{challenge}");
    answer.body["error"]["message"].as_str().unwrap().to_owned()
}

/// Asserts a 403 with `error="insufficient_scope"` and `scope="mcp"`; returns the error's message.
fn assert_insufficient_scope(answer: &Answer) -> String {
    answer.error(StatusCode::FORBIDDEN, -31403);
    let challenge = challenge(answer);
    assert!(challenge.contains(r#"error="insufficient_scope""#), "{challenge}");
    assert!(challenge.contains(r#"scope="mcp""#), "{challenge}");
    answer.body["error"]["message"].as_str().unwrap().to_owned()
}

/// `resources/list` then `resources/read` of `test://doc` with a credential that may.
async fn lists_and_reads(app: &TestApp, agent: &str, credential: &str) {
    let list = call(app, agent, credential, "resources/list", json!({})).await;
    assert_eq!(list.result()["resources"][0]["uri"], "test://doc", "{}", list.body);
    let read = call(app, agent, credential, "resources/read", json!({"uri": "test://doc"})).await;
    assert_eq!(read.result()["contents"][0]["text"], "hello", "{}", read.body);
}

fn external(issuer: &str) -> impl FnOnce(&mut hivegate::config::Config) + Clone + 'static {
    let issuer = issuer.to_owned();
    move |config: &mut hivegate::config::Config| {
        config.oauth.mode = hivegate::oauth::config::Mode::External;
        config.oauth.issuer = Some(issuer);
        config.oauth.jwks_min_refetch_ms = 300;
        config.oauth.disabled_agents = vec!["plain".to_owned()];
    }
}

async fn grant(app: &impl Api, agent: &str, subject: &str, key: &IssuedKey) -> Value {
    let path = format!("/admin/v1/agents/{agent}/oauth-subjects/{subject}");
    let response = app.op(Method::PUT, &path).json(&json!({"keyId": key.id})).send().await.unwrap();
    expect_json(response, StatusCode::CREATED).await
}

// ---------------------------------------------------------------------------------------------------------
// Stories
// ---------------------------------------------------------------------------------------------------------

/// With OAuth off (the default) nothing changes: no metadata, the plain challenge. With it on, an agent's
/// metadata names its canonical URL and the issuer, and a 401 points at it; an agent opted out stays plain.
async fn metadata_and_challenge_follow_the_mode(backend: Backend) {
    let app = spawn_app_with(backend, |_| {}).await;
    app.create_agent("bot").await;
    let response = app.anon(Method::GET, "/.well-known/oauth-protected-resource/bot/mcp").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
    let answer = call(&app, "bot", "not-a-key", "ping", json!({})).await;
    answer.error(StatusCode::UNAUTHORIZED, -31401);
    assert_eq!(challenge(&answer), r#"Bearer realm="hivegate""#);
    drop(app);

    let app = spawn_app_with(backend, external("https://idp.example.com/tenant")).await;
    for agent in ["bot", "plain"] {
        app.create_agent(agent).await;
    }
    let response = app.anon(Method::GET, "/.well-known/oauth-protected-resource/bot/mcp").send().await.unwrap();
    assert_eq!(response.headers()["content-type"], "application/json");
    let document = expect_json(response, StatusCode::OK).await;
    assert_eq!(document["resource"], format!("{}/bot/mcp", app.address));
    assert_eq!(document["authorization_servers"], json!(["https://idp.example.com/tenant"]));
    assert_eq!(document["scopes_supported"], json!(["mcp"]));
    assert_eq!(document["bearer_methods_supported"], json!(["header"]));
    for path in ["/.well-known/oauth-protected-resource/nobody/mcp", "/.well-known/oauth-protected-resource/plain/mcp"]
    {
        expect_problem(app.anon(Method::GET, path).send().await.unwrap(), StatusCode::NOT_FOUND).await;
    }

    // No credential: the challenge names the metadata and the scope, and no error code (RFC 6750 §3.1).
    let response = app.anon(Method::POST, "/bot/mcp").json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}));
    let answer = Answer::of(response.send().await.unwrap()).await;
    answer.error(StatusCode::UNAUTHORIZED, -31401);
    let expected = format!(
        r#"Bearer realm="hivegate", resource_metadata="{}/.well-known/oauth-protected-resource/bot/mcp", scope="mcp""#,
        app.address
    );
    assert_eq!(challenge(&answer), expected);
    // A wrong key is an invalid token; an agent opted out answers as without OAuth.
    assert_invalid_token(&call(&app, "bot", "bak_wrong", "ping", json!({})).await, &app, "bot");
    let answer = call(&app, "plain", "eyJ.not.atoken", "ping", json!({})).await;
    answer.error(StatusCode::UNAUTHORIZED, -31401);
    assert_eq!(challenge(&answer), r#"Bearer realm="hivegate""#);
    // The admin API keeps its own challenge and takes no access token.
    let response = app.anon(Method::GET, "/admin/v1/agents").bearer_auth("eyJ.not.atoken").send().await.unwrap();
    assert_eq!(response.headers()["www-authenticate"], r#"Bearer realm="hivegate""#);
    expect_problem(response, StatusCode::UNAUTHORIZED).await;
}

/// Tokens of the external issuer: the valid one lists and reads; every other is refused with OAuth's codes.
async fn external_issuer_tokens(backend: Backend) {
    let first = SigningKey::new("first");
    let issuer = Issuer::start(&[&first]).await;
    let configure = external(&issuer.url);
    let app = spawn_app_with(backend, configure.clone()).await;
    for agent in ["bot", "other"] {
        app.create_agent(agent).await;
        app.put_text(agent, "test://doc", "hello").await;
    }
    let key = app.issue_key("bot", &["mcp"]).await;
    let other_key = app.issue_key("other", &["mcp"]).await;
    let bot = format!("{}/bot/mcp", app.address);
    let other = format!("{}/other/mcp", app.address);
    let valid = claims(&issuer.url, &bot, "alice");

    // A valid token whose subject nobody granted: 403, and the message says how to grant it.
    let message = assert_insufficient_scope(&call(&app, "bot", &sign(&first, &valid), "ping", json!({})).await);
    assert!(message.contains("oauth-subjects"), "{message}");
    grant(&app, "bot", "alice", &key).await;
    grant(&app, "other", "bob", &other_key).await;

    // Granted: it lists and reads, as the key; the API key goes on working beside it.
    lists_and_reads(&app, "bot", &sign(&first, &valid)).await;
    let mut scp = valid.clone();
    scp.as_object_mut().unwrap().remove("scope");
    scp["scp"] = json!(["mcp"]);
    lists_and_reads(&app, "bot", &sign(&first, &scp)).await;
    lists_and_reads(&app, "bot", &key.key).await;
    let answer = Answer::of(
        app.with_key(Method::POST, "/bot/mcp", &key.key)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    answer.result();

    // Each way a token can be wrong.
    let with = |change: &dyn Fn(&mut Value)| {
        let mut claims = valid.clone();
        change(&mut claims);
        claims
    };
    let cases: [(&str, String, &str); 7] = [
        ("another agent's audience", sign(&first, &with(&|c| c["aud"] = json!(other))), "aud"),
        ("another issuer", sign(&first, &with(&|c| c["iss"] = json!("https://evil.example.com"))), "iss"),
        ("expired beyond the leeway", sign(&first, &with(&|c| c["exp"] = json!(now() - 120))), "exp"),
        ("not valid yet", sign(&first, &with(&|c| c["nbf"] = json!(now() + 300))), "nbf"),
        ("alg none", unsigned("first", &valid), "not a signed JWT"),
        ("an unknown kid", sign(&SigningKey::new("stranger"), &valid), "kid"),
        ("no sub", sign(&first, &with(&|c| drop(c.as_object_mut().unwrap().remove("sub")))), "claim"),
    ];
    for (case, token, says) in cases {
        let message = assert_invalid_token(&call(&app, "bot", &token, "ping", json!({})).await, &app, "bot");
        assert!(message.contains(says), "{case}: {message}");
    }
    // HS256 signed with the public key's bytes as the secret (the classic confusion): refused.
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("first".to_owned());
    let secret = EncodingKey::from_secret(first.jwk.to_string().as_bytes());
    let hs256 = jsonwebtoken::encode(&header, &valid, &secret).unwrap();
    assert_invalid_token(&call(&app, "bot", &hs256, "ping", json!({})).await, &app, "bot");
    // Within the leeway an expired token still passes.
    lists_and_reads(&app, "bot", &sign(&first, &with(&|c| c["exp"] = json!(now() - 10)))).await;

    // A subject granted on another agent, with a token for this one: 403.
    let bob = claims(&issuer.url, &bot, "bob");
    let message = assert_insufficient_scope(&call(&app, "bot", &sign(&first, &bob), "ping", json!({})).await);
    assert!(message.contains("not granted"), "{message}");
    // ... and with a token for its own agent, presented here: 401 (the audience).
    let bobs = sign(&first, &claims(&issuer.url, &other, "bob"));
    assert_invalid_token(&call(&app, "bot", &bobs, "ping", json!({})).await, &app, "bot");
    lists_and_reads(&app, "other", &bobs).await;
    // Without scope mcp: 403 insufficient_scope.
    let token = sign(&first, &with(&|c| c["scope"] = json!("openid profile")));
    assert_insufficient_scope(&call(&app, "bot", &token, "ping", json!({})).await);

    // Rotation: a new key served by the issuer is fetched when a token names it.
    let second = SigningKey::new("second");
    issuer.add(&second);
    tokio::time::sleep(Duration::from_millis(350)).await;
    lists_and_reads(&app, "bot", &sign(&second, &valid)).await;
    // Tokens with made-up kids do not make hivegate fetch the JWKS each time.
    let before = issuer.fetches();
    for i in 0..20 {
        let token = sign(&SigningKey::new(&format!("random-{i}")), &valid);
        assert_invalid_token(&call(&app, "bot", &token, "ping", json!({})).await, &app, "bot");
    }
    assert!(issuer.fetches() - before <= 2, "{} fetches for 20 unknown kids", issuer.fetches() - before);

    // Counted by outcome.
    let metrics = app.anon(Method::GET, "/metrics").send().await.unwrap().text().await.unwrap();
    for outcome in ["accepted", "invalid", "forbidden"] {
        let line = format!("hivegate_oauth_tokens_total{{outcome=\"{outcome}\"}} ");
        assert!(metrics.lines().any(|l| l.starts_with(&line)), "no {line} in /metrics");
    }

    // The key behind the token revoked on one replica: refused on the other at once (PostgreSQL runs two).
    let replica = match backend {
        Backend::Postgres => Some(spawn_app_on_with(app.db.clone(), configure).await),
        Backend::Sqlite => None,
    };
    let on_replica = replica.as_ref().unwrap_or(&app);
    let replica_bot = format!("{}/bot/mcp", on_replica.address);
    let token = sign(&first, &claims(&issuer.url, &replica_bot, "alice"));
    lists_and_reads(on_replica, "bot", &token).await;
    app.revoke_key("bot", &key.id).await;
    let message = assert_invalid_token(&call(on_replica, "bot", &token, "ping", json!({})).await, on_replica, "bot");
    assert!(message.contains("revoked"), "{message}");
    // A grant deleted on one replica: its subject's next token is refused on the other at once.
    let bobs = sign(&first, &claims(&issuer.url, &format!("{}/other/mcp", on_replica.address), "bob"));
    lists_and_reads(on_replica, "other", &bobs).await;
    let response = app.op(Method::DELETE, "/admin/v1/agents/other/oauth-subjects/bob").send().await.unwrap();
    expect_status(response, StatusCode::NO_CONTENT).await;
    let message = assert_insufficient_scope(&call(on_replica, "other", &bobs, "ping", json!({})).await);
    assert!(message.contains("not granted"), "{message}");
}

/// Subject grants: created, replaced, read, listed, deleted; bounded in count and size; only usable keys
/// of the agent; a deleted grant refuses the subject's next token.
async fn subject_grants_are_managed_and_bounded(backend: Backend) {
    let first = SigningKey::new("first");
    let issuer = Issuer::start(&[&first]).await;
    let issuer_url = issuer.url.clone();
    let app = spawn_app_with(backend, move |config| {
        external(&issuer_url)(config);
        config.oauth.max_subjects_per_agent = 2;
        config.oauth.max_subject_bytes = 16;
    })
    .await;
    for agent in ["bot", "other"] {
        app.create_agent(agent).await;
        app.put_text(agent, "test://doc", "hello").await;
    }
    let key = app.issue_key("bot", &["mcp"]).await;
    let second = app.issue_key("bot", &["mcp", "registry"]).await;
    let foreign = app.issue_key("other", &["mcp"]).await;
    let subjects = "/admin/v1/agents/bot/oauth-subjects";

    let created = grant(&app, "bot", "alice", &key).await;
    assert_eq!(created["issuer"], issuer.url);
    assert_eq!(created["subject"], "alice");
    assert_eq!(created["keyId"], key.id);
    // Replaced: 200, the new key.
    let path = format!("{subjects}/alice");
    let response = app.op(Method::PUT, &path).json(&json!({"keyId": second.id})).send().await.unwrap();
    assert_eq!(expect_json(response, StatusCode::OK).await["keyId"], second.id);
    let response = app.op(Method::GET, &path).send().await.unwrap();
    assert_eq!(expect_json(response, StatusCode::OK).await["keyId"], second.id);
    // A subject with characters a path must encode.
    let response = app.op(Method::PUT, &format!("{subjects}/a%7Cb%20c")).json(&json!({"keyId": key.id}));
    assert_eq!(expect_json(response.send().await.unwrap(), StatusCode::CREATED).await["subject"], "a|b c");
    let listed = expect_json(app.op(Method::GET, subjects).send().await.unwrap(), StatusCode::OK).await;
    let names: Vec<&str> = listed["items"].as_array().unwrap().iter().map(|g| g["subject"].as_str().unwrap()).collect();
    assert_eq!(names, ["alice", "a|b c"], "by issuer and subject, bytewise");

    // Refusals change nothing: a third grant, a long subject, another agent's key, a revoked key, no key.
    let response = app.op(Method::PUT, &format!("{subjects}/carol")).json(&json!({"keyId": key.id}));
    expect_problem(response.send().await.unwrap(), StatusCode::CONFLICT).await;
    let response = app.op(Method::PUT, &format!("{subjects}/{}", "x".repeat(17))).json(&json!({"keyId": key.id}));
    expect_problem(response.send().await.unwrap(), StatusCode::PAYLOAD_TOO_LARGE).await;
    let response = app.op(Method::PUT, &path).json(&json!({"keyId": foreign.id})).send().await.unwrap();
    expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    let response = app.op(Method::PUT, &path).json(&json!({"key": key.id})).send().await.unwrap();
    expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    let response = app.op(Method::GET, &path).send().await.unwrap();
    assert_eq!(expect_json(response, StatusCode::OK).await["keyId"], second.id);
    // Only the operator manages grants.
    let response = app.with_key(Method::GET, subjects, &second.key).send().await.unwrap();
    expect_problem(response, StatusCode::FORBIDDEN).await;

    // The token acts as the key granted, with the scopes both have; deleting the grant refuses it next.
    let token = sign(&first, &claims(&issuer.url, &format!("{}/bot/mcp", app.address), "alice"));
    lists_and_reads(&app, "bot", &token).await;
    expect_status(app.op(Method::DELETE, &path).send().await.unwrap(), StatusCode::NO_CONTENT).await;
    assert_insufficient_scope(&call(&app, "bot", &token, "ping", json!({})).await);
    expect_problem(app.op(Method::DELETE, &path).send().await.unwrap(), StatusCode::NOT_FOUND).await;
    expect_problem(app.op(Method::GET, &path).send().await.unwrap(), StatusCode::NOT_FOUND).await;
    // A revoked key cannot be granted.
    app.revoke_key("bot", &key.id).await;
    let response = app.op(Method::PUT, &path).json(&json!({"keyId": key.id})).send().await.unwrap();
    expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY).await;
}
