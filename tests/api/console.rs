//! The console over plain HTTP: sign-in with each credential kind, the session cookie's flags, CSRF on every
//! change, hostile names rendered inert, a registry key confined to its agent, the Content-Security-Policy
//! of every page, changes audited with the console as the channel, previews as the MCP methods answer.

use reqwest::header::{HeaderMap, LOCATION, SET_COOKIE};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Api, Backend, OPERATOR_TOKEN, TestApp, expect_json, spawn_app, spawn_app_with, str_of};
use crate::mcp_client::Mcp;

both!(console_security, console_changes_are_the_admin_apis, console_lockout, console_listeners);

/// The policy every console page carries.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                      connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const XSS_SCRIPT: &str = "<script>alert('x')</script>";
const XSS_IMG: &str = "\"><img src=x onerror=alert(1)>";

/// A browser's session with the console, its cookie kept by hand.
pub struct Browser<'a> {
    app: &'a TestApp,
    cookie: Option<String>,
}

/// A console answer: status, headers, body.
pub struct Page {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Page {
    /// The CSRF token in the page's forms.
    pub fn csrf(&self) -> String {
        let start = self.body.find("name=\"csrf\" value=\"").expect("a form with a CSRF token") + 19;
        self.body[start..].split('"').next().expect("a token").to_owned()
    }

    pub fn location(&self) -> &str {
        self.headers.get(LOCATION).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    /// The page carries the console's policy (every answer but an asset's must).
    pub fn assert_policy(&self) -> &Self {
        assert_eq!(
            self.headers.get("content-security-policy").and_then(|v| v.to_str().ok()),
            Some(POLICY),
            "{} without the console's policy",
            self.status
        );
        assert_eq!(self.headers["x-content-type-options"], "nosniff");
        self
    }
}

impl<'a> Browser<'a> {
    pub fn new(app: &'a TestApp) -> Self {
        Self { app, cookie: None }
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Page {
        let request = match &self.cookie {
            Some(cookie) => request.header("cookie", cookie),
            None => request,
        };
        let response = request.send().await.unwrap();
        let page = Page {
            status: response.status(),
            headers: response.headers().clone(),
            body: response.text().await.unwrap(),
        };
        if !page.location().starts_with("/console/assets/") {
            page.assert_policy();
        }
        page
    }

    pub async fn get(&self, path: &str) -> Page {
        self.send(self.app.anon(Method::GET, path)).await
    }

    pub async fn post(&self, path: &str, form: &[(&str, &str)]) -> Page {
        self.send(self.app.anon(Method::POST, path).form(form)).await
    }

    /// Signs in with `credential`; returns the answer and keeps the cookie it sets.
    pub async fn sign_in(&mut self, credential: &str) -> Page {
        let page = self.post("/console/sign-in", &[("credential", credential)]).await;
        if let Some(set) = page.headers.get(SET_COOKIE) {
            let set = set.to_str().unwrap();
            self.cookie = Some(set.split(';').next().unwrap().to_owned());
        }
        page
    }

    /// A change with the CSRF token of `form_page`.
    pub async fn change(&self, form_page: &str, path: &str, fields: &[(&str, &str)]) -> Page {
        let csrf = self.get(form_page).await.csrf();
        let mut form = vec![("csrf", csrf.as_str())];
        form.extend_from_slice(fields);
        self.post(path, &form).await
    }
}

async fn console_security(backend: Backend) {
    let app = spawn_app(backend).await;
    let mut browser = Browser::new(&app);

    // Without a session: every page leads to the sign-in form, which carries the policy.
    for path in ["/console/", "/console/agents", "/console/audit", "/console/agents/x/registry"] {
        let page = browser.get(path).await;
        assert_eq!(page.status, StatusCode::SEE_OTHER, "{path}");
        assert_eq!(page.location(), "/console/sign-in", "{path}");
    }
    let form = browser.get("/console/sign-in").await;
    assert_eq!(form.status, StatusCode::OK);
    assert!(form.body.contains("name=\"credential\""), "{}", form.body);
    assert!(!form.body.contains("<script>"), "no inline script: {}", form.body);
    let index = app.anon(Method::GET, "/").send().await.unwrap().text().await.unwrap();
    assert!(index.contains("href=\"/console/\""), "the landing page links the console");

    // The assets are this origin's, hashed and cached, and the only scripts.
    let script = form.body.split("<script src=\"").nth(1).and_then(|rest| rest.split('"').next()).unwrap();
    // The template engine escapes `/` in attributes too, which a browser reads back as `/`.
    let script = script.replace("&#x2f;", "/");
    let script = script.as_str();
    assert!(script.starts_with("/console/assets/console."), "{script}");
    let asset = app.anon(Method::GET, script).send().await.unwrap();
    assert_eq!(asset.status(), StatusCode::OK);
    assert!(asset.headers()["cache-control"].to_str().unwrap().contains("immutable"));
    assert_eq!(browser.get("/console/assets/other.js").await.status, StatusCode::NOT_FOUND);

    // A wrong credential is refused; the operator token opens a session with a strict cookie.
    assert_eq!(browser.sign_in("wrong").await.status, StatusCode::UNAUTHORIZED);
    assert!(browser.cookie.is_none());
    let signed_in = browser.sign_in(OPERATOR_TOKEN).await;
    assert_eq!(signed_in.status, StatusCode::SEE_OTHER);
    assert_eq!(signed_in.location(), "/console/");
    let cookie = signed_in.headers[SET_COOKIE].to_str().unwrap().to_owned();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(cookie.split("; ").any(|part| part == flag), "{flag} missing from {cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain HTTP: not Secure ({cookie})");
    let overview = browser.get("/console/").await;
    assert_eq!(overview.status, StatusCode::OK, "{}", overview.body);
    assert!(overview.body.contains("Open streams"), "{}", overview.body);

    // A change without the CSRF token, or with another's, is refused and changes nothing.
    let forged = [("id", "forged"), ("name", "Forged")];
    assert_eq!(browser.post("/console/agents", &forged).await.status, StatusCode::FORBIDDEN);
    let mut wrong = forged.to_vec();
    wrong.push(("csrf", "not-the-token"));
    assert_eq!(browser.post("/console/agents", &wrong).await.status, StatusCode::FORBIDDEN);
    let missing = app.op(Method::GET, "/admin/v1/agents/forged").send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND, "a refused change changes nothing");

