//! The built-in authorization server (`oauth.mode = "builtin"`) over HTTP: metadata, client registration
//! (Dynamic Client Registration and metadata documents), the consent page, codes with PKCE, tokens, refresh
//! rotation, and tokens ending with their key.

use std::time::Duration;

use base64::Engine as _;
use reqwest::header::LOCATION;
use reqwest::{Method, Response, StatusCode};
use serde_json::{Value, json};
use sha2::Digest as _;

use crate::helpers::{
    Api, Backend, IssuedKey, TestApp, eventually, expect_json, expect_status, spawn_app_on_with, spawn_app_with, str_of,
};

both!(
    the_whole_flow_with_a_registered_client,
    the_whole_flow_with_a_metadata_document,
    metadata_lists_the_endpoints,
    pkce_mismatch_and_plain_are_refused,
    redirect_uri_mismatch_is_refused,
    a_reused_code_revokes_what_it_issued,
    a_key_of_another_agent_is_refused,
    a_revoked_or_expired_key_ends_its_tokens,
    metadata_documents_on_private_addresses_are_refused,
    oversized_and_slow_metadata_documents_are_refused,
    registration_is_bounded
);

/// Where clients in these stories are sent back to; never contacted (the stories read `Location`).
const CALLBACK: &str = "http://127.0.0.1:9/callback";

/// An application with the built-in authorization server; metadata documents may be fetched from
/// 127.0.0.1 over plain HTTP when `insecure_loopback`.
async fn builtin_app(backend: Backend, insecure_loopback: bool) -> TestApp {
    spawn_app_with(backend, |config| configure(config, insecure_loopback)).await
}

fn configure(config: &mut hivegate::config::Config, insecure_loopback: bool) {
    config.oauth.mode = hivegate::oauth::config::Mode::Builtin;
    if insecure_loopback {
        config.oauth.builtin.allow_insecure_metadata_hosts = vec!["127.0.0.1".to_owned()];
    }
    config.oauth.builtin.metadata_timeout_ms = 1500;
    config.oauth.builtin.max_metadata_bytes = 4096;
}

/// A PKCE verifier and its S256 challenge.
struct Pkce {
    verifier: String,
    challenge: String,
}

impl Pkce {
    fn new() -> Self {
        let verifier = hivegate::domain::key::random_token("v-");
        let challenge =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()));
        Self { verifier, challenge }
    }
}

/// Registers a client with `redirect_uris` through Dynamic Client Registration; returns its id.
async fn register(app: &TestApp, redirect_uris: &[&str]) -> String {
    let response = app
        .anon(Method::POST, "/oauth/register")
        .json(&json!({"client_name": "Test <Client>", "redirect_uris": redirect_uris,
                      "token_endpoint_auth_method": "none"}))
        .send()
        .await
        .unwrap();
    let body = expect_json(response, StatusCode::CREATED).await;
    assert_eq!(body["token_endpoint_auth_method"], "none");
    str_of(&body, "client_id").to_owned()
}

/// The canonical MCP URL of `agent`.
fn resource(app: &TestApp, agent: &str) -> String {
    format!("{}/{agent}/mcp", app.address)
}

/// The authorization request's parameters.
fn authorize_params(app: &TestApp, client_id: &str, pkce: &Pkce, agent: &str) -> Vec<(String, String)> {
    [
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", CALLBACK),
        ("code_challenge", pkce.challenge.as_str()),
        ("code_challenge_method", "S256"),
        ("state", "st<&>"),
        ("scope", "mcp"),
        ("resource", resource(app, agent).as_str()),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value.to_owned()))
    .collect()
}

/// `GET /oauth/authorize` with `params`.
async fn authorize_page(app: &TestApp, params: &[(String, String)]) -> Response {
    app.anon(Method::GET, "/oauth/authorize").query(params).send().await.unwrap()
}

/// The consent page's hidden fields, read back from its HTML as a browser would.
async fn consent_form(response: Response) -> Vec<(String, String)> {
    assert_eq!(response.status(), StatusCode::OK);
    let policy = response.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(policy.contains("default-src 'none'") && policy.contains("frame-ancestors 'none'"), "{policy}");
    let html = response.text().await.unwrap();
    assert!(!html.contains("<script"), "the page runs no script");
    let mut fields = Vec::new();
    for input in html.split("<input type=\"hidden\" ").skip(1) {
        let name = between(input, "name=\"", "\"");
        let value = between(input, "value=\"", "\"");
        fields.push((unescape(name), unescape(value)));
    }
    assert!(fields.iter().any(|(name, _)| name == "form_token"), "{html}");
    fields
}