    // Hostile names render inert: escaped, never markup.
    for (id, name) in [("xss-script", XSS_SCRIPT), ("xss-img", XSS_IMG)] {
        let created = browser
            .change("/console/agents", "/console/agents", &[("id", id), ("name", name), ("description", name)])
            .await;
        assert_eq!(created.status, StatusCode::SEE_OTHER, "{}", created.body);
    }
    let resource = json!({"uri": "test://x/%3Cscript%3E", "name": XSS_SCRIPT, "description": XSS_IMG, "text": XSS_IMG});
    expect_json(app.put_resource("xss-script", &resource).await, StatusCode::CREATED).await;
    let prompt = json!({"description": XSS_SCRIPT, "arguments": [{"name": "a", "description": XSS_IMG}],
        "messages": [{"role": "user", "content": {"type": "text", "text": "{{ a }}"}}]});
    let response = app.op(Method::PUT, "/admin/v1/agents/xss-script/prompts/p").json(&prompt).send().await.unwrap();
    expect_json(response, StatusCode::CREATED).await;
    for path in [
        "/console/agents",
        "/console/agents/xss-script",
        "/console/agents/xss-img",
        "/console/agents/xss-script/registry",
        "/console/agents/xss-script/resource?uri=test%3A%2F%2Fx%2F%253Cscript%253E",
        "/console/agents/xss-script/prompt?name=p&preview=1&arg.a=%3Cscript%3E",
    ] {
        let page = browser.get(path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}: {}", page.body);
        assert!(!page.body.contains("<script>alert"), "{path} renders a script: {}", page.body);
        assert!(!page.body.contains("<img src=x"), "{path} renders an image: {}", page.body);
        assert!(page.body.contains("&lt;script&gt;") || page.body.contains("&lt;img"), "{path}: {}", page.body);
    }