fn between<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let from = text.find(start).expect("the start") + start.len();
    let to = text[from..].find(end).expect("the end") + from;
    &text[from..to]
}

/// HTML character references as the page writes them.
fn unescape(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let end = rest[at..].find(';').expect("a reference ends") + at;
        let entity = &rest[at + 1..end];
        let decoded = match entity {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            _ if entity.starts_with("#x") => {
                char::from_u32(u32::from_str_radix(&entity[2..], 16).expect("hex")).expect("a char")
            }
            _ if entity.starts_with('#') => char::from_u32(entity[1..].parse().expect("decimal")).expect("a char"),
            other => panic!("unexpected entity {other}"),
        };
        out.push(decoded);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Posts the consent form with `key` and `decision`.
async fn consent(app: &TestApp, fields: &[(String, String)], key: &str, decision: &str) -> Response {
    let mut form = fields.to_vec();
    form.push(("api_key".to_owned(), key.to_owned()));
    form.push(("decision".to_owned(), decision.to_owned()));
    app.anon(Method::POST, "/oauth/authorize").form(&form).send().await.unwrap()
}

/// The query of a redirect to the callback, by name.
fn redirected(response: &Response) -> Vec<(String, String)> {
    assert_eq!(response.status(), StatusCode::SEE_OTHER, "a redirect to the client");
    let location = response.headers()[LOCATION].to_str().unwrap();
    assert!(location.starts_with(CALLBACK), "{location}");
    let url = url::Url::parse(location).unwrap();
    url.query_pairs().map(|(name, value)| (name.into_owned(), value.into_owned())).collect()
}

fn param<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs.iter().find(|(seen, _)| seen == name).map(|(_, value)| value.as_str())
}

/// Consents with `key` and returns the code, checking `state` and `iss`.
async fn code_for(app: &TestApp, client_id: &str, pkce: &Pkce, agent: &str, key: &str) -> String {
    let fields = consent_form(authorize_page(app, &authorize_params(app, client_id, pkce, agent)).await).await;
    let response = consent(app, &fields, key, "allow").await;
    let pairs = redirected(&response);
    assert_eq!(param(&pairs, "state"), Some("st<&>"));
    assert_eq!(param(&pairs, "iss"), Some(app.address.as_str()));
    param(&pairs, "code").expect("a code").to_owned()
}

/// Goes through the whole flow for `agent` with `key`: the access and refresh tokens.
async fn granted(app: &TestApp, client_id: &str, agent: &str, key: &str) -> (String, String) {
    let pkce = Pkce::new();
    let code = code_for(app, client_id, &pkce, agent, key).await;
    tokens(exchange(app, client_id, &code, &pkce.verifier).await).await
}

/// `POST /oauth/token` with `form`.
async fn token(app: &TestApp, form: &[(&str, &str)]) -> Response {
    app.anon(Method::POST, "/oauth/token").form(form).send().await.unwrap()
}

/// Exchanges a code.
async fn exchange(app: &TestApp, client_id: &str, code: &str, verifier: &str) -> Response {
    token(
        app,
        &[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("client_id", client_id),
            ("redirect_uri", CALLBACK),
            ("code_verifier", verifier),
        ],
    )
    .await
}

/// The OAuth error of a refused token request.
async fn oauth_error(response: Response, status: StatusCode, code: &str) -> Value {
    assert_eq!(response.headers().get("cache-control").and_then(|v| v.to_str().ok()), Some("no-store"));
    let body = expect_json(response, status).await;
    assert_eq!(body["error"], code, "{body}");
    assert!(body["error_description"].is_string(), "{body}");
    body
}

/// The tokens of a successful exchange or refresh.
async fn tokens(response: Response) -> (String, String) {
    assert_eq!(response.headers().get("cache-control").and_then(|v| v.to_str().ok()), Some("no-store"));
    let body = expect_json(response, StatusCode::OK).await;
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["scope"], "mcp");
    assert!(body["expires_in"].as_u64().is_some_and(|secs| secs > 0), "{body}");
    let access = str_of(&body, "access_token").to_owned();
    assert!(access.starts_with("hgat_") && !access.starts_with("bak_"), "{access}");
    (access, str_of(&body, "refresh_token").to_owned())
}