    // An agent may be called `console`: its MCP endpoint is still its own.
    let key = crate::mcp_client::agent_with_key(&app, "console").await;
    let ping = Mcp::new(&app, "console", &key).legacy("ping", json!({})).await;
    assert_eq!(ping.status, StatusCode::OK, "{}", ping.body);

    // A registry key opens its own agent's registry and nothing else; an mcp key opens nothing.
    app.create_agent("own").await;
    app.create_agent("other").await;
    let registry_key = app.issue_key("own", &["registry"]).await;
    let mcp_key = app.issue_key("own", &["mcp"]).await;
    let mut owner = Browser::new(&app);
    assert_eq!(owner.sign_in(&mcp_key.key).await.status, StatusCode::FORBIDDEN);
    assert!(owner.cookie.is_none());
    let signed_in = owner.sign_in(&registry_key.key).await;
    assert_eq!(signed_in.location(), "/console/agents/own/registry");
    assert_eq!(owner.get("/console/agents/own/registry").await.status, StatusCode::OK);
    assert_eq!(owner.get("/console/agents/own/live").await.status, StatusCode::OK);
    for path in [
        "/console/agents/other/registry",
        "/console/agents/other/live",
        "/console/agents/other/resource",
        "/console/agents/own",
        "/console/agents",
        "/console/audit",
        "/console/audit/export",
    ] {
        assert_eq!(owner.get(path).await.status, StatusCode::FORBIDDEN, "{path}");
    }
    let csrf = owner.get("/console/agents/own/registry").await.csrf();
    let put = [("csrf", csrf.as_str()), ("uri", "test://other"), ("name", "n"), ("text", "t")];
    assert_eq!(owner.post("/console/agents/other/resource", &put).await.status, StatusCode::FORBIDDEN);
    assert_eq!(
        owner.post("/console/agents/own/delete", &[("csrf", &csrf), ("confirm", "own")]).await.status,
        StatusCode::FORBIDDEN
    );

    // Revoking the key ends its session at the next request.
    app.revoke_key("own", &registry_key.id).await;
    let after = owner.get("/console/agents/own/registry").await;
    assert_eq!(after.status, StatusCode::SEE_OTHER);
    assert_eq!(after.location(), "/console/sign-in");

    // One key keeps at most 8 sessions: signing in again and again ends its own oldest, nobody else's.
    let busy_key = app.issue_key("own", &["registry"]).await.key;
    let mut first = Browser::new(&app);
    assert_eq!(first.sign_in(&busy_key).await.status, StatusCode::SEE_OTHER);
    for _ in 0..8 {
        assert_eq!(Browser::new(&app).sign_in(&busy_key).await.status, StatusCode::SEE_OTHER);
    }
    assert_eq!(first.get("/console/agents/own/registry").await.location(), "/console/sign-in");
    assert_eq!(browser.get("/console/").await.status, StatusCode::OK, "the operator's session is untouched");