/// An MCP request with an access token; returns the status and body.
async fn mcp(app: &TestApp, agent: &str, token: &str, method: &str, params: Value) -> (StatusCode, Value) {
    let response = app
        .anon(Method::POST, &format!("/{agent}/mcp"))
        .bearer_auth(token)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// An agent with a resource and an `mcp` key.
async fn agent_with_resource(app: &TestApp, agent: &str) -> IssuedKey {
    app.create_agent(agent).await;
    app.put_text(agent, "docs://readme", "hello from the registry").await;
    app.issue_key(agent, &["mcp"]).await
}

/// Lists and reads with `access`; panics unless both work.
async fn lists_and_reads(app: &TestApp, agent: &str, access: &str) {
    let (status, body) = mcp(app, agent, access, "resources/list", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["result"]["resources"][0]["uri"], "docs://readme", "{body}");
    let (status, body) = mcp(app, agent, access, "resources/read", json!({"uri": "docs://readme"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["result"]["contents"][0]["text"], "hello from the registry", "{body}");
}

/// The agent's audit log once its `oauth` records satisfy `check` (the writer batches them).
async fn audited(app: &TestApp, agent: &str, check: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let path = format!("/admin/v1/audit?agent={agent}");
    eventually("the authorization server's audit records", || async {
        let audit = app.list_all(&path, None).await;
        let oauth: Vec<Value> = audit.iter().filter(|record| record["kind"] == "oauth").cloned().collect();
        check(&oauth).then_some(audit)
    })
    .await
}

async fn the_whole_flow_with_a_registered_client(backend: Backend) {
    let app = builtin_app(backend, false).await;
    let key = agent_with_resource(&app, "bot").await;
    let client_id = register(&app, &[CALLBACK]).await;
    let pkce = Pkce::new();

    // The page names the client (escaped) and the agent, and asks for a key.
    let response = authorize_page(&app, &authorize_params(&app, &client_id, &pkce, "bot")).await;
    assert_eq!(response.headers()["cache-control"], "no-store");
    let html = response.text().await.unwrap();
    assert!(html.contains("Test &lt;Client&gt;") && html.contains("type=\"password\""), "{html}");

    // Denied: back to the client with access_denied.
    let fields = consent_form(authorize_page(&app, &authorize_params(&app, &client_id, &pkce, "bot")).await).await;
    // Not when another site's page submits the form (with a token it fetched): refused on the page.
    let mut cross = fields.clone();
    cross.push(("decision".to_owned(), "deny".to_owned()));
    let response =
        app.anon(Method::POST, "/oauth/authorize").header("sec-fetch-site", "cross-site").form(&cross).send().await;
    let response = response.unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(response.headers().get(LOCATION).is_none());
    let pairs = redirected(&consent(&app, &fields, "", "deny").await);
    assert_eq!(param(&pairs, "error"), Some("access_denied"));
    assert_eq!(param(&pairs, "code"), None);

    // A tampered form is refused on the page.
    let mut tampered = fields.clone();
    for (name, value) in &mut tampered {
        if name == "state" {
            *value = "other".to_owned();
        }
    }
    let response = consent(&app, &tampered, &key.key, "allow").await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(response.text().await.unwrap().contains("expired or was altered"));

    let code = code_for(&app, &client_id, &pkce, "bot", &key.key).await;
    assert!(code.starts_with("hgac_"), "{code}");
    let (access, refresh) = tokens(exchange(&app, &client_id, &code, &pkce.verifier).await).await;
    lists_and_reads(&app, "bot", &access).await;
    // The API key keeps working beside the token.
    let (status, _) = mcp(&app, "bot", &key.key, "resources/list", json!({})).await;
    assert_eq!(status, StatusCode::OK);

    // Refresh: new tokens; the old refresh token is then refused and revokes its grant.
    let refresh_form = |refresh: &str| {
        vec![
            ("grant_type".to_owned(), "refresh_token".to_owned()),
            ("refresh_token".to_owned(), refresh.to_owned()),
            ("client_id".to_owned(), client_id.clone()),
        ]
    };
    let refreshed = app.anon(Method::POST, "/oauth/token").form(&refresh_form(&refresh)).send().await.unwrap();
    let (access2, refresh2) = tokens(refreshed).await;
    assert_ne!(access2, access);
    assert_ne!(refresh2, refresh);
    lists_and_reads(&app, "bot", &access2).await;
    let replayed = app.anon(Method::POST, "/oauth/token").form(&refresh_form(&refresh)).send().await.unwrap();
    oauth_error(replayed, StatusCode::BAD_REQUEST, "invalid_grant").await;
    let (status, _) = mcp(&app, "bot", &access2, "resources/list", json!({})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "a replayed refresh token revokes its whole grant");
    let after = app.anon(Method::POST, "/oauth/token").form(&refresh_form(&refresh2)).send().await.unwrap();
    oauth_error(after, StatusCode::BAD_REQUEST, "invalid_grant").await;

    // Malformed token requests get OAuth errors.
    oauth_error(token(&app, &[("grant_type", "password")]).await, StatusCode::BAD_REQUEST, "unsupported_grant_type")
        .await;
    oauth_error(token(&app, &[("code", "x")]).await, StatusCode::BAD_REQUEST, "invalid_request").await;
    let twice = app
        .anon(Method::POST, "/oauth/token")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("grant_type=authorization_code&grant_type=refresh_token")
        .send()
        .await
        .unwrap();
    oauth_error(twice, StatusCode::BAD_REQUEST, "invalid_request").await;

    // Revocation (RFC 7009) of a fresh grant's refresh token ends its access token.
    let (access, refresh) = granted(&app, &client_id, "bot", &key.key).await;
    let revoked = app
        .anon(Method::POST, "/oauth/revoke")
        .form(&[("token", refresh.as_str()), ("client_id", client_id.as_str())])
        .send()
        .await
        .unwrap();
    expect_status(revoked, StatusCode::OK).await;
    let (status, _) = mcp(&app, "bot", &access, "resources/list", json!({})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Issued and refused grants are in the agent's audit log, without secrets.
    let audit = audited(&app, "bot", |oauth| {
        oauth.iter().any(|r| r["action"] == "oauth/token" && r["outcome"] == "ok")
            && oauth.iter().any(|r| r["action"] == "oauth/refresh" && r["outcome"] == "refresh_reused")
            && oauth.iter().any(|r| r["action"] == "oauth/revoke" && r["outcome"] == "ok")
    })
    .await;
    let text = serde_json::to_string(&audit).unwrap();
    assert!(!text.contains(&key.key) && !text.contains(&refresh) && !text.contains(&access));
}

async fn metadata_lists_the_endpoints(backend: Backend) {
    let app = builtin_app(backend, false).await;
    let response = app.anon(Method::GET, "/.well-known/oauth-authorization-server").send().await.unwrap();
    let body = expect_json(response, StatusCode::OK).await;
    let issuer = app.address.as_str();
    assert_eq!(body["issuer"], issuer);
    assert_eq!(body["authorization_endpoint"], format!("{issuer}/oauth/authorize"));
    assert_eq!(body["token_endpoint"], format!("{issuer}/oauth/token"));
    assert_eq!(body["registration_endpoint"], format!("{issuer}/oauth/register"));
    assert_eq!(body["revocation_endpoint"], format!("{issuer}/oauth/revoke"));
    assert_eq!(body["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(body["client_id_metadata_document_supported"], true);
    assert_eq!(body["grant_types_supported"], json!(["authorization_code", "refresh_token"]));
    assert_eq!(body["token_endpoint_auth_methods_supported"], json!(["none"]));
    assert_eq!(body["response_types_supported"], json!(["code"]));
}

async fn pkce_mismatch_and_plain_are_refused(backend: Backend) {
    let app = builtin_app(backend, false).await;
    let key = agent_with_resource(&app, "bot").await;
    let client_id = register(&app, &[CALLBACK]).await;

    // `plain`, or no method, goes back to the client as invalid_request; nothing is shown to consent to.
    let pkce = Pkce::new();
    for method in [Some("plain"), None] {
        let mut params = authorize_params(&app, &client_id, &pkce, "bot");
        params.retain(|(name, _)| name != "code_challenge_method");
        if let Some(method) = method {
            params.push(("code_challenge_method".to_owned(), method.to_owned()));
        }
        let pairs = redirected(&authorize_page(&app, &params).await);
        assert_eq!(param(&pairs, "error"), Some("invalid_request"), "{method:?}");
        assert_eq!(param(&pairs, "state"), Some("st<&>"));
    }
    // Nor without a challenge.
    let mut params = authorize_params(&app, &client_id, &pkce, "bot");
    params.retain(|(name, _)| name != "code_challenge");
    assert_eq!(param(&redirected(&authorize_page(&app, &params).await), "error"), Some("invalid_request"));

    // A verifier that does not match: invalid_grant, and the code still works with the right one.
    let code = code_for(&app, &client_id, &pkce, "bot", &key.key).await;
    let wrong = Pkce::new();
    oauth_error(exchange(&app, &client_id, &code, &wrong.verifier).await, StatusCode::BAD_REQUEST, "invalid_grant")
        .await;
    oauth_error(exchange(&app, &client_id, &code, "short").await, StatusCode::BAD_REQUEST, "invalid_grant").await;
    let (access, _) = tokens(exchange(&app, &client_id, &code, &pkce.verifier).await).await;
    lists_and_reads(&app, "bot", &access).await;
}

async fn redirect_uri_mismatch_is_refused(backend: Backend) {
    let app = builtin_app(backend, false).await;
    let key = agent_with_resource(&app, "bot").await;
    let client_id = register(&app, &[CALLBACK, "http://127.0.0.1:9/other"]).await;
    let pkce = Pkce::new();

    // Not registered exactly: shown on the page, never redirected to.
    for wrong in [
        "http://127.0.0.1:9/callback/",
        "http://127.0.0.1:9/callback?x=1",
        "https://attacker.example/cb",
        "http://127.0.0.1:10/callback",
    ] {
        let mut params = authorize_params(&app, &client_id, &pkce, "bot");
        params.retain(|(name, _)| name != "redirect_uri");
        params.push(("redirect_uri".to_owned(), wrong.to_owned()));
        let response = authorize_page(&app, &params).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{wrong}");
        assert!(response.headers().get(LOCATION).is_none());
        assert!(response.text().await.unwrap().contains("is not one the client registered"), "{wrong}");
    }
    // An unknown client is also shown on the page.
    let response = authorize_page(&app, &authorize_params(&app, "hgc_unknown", &pkce, "bot")).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(response.headers().get(LOCATION).is_none());

    // The code is bound to the redirect URI of its request.
    let code = code_for(&app, &client_id, &pkce, "bot", &key.key).await;
    let response = token(
        &app,
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("client_id", &client_id),
            ("redirect_uri", "http://127.0.0.1:9/other"),
            ("code_verifier", &pkce.verifier),
        ],
    )
    .await;
    oauth_error(response, StatusCode::BAD_REQUEST, "invalid_grant").await;
    // And to its client.
    let other = register(&app, &[CALLBACK]).await;
    oauth_error(exchange(&app, &other, &code, &pkce.verifier).await, StatusCode::BAD_REQUEST, "invalid_grant").await;
    // A resource that is not an agent's MCP URL goes back as invalid_target.
    let mut params = authorize_params(&app, &client_id, &pkce, "bot");
    params.retain(|(name, _)| name != "resource");
    params.push(("resource".to_owned(), "https://elsewhere.example/bot/mcp".to_owned()));
    assert_eq!(param(&redirected(&authorize_page(&app, &params).await), "error"), Some("invalid_target"));
    // An unknown scope as invalid_scope.
    let mut params = authorize_params(&app, &client_id, &pkce, "bot");
    params.retain(|(name, _)| name != "scope");
    params.push(("scope".to_owned(), "mcp registry".to_owned()));
    assert_eq!(param(&redirected(&authorize_page(&app, &params).await), "error"), Some("invalid_scope"));
}

async fn a_reused_code_revokes_what_it_issued(backend: Backend) {
    let app = builtin_app(backend, false).await;
    let key = agent_with_resource(&app, "bot").await;
    let client_id = register(&app, &[CALLBACK]).await;
    let pkce = Pkce::new();
    let code = code_for(&app, &client_id, &pkce, "bot", &key.key).await;
    let (access, refresh) = tokens(exchange(&app, &client_id, &code, &pkce.verifier).await).await;
    lists_and_reads(&app, "bot", &access).await;

    oauth_error(exchange(&app, &client_id, &code, &pkce.verifier).await, StatusCode::BAD_REQUEST, "invalid_grant")
        .await;
    let (status, body) = mcp(&app, "bot", &access, "resources/list", json!({})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let refreshed =
        token(&app, &[("grant_type", "refresh_token"), ("refresh_token", &refresh), ("client_id", &client_id)]).await;
    oauth_error(refreshed, StatusCode::BAD_REQUEST, "invalid_grant").await;
    // An unknown code is refused alike.
    oauth_error(
        exchange(&app, &client_id, "hgac_nothing", &pkce.verifier).await,
        StatusCode::BAD_REQUEST,
        "invalid_grant",
    )
    .await;
}

async fn a_key_of_another_agent_is_refused(backend: Backend) {
    let app = builtin_app(backend, false).await;
    agent_with_resource(&app, "bot").await;
    let other = agent_with_resource(&app, "other").await;
    let registry = app.issue_key("bot", &["registry"]).await;
    let client_id = register(&app, &[CALLBACK]).await;
    let pkce = Pkce::new();
    let fields = consent_form(authorize_page(&app, &authorize_params(&app, &client_id, &pkce, "bot")).await).await;

    for (key, status) in [
        (other.key.as_str(), StatusCode::FORBIDDEN),
        (registry.key.as_str(), StatusCode::FORBIDDEN),
        ("bak_00000000000000000000000000000000000000000", StatusCode::UNAUTHORIZED),
        ("not a key", StatusCode::UNAUTHORIZED),
    ] {
        let response = consent(&app, &fields, key, "allow").await;
        assert_eq!(response.status(), status, "{key}");
        assert!(response.headers().get(LOCATION).is_none());
        let html = response.text().await.unwrap();
        assert!(html.contains("role=\"alert\""), "{html}");
        assert!(!html.contains(key), "the pasted key is never echoed");
    }
    audited(&app, "bot", |oauth| oauth.iter().any(|r| r["outcome"] == "key_not_allowed")).await;

    // Refused keys count toward the address's lockout.
    let locked = spawn_app_with(backend, |config| {
        configure(config, false);
        config.rate_limits.failed_auth_attempts = 3;
    })
    .await;
    let key = agent_with_resource(&locked, "bot").await;
    let client_id = register(&locked, &[CALLBACK]).await;
    let fields =
        consent_form(authorize_page(&locked, &authorize_params(&locked, &client_id, &pkce, "bot")).await).await;
    for _ in 0..3 {
        let response = consent(&locked, &fields, "bak_00000000000000000000000000000000000000000", "allow").await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    }
    let response = consent(&locked, &fields, &key.key, "allow").await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS, "locked out, even with the right key");
}

async fn a_revoked_or_expired_key_ends_its_tokens(backend: Backend) {
    let app = builtin_app(backend, false).await;
    let key = agent_with_resource(&app, "bot").await;
    let client_id = register(&app, &[CALLBACK]).await;

    // Revocation: the access token is refused at once, and so is its refresh token.
    let (access, refresh) = granted(&app, &client_id, "bot", &key.key).await;
    lists_and_reads(&app, "bot", &access).await;
    app.revoke_key("bot", &key.id).await;
    let (status, body) = mcp(&app, "bot", &access, "resources/list", json!({})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let refreshed =
        token(&app, &[("grant_type", "refresh_token"), ("refresh_token", &refresh), ("client_id", &client_id)]).await;
    oauth_error(refreshed, StatusCode::BAD_REQUEST, "invalid_grant").await;

    // A code consented with a key that is revoked before the exchange gives nothing.
    let key = app.issue_key("bot", &["mcp"]).await;
    let pkce = Pkce::new();
    let code = code_for(&app, &client_id, &pkce, "bot", &key.key).await;
    app.revoke_key("bot", &key.id).await;
    oauth_error(exchange(&app, &client_id, &code, &pkce.verifier).await, StatusCode::BAD_REQUEST, "invalid_grant")
        .await;

    // Expiry: a key that expires in two seconds takes its token with it.
    let expires_at = (chrono::Utc::now() + chrono::Duration::seconds(2)).to_rfc3339();
    let body = app.issue_key_with("bot", &json!({"scopes": ["mcp"], "expiresAt": expires_at})).await;
    let expiring = str_of(&body, "key").to_owned();
    let (access, _) = granted(&app, &client_id, "bot", &expiring).await;
    lists_and_reads(&app, "bot", &access).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (status, _) = mcp(&app, "bot", &access, "resources/list", json!({})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Deleting the agent ends everything too.
    let key = app.issue_key("bot", &["mcp"]).await;
    let (access, _) = granted(&app, &client_id, "bot", &key.key).await;
    expect_status(app.op(Method::DELETE, "/admin/v1/agents/bot").send().await.unwrap(), StatusCode::NO_CONTENT).await;
    let (status, _) = mcp(&app, "bot", &access, "resources/list", json!({})).await;
    assert_ne!(status, StatusCode::OK);
}

/// Two replicas on one PostgreSQL database: a key revoked through one ends its token on the other at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_revoked_on_one_replica_ends_its_token_on_the_other_at_once() {
    let a = builtin_app(Backend::Postgres, false).await;
    let b = spawn_app_on_with(a.db.clone(), |config| configure(config, false)).await;
    let key = agent_with_resource(&a, "bot").await;
    let client_id = register(&a, &[CALLBACK]).await;
    let (access, _) = granted(&a, &client_id, "bot", &key.key).await;
    // Both replicas accept the token (and cache its key).
    for _ in 0..3 {
        let (status, _) = mcp(&b, "bot", &access, "resources/list", json!({})).await;
        assert_eq!(status, StatusCode::OK);
    }
    let (status, _) = mcp(&a, "bot", &access, "resources/list", json!({})).await;
    assert_eq!(status, StatusCode::OK);
    // The audience is the agent: the same token does not open another agent, on either replica.
    agent_with_resource(&a, "other").await;
    let (status, _) = mcp(&b, "other", &access, "resources/list", json!({})).await;
    assert!(status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN, "{status}");

    a.revoke_key("bot", &key.id).await;
    let (status, body) = mcp(&b, "bot", &access, "resources/list", json!({})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "refused on the other replica at once: {body}");
}

/// A small server of client metadata documents on 127.0.0.1: `/client.json` (the document for `redirect`),
/// `/big.json` (larger than the stories' limit), `/slow.json` (answers after the stories' timeout),
/// `/wrong.json` (names another client id), `/redirect.json` (a redirect to the good one).
async fn document_server() -> String {
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let document = {
        let base = base.clone();
        move |path: &str| {
            json!({"client_id": format!("{base}{path}"), "client_name": "Document Client",
                   "redirect_uris": [CALLBACK], "token_endpoint_auth_method": "none",
                   "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"]})
        }
    };
    let good = document("/client.json");
    let mut big = document("/big.json");
    big["padding"] = json!("x".repeat(10_000));
    let slow = document("/slow.json");
    let wrong = document("/elsewhere.json");
    let router = axum::Router::new()
        .route("/client.json", get(move || async move { axum::Json(good) }))
        .route("/big.json", get(move || async move { axum::Json(big) }))
        .route(
            "/slow.json",
            get(move || async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                axum::Json(slow)
            }),
        )
        .route("/wrong.json", get(move || async move { axum::Json(wrong) }))
        .route("/redirect.json", get(|| async { axum::response::Redirect::temporary("/client.json") }));
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    base
}

async fn the_whole_flow_with_a_metadata_document(backend: Backend) {
    let app = builtin_app(backend, true).await;
    let key = agent_with_resource(&app, "bot").await;
    let base = document_server().await;
    let client_id = format!("{base}/client.json");
    let pkce = Pkce::new();
    let response = authorize_page(&app, &authorize_params(&app, &client_id, &pkce, "bot")).await;
    let html = response.text().await.unwrap();
    assert!(html.contains("Document Client"), "{html}");
    let code = code_for(&app, &client_id, &pkce, "bot", &key.key).await;
    let (access, refresh) = tokens(exchange(&app, &client_id, &code, &pkce.verifier).await).await;
    lists_and_reads(&app, "bot", &access).await;
    let refreshed =
        token(&app, &[("grant_type", "refresh_token"), ("refresh_token", &refresh), ("client_id", &client_id)]).await;
    let (access, _) = tokens(refreshed).await;
    lists_and_reads(&app, "bot", &access).await;

    // A document whose client_id is not its URL, and a redirect, are refused on the page.
    for (path, why) in [("/wrong.json", "not its own URL"), ("/redirect.json", "redirects are not followed")] {
        let client_id = format!("{base}{path}");
        let response = authorize_page(&app, &authorize_params(&app, &client_id, &pkce, "bot")).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{path}");
        assert!(response.headers().get(LOCATION).is_none());
        let html = response.text().await.unwrap();
        assert!(html.contains(why), "{path}: {html}");
    }
}

async fn metadata_documents_on_private_addresses_are_refused(backend: Backend) {
    // Without the allow switch, loopback is refused, over https and by name too; private addresses always.
    let app = builtin_app(backend, false).await;
    let base = document_server().await;
    let port = base.rsplit(':').next().unwrap().to_owned();
    let pkce = Pkce::new();
    for (client_id, why) in [
        (format!("{base}/client.json"), "https"),
        (format!("https://127.0.0.1:{port}/client.json"), "not publicly routable"),
        (format!("https://localhost:{port}/client.json"), "not publicly routable"),
        ("https://10.0.0.1/client.json".to_owned(), "not publicly routable"),
        ("https://192.168.1.10/client.json".to_owned(), "not publicly routable"),
        ("https://169.254.169.254/latest/meta-data".to_owned(), "not publicly routable"),
        ("https://[fd00::1]/client.json".to_owned(), "not publicly routable"),
        ("https://100.64.0.1/client.json".to_owned(), "not publicly routable"),
        ("https://client.example/".to_owned(), "must have a path"),
    ] {
        let response = authorize_page(&app, &authorize_params(&app, &client_id, &pkce, "bot")).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{client_id}");
        assert!(response.headers().get(LOCATION).is_none());
        let html = response.text().await.unwrap();
        assert!(html.contains(why), "{client_id}: {html}");
    }
    // The allow switch names hosts: 127.0.0.1 allowed does not allow another private address.
    let app = builtin_app(backend, true).await;
    let response = authorize_page(&app, &authorize_params(&app, "http://10.0.0.1/client.json", &pkce, "bot")).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}

async fn oversized_and_slow_metadata_documents_are_refused(backend: Backend) {
    let app = builtin_app(backend, true).await;
    let base = document_server().await;
    let pkce = Pkce::new();
    for (path, why) in [("/big.json", "larger than 4096 bytes"), ("/slow.json", "timed out")] {
        let client_id = format!("{base}{path}");
        let started = std::time::Instant::now();
        let response = authorize_page(&app, &authorize_params(&app, &client_id, &pkce, "bot")).await;
        assert!(started.elapsed() < Duration::from_secs(4), "{path} took {:?}", started.elapsed());
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{path}");
        let html = response.text().await.unwrap();
        assert!(html.contains(why), "{path}: {html}");
    }
}

async fn registration_is_bounded(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        configure(config, false);
        config.oauth.builtin.registrations_per_minute = 8;
    })
    .await;
    let register_with = |body: Value| {
        let request = app.anon(Method::POST, "/oauth/register").json(&body);
        async move { request.send().await.unwrap() }
    };
    for (body, code) in [
        (json!({"redirect_uris": []}), "invalid_redirect_uri"),
        (json!({"redirect_uris": ["http://example.com/cb"]}), "invalid_redirect_uri"),
        (json!({"redirect_uris": ["https://a.example/cb#x"]}), "invalid_redirect_uri"),
        (json!({"redirect_uris": [format!("https://a.example/{}", "x".repeat(3000))]}), "invalid_redirect_uri"),
        (json!({"redirect_uris": vec!["https://a.example/cb"; 11]}), "invalid_redirect_uri"),
        (json!({"redirect_uris": [CALLBACK], "client_name": "n".repeat(300)}), "invalid_client_metadata"),
        (json!({"redirect_uris": [CALLBACK], "grant_types": ["client_credentials"]}), "invalid_client_metadata"),
    ] {
        oauth_error(register_with(body.clone()).await, StatusCode::BAD_REQUEST, code).await;
    }
    // Eight registrations a minute from one address (the refused ones count): the rest wait.
    register(&app, &[CALLBACK]).await;
    oauth_error(register_with(json!({"redirect_uris": [CALLBACK]})).await, StatusCode::TOO_MANY_REQUESTS, "slow_down")
        .await;

    // At most three clients; the fourth is refused while the three are in use.
    let app = spawn_app_with(backend, |config| {
        configure(config, false);
        config.oauth.builtin.max_clients = 3;
    })
    .await;
    for _ in 0..3 {
        register(&app, &[CALLBACK]).await;
    }
    let response = app.anon(Method::POST, "/oauth/register").json(&json!({"redirect_uris": [CALLBACK]})).send().await;
    oauth_error(response.unwrap(), StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable").await;
    assert_eq!(app.db.count("select count(*) from oauth_client").await, 3);

    // Token requests are bounded per address too (each can store rows): 120 a minute, then slow_down.
    let token_request = || app.anon(Method::POST, "/oauth/token").form(&[("grant_type", "password")]);
    for _ in 0..hivegate::oauth::server::TOKEN_REQUESTS_PER_MINUTE {
        let response = token_request().send().await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }
    oauth_error(token_request().send().await.unwrap(), StatusCode::TOO_MANY_REQUESTS, "slow_down").await;
}