    // Another site's page cannot sign a browser in: the browser says the form came from elsewhere.
    let cross = app
        .anon(Method::POST, "/console/sign-in")
        .header("sec-fetch-site", "cross-site")
        .form(&[("credential", busy_key.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(cross.status(), StatusCode::FORBIDDEN);
    assert!(cross.headers().get(SET_COOKIE).is_none());

    // Sign-out needs the token, then the session is gone.
    let csrf = browser.get("/console/").await.csrf();
    assert_eq!(browser.post("/console/sign-out", &[]).await.status, StatusCode::FORBIDDEN);
    let out = browser.post("/console/sign-out", &[("csrf", &csrf)]).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert!(out.headers[SET_COOKIE].to_str().unwrap().contains("Max-Age=0"));
    assert_eq!(browser.get("/console/").await.location(), "/console/sign-in");
}

/// The records of `agent` in the admin API's audit log.
async fn audit_of(app: &TestApp, agent: &str) -> Vec<Value> {
    let response = app.op(Method::GET, "/admin/v1/audit").query(&[("agent", agent)]).send().await.unwrap();
    expect_json(response, StatusCode::OK).await["items"].as_array().unwrap().clone()
}

async fn console_changes_are_the_admin_apis(backend: Backend) {
    let app = spawn_app(backend).await;
    let mut browser = Browser::new(&app);
    browser.sign_in(OPERATOR_TOKEN).await;

    // An agent, with the admin API's validation.
    let bad = browser.change("/console/agents", "/console/agents", &[("id", "Bad Id"), ("name", "x")]).await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.body);
    let fields = [("id", "bot"), ("name", "Bot"), ("rps", "5"), ("burst", "10"), ("cache_ttl_ms", "1000")];
    let created = browser.change("/console/agents", "/console/agents", &fields).await;
    assert_eq!(created.location(), "/console/agents/bot");
    let agent = expect_json(app.op(Method::GET, "/admin/v1/agents/bot").send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(agent["rateLimit"], json!({"requestsPerSecond": 5, "burst": 10}));
    assert_eq!(agent["cacheTtlMs"], 1000);
    let edited = browser
        .change("/console/agents/bot", "/console/agents/bot", &[("name", "Renamed"), ("audit_retention_days", "7")])
        .await;
    assert_eq!(edited.status, StatusCode::SEE_OTHER, "{}", edited.body);
    let agent = expect_json(app.op(Method::GET, "/admin/v1/agents/bot").send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(agent["name"], "Renamed");
    assert_eq!(agent["auditRetentionDays"], 7);
    assert!(agent.get("rateLimit").is_none_or(Value::is_null), "a blank limit clears it: {agent}");

    // A key: the secret is shown once, never again; it works on the MCP endpoint.
    let created = browser
        .change(
            "/console/agents/bot",
            "/console/agents/bot/keys",
            &[("name", "ci"), ("scope", "mcp"), ("scope", "registry")],
        )
        .await;
    assert_eq!(created.status, StatusCode::OK, "{}", created.body);
    assert_eq!(created.headers["cache-control"], "no-store");
    let start = created.body.find("value=\"bak_").expect("the secret on the page") + 7;
    let secret = created.body[start..].split('"').next().unwrap().to_owned();
    let again = browser.get("/console/agents/bot").await;
    assert!(!again.body.contains(&secret), "the secret is shown once");
    assert!(again.body.contains(&secret[..12]), "its prefix is listed");
    let mcp = Mcp::new(&app, "bot", &secret);

    // A resource, a template and a prompt, served on the MCP endpoint.
    let put = browser
        .change(
            "/console/agents/bot/resource",
            "/console/agents/bot/resource",
            &[("uri", "test://docs/readme"), ("name", "readme"), ("mime_type", "text/plain"), ("text", "hello")],
        )
        .await;
    assert_eq!(put.status, StatusCode::SEE_OTHER, "{}", put.body);
    let read = mcp.legacy("resources/read", json!({"uri": "test://docs/readme"})).await;
    assert_eq!(read.result()["contents"][0]["text"], "hello");
    let template = browser
        .change(
            "/console/agents/bot/template",
            "/console/agents/bot/template",
            &[("uri_template", "test://items/{id}"), ("name", "item"), ("text", "item {{ id }}")],
        )
        .await;
    assert_eq!(template.status, StatusCode::SEE_OTHER, "{}", template.body);
    let read = mcp.legacy("resources/read", json!({"uri": "test://items/42"})).await;
    assert_eq!(read.result()["contents"][0]["text"], "item 42");
    let tried = browser
        .get("/console/agents/bot/template?uri_template=test%3A%2F%2Fitems%2F%7Bid%7D&try=test%3A%2F%2Fitems%2F7")
        .await;
    assert!(tried.body.contains("item 7"), "the try box shows the read: {}", tried.body);
    let messages = r#"[{"role": "user", "content": {"type": "text", "text": "Research {{ topic }}"}}]"#;
    let arguments = r#"[{"name": "topic", "required": true, "completions": ["rust", "ruby"]}]"#;
    let prompt = browser
        .change(
            "/console/agents/bot/prompt",
            "/console/agents/bot/prompt",
            &[("name", "research"), ("arguments", arguments), ("messages", messages)],
        )
        .await;
    assert_eq!(prompt.status, StatusCode::SEE_OTHER, "{}", prompt.body);
    let got = mcp.legacy("prompts/get", json!({"name": "research", "arguments": {"topic": "rust"}})).await;
    assert_eq!(got.result()["messages"][0]["content"]["text"], "Research rust");
    let preview = browser.get("/console/agents/bot/prompt?name=research&preview=1&arg.topic=ru").await;
    assert!(preview.body.contains("Research ru"), "the preview renders: {}", preview.body);
    assert!(preview.body.contains("rust") && preview.body.contains("ruby"), "completions: {}", preview.body);
    let missing = browser.get("/console/agents/bot/prompt?name=research&preview=1").await;
    assert!(missing.body.contains("missing required argument"), "as prompts/get answers: {}", missing.body);

    // An upload: the type guessed from the name, binary kept as a blob.
    let csrf = browser.get("/console/agents/bot/registry").await.csrf();
    let form = reqwest::multipart::Form::new()
        .text("csrf", csrf)
        .text("uri", "test://files/pixel.png")
        .part("file", reqwest::multipart::Part::bytes(crate::mcp_client::PNG.to_vec()).file_name("pixel.png"));
    let uploaded = browser.send(app.anon(Method::POST, "/console/agents/bot/resource/upload").multipart(form)).await;
    assert_eq!(uploaded.status, StatusCode::SEE_OTHER, "{}", uploaded.body);
    let read = mcp.legacy("resources/read", json!({"uri": "test://files/pixel.png"})).await;
    assert_eq!(read.result()["contents"][0]["mimeType"], "image/png");
    assert!(read.result()["contents"][0]["blob"].is_string());
    let tree = browser.get("/console/agents/bot/registry").await;
    assert!(tree.body.contains("<details") && tree.body.contains("pixel.png"), "{}", tree.body);

    // Deletes, through the same functions.
    let extra = [("uri_template", "test://extra/{x}"), ("name", "extra")];
    browser.change("/console/agents/bot/template", "/console/agents/bot/template", &extra).await;
    let gone = browser
        .change(
            "/console/agents/bot/template",
            "/console/agents/bot/template/delete",
            &[("uri_template", "test://extra/{x}")],
        )
        .await;
    assert_eq!(gone.status, StatusCode::SEE_OTHER, "{}", gone.body);
    let again = browser
        .change(
            "/console/agents/bot/template",
            "/console/agents/bot/template/delete",
            &[("uri_template", "test://extra/{x}")],
        )
        .await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);
    let extra = [("name", "extra"), ("messages", r#"[{"role": "user", "content": {"type": "text", "text": "x"}}]"#)];
    browser.change("/console/agents/bot/prompt", "/console/agents/bot/prompt", &extra).await;
    let gone =
        browser.change("/console/agents/bot/prompt", "/console/agents/bot/prompt/delete", &[("name", "extra")]).await;
    assert_eq!(gone.status, StatusCode::SEE_OTHER, "{}", gone.body);
    crate::mcp_client::after_write(backend, "the prompt deleted", || async {
        let listed = mcp.legacy("prompts/list", json!({})).await;
        let names: Vec<String> =
            listed.result()["prompts"].as_array().unwrap().iter().map(|p| str_of(p, "name").to_owned()).collect();
        (names == ["research"]).then_some(())
    })
    .await;

    // Every change is in the audit log, with the console as the channel.
    let records = audit_of(&app, "bot").await;
    let actors: Vec<&str> = records.iter().filter(|r| r["kind"] == "admin").map(|r| str_of(r, "actor")).collect();
    assert!(actors.len() >= 11, "{records:?}");
    assert!(actors.iter().all(|actor| *actor == "console:operator"), "{actors:?}");
    let audit = browser.get("/console/audit?agent=bot&method=resource.put").await;
    assert!(audit.body.contains("resource.put") && !audit.body.contains("agent.create"), "{}", audit.body);
    let verified = browser.get("/console/audit?agent=bot&verify=1").await;
    assert!(verified.body.contains("Every chain checked is intact"), "{}", verified.body);
    let export = browser.get("/console/audit/export?agent=bot").await;
    assert_eq!(export.status, StatusCode::OK);
    assert!(export.body.lines().all(|line| serde_json::from_str::<Value>(line).is_ok()));

    // Revoke, then delete with confirmation.
    let key_id = expect_json(app.op(Method::GET, "/admin/v1/agents/bot/keys").send().await.unwrap(), StatusCode::OK)
        .await["items"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let revoked =
        browser.change("/console/agents/bot", &format!("/console/agents/bot/keys/{key_id}/revoke"), &[]).await;
    assert_eq!(revoked.status, StatusCode::SEE_OTHER);
    crate::mcp_client::after_write(backend, "the revoked key refused", || async {
        (mcp.legacy("ping", json!({})).await.status == StatusCode::UNAUTHORIZED).then_some(())
    })
    .await;
    let unconfirmed = browser.change("/console/agents/bot", "/console/agents/bot/delete", &[("confirm", "no")]).await;
    assert_eq!(unconfirmed.status, StatusCode::UNPROCESSABLE_ENTITY);
    let deleted = browser.change("/console/agents/bot", "/console/agents/bot/delete", &[("confirm", "bot")]).await;
    assert_eq!(deleted.status, StatusCode::SEE_OTHER);
    assert_eq!(app.op(Method::GET, "/admin/v1/agents/bot").send().await.unwrap().status(), StatusCode::NOT_FOUND);
}

async fn console_lockout(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        config.rate_limits.failed_auth_attempts = 3;
        config.rate_limits.failed_auth_window_secs = 60;
    })
    .await;
    let mut browser = Browser::new(&app);
    for _ in 0..3 {
        assert_eq!(browser.sign_in("wrong").await.status, StatusCode::UNAUTHORIZED);
    }
    let locked = browser.sign_in(OPERATOR_TOKEN).await;
    assert_eq!(locked.status, StatusCode::TOO_MANY_REQUESTS, "failed sign-ins count toward the lockout");
    assert!(browser.cookie.is_none());
    let api = app.op(Method::GET, "/admin/v1/agents").send().await.unwrap();
    assert_eq!(api.status(), StatusCode::TOO_MANY_REQUESTS, "the same lockout as the admin API's");
}

/// The console goes where the admin API goes: the operator listener, and `listen` unless
/// `http.public_admin = false`.
async fn console_listeners(backend: Backend) {
    let app = spawn_app_with(backend, |config| {
        config.http.operator_listen = Some("127.0.0.1:0".parse().unwrap());
        config.http.public_admin = false;
    })
    .await;
    let operator = app.operator.clone().expect("the operator listener");
    let client = crate::helpers::http_client();
    let form = client.get(format!("{operator}/console/sign-in")).send().await.unwrap();
    assert_eq!(form.status(), StatusCode::OK);
    let signed_in = client
        .post(format!("{operator}/console/sign-in"))
        .form(&[("credential", OPERATOR_TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    assert!(!signed_in.headers()[SET_COOKIE].to_str().unwrap().contains("Secure"), "the operator listener is plain");
    let public = app.anon(Method::GET, "/console/sign-in").send().await.unwrap();
    assert_eq!(public.status(), StatusCode::NOT_FOUND, "not on listen without the admin API");
    let landing = app.anon(Method::GET, "/").send().await.unwrap().text().await.unwrap();
    assert!(!landing.contains("href=\"/console/\""), "{landing}");
}
