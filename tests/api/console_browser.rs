//! The console in a real browser: headless Chromium driven through chromedriver (WebDriver). Signs in with
//! each credential kind; creates an agent, a key, a resource, a template and a prompt through the pages and
//! reads them on the MCP endpoint; previews a template and a prompt; revokes a key and watches its stream
//! leave the live page; filters the audit log. Every page is saved as a screenshot under
//! `target/console-screenshots/` and checked with axe-core (`tests/console`, installed by
//! `scripts/browser-deps.sh`), which must find no serious or critical violation.
//!
//! Without `chromium`, `chromedriver` or axe-core the test says so and passes, unless
//! `HIVEGATE_BROWSER_TESTS=require` (CI sets it), when it fails.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{Api, Backend, OPERATOR_TOKEN, TestApp, expect_json, free_port, spawn_app};
use crate::live_client::Legacy;
use crate::mcp_client::Mcp;

both!(console_in_a_browser);

/// What the run needs from the machine: the browser, its driver, axe-core.
struct Tools {
    chromium: PathBuf,
    chromedriver: PathBuf,
    axe: String,
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|dir| PathBuf::from(dir).join(name)).find(|path| path.is_file())
}

/// The tools, or `None` (after saying why) when the run may skip.
fn tools() -> Option<Tools> {
    let required = std::env::var("HIVEGATE_BROWSER_TESTS").is_ok_and(|value| value == "require");
    let axe_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/console/node_modules/axe-core/axe.min.js");
    let chromium = which("chromium").or_else(|| which("chromium-browser"));
    let found = (chromium, which("chromedriver"), std::fs::read_to_string(&axe_path).ok());
    match found {
        (Some(chromium), Some(chromedriver), Some(axe)) => Some(Tools { chromium, chromedriver, axe }),
        (chromium, driver, axe) => {
            let missing: Vec<&str> = [
                chromium.is_none().then_some("chromium"),
                driver.is_none().then_some("chromedriver"),
                axe.is_none().then_some("axe-core (tests/console)"),
            ]
            .into_iter()
            .flatten()
            .collect();
            let message =
                format!("console browser test skipped: {} missing; run scripts/browser-deps.sh", missing.join(", "));
            assert!(!required, "{message} (HIVEGATE_BROWSER_TESTS=require)");
            eprintln!("{message}");
            None
        }
    }
}

/// chromedriver on a free port, killed when dropped.
struct Driver(Child, u16);

impl Driver {
    async fn start(path: &PathBuf) -> Self {
        let port = free_port();
        let child = Command::new(path)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let driver = Driver(child, port);
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return driver;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("chromedriver did not listen on port {port}");
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The browser session, the screenshots' folder and the accessibility counts.
struct Run<'a> {
    client: Client,
    app: &'a TestApp,
    axe: &'a str,
    shots: PathBuf,
    backend: &'static str,
    /// Violations by impact, over every page.
    counts: BTreeMap<String, usize>,
    pages: usize,
}

impl Run<'_> {
    async fn goto(&self, path: &str) {
        self.client.goto(&format!("{}{path}", self.app.address)).await.expect("the page loads");
    }

    async fn css(&self, selector: &str) -> fantoccini::elements::Element {
        let found = self.client.wait().at_most(Duration::from_secs(10)).for_element(Locator::Css(selector)).await;
        match found {
            Ok(element) => element,
            Err(error) => {
                let url = self.client.current_url().await.map(|url| url.to_string()).unwrap_or_default();
                let source = self.client.source().await.unwrap_or_default();
                panic!("no {selector} on {url}: {error}\n{source}")
            }
        }
    }

    async fn fill(&self, selector: &str, text: &str) {
        let field = self.css(selector).await;
        field.clear().await.expect("the field clears");
        field.send_keys(text).await.expect("the field takes text");
    }

    async fn click(&self, selector: &str) {
        self.css(selector).await.click().await.expect("the element is clickable");
    }

    async fn source(&self) -> String {
        self.client.source().await.expect("the page source")
    }

    /// Waits (up to ten seconds) until the page's source contains `needle`: a click's navigation or the
    /// live page's refresh has happened.
    async fn wait_for(&self, needle: &str) {
        for _ in 0..100 {
            if self.source().await.contains(needle) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{needle:?} never appeared in {}", self.source().await);
    }

    /// Waits until the page's address contains `needle`.
    async fn wait_for_url(&self, needle: &str) {
        for _ in 0..100 {
            if self.client.current_url().await.is_ok_and(|url| url.as_str().contains(needle)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the address never contained {needle:?}");
    }

    /// Saves a screenshot of the page and runs axe-core in it; serious and critical violations fail the run.
    async fn check(&mut self, name: &str) {
        let png = self.client.screenshot().await.expect("a screenshot");
        let path = self.shots.join(format!("{}-{name}.png", self.backend));
        std::fs::write(&path, png).expect("the screenshot is saved");
        self.client.execute(&format!("{}\nreturn true;", self.axe), vec![]).await.expect("axe-core loads");
        let script = "const done = arguments[arguments.length - 1];\
            axe.run(document, {resultTypes: ['violations']})\
              .then(r => done({passes: r.passes.length, violations: r.violations.map(v =>\
                ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.length}))}))\
              .catch(e => done({error: String(e)}));";
        let result = self.client.execute_async(script, vec![]).await.expect("axe-core runs");
        assert!(result.get("error").is_none(), "axe-core failed on {name}: {result}");
        assert!(result["passes"].as_u64().is_some_and(|passes| passes > 0), "axe-core checked nothing: {result}");
        let violations = result["violations"].as_array().cloned().expect("axe-core's violations");
        self.pages += 1;
        for violation in &violations {
            let impact = violation["impact"].as_str().unwrap_or("unknown").to_owned();
            *self.counts.entry(impact.clone()).or_default() += 1;
            eprintln!(
                "axe on {name}: {impact} {} ({} nodes): {}",
                violation["id"], violation["nodes"], violation["help"]
            );
            assert!(
                impact != "serious" && impact != "critical",
                "axe-core: {impact} violation on the {name} page: {violation}"
            );
        }
    }
}

async fn console_in_a_browser(backend: Backend) {
    let Some(tools) = tools() else { return };
    // The WebDriver client's TLS stack needs the process's provider chosen: ring, as the server's.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let app = spawn_app(backend).await;
    let driver = Driver::start(&tools.chromedriver).await;
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".to_owned(),
        json!({
            "binary": tools.chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,1000", "--lang=en-US"],
        }),
    );
    let client = ClientBuilder::rustls()
        .expect("a WebDriver client")
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{}", driver.1))
        .await
        .expect("chromedriver starts a session");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"), PathBuf::from);
    let shots = target.join("console-screenshots");
    std::fs::create_dir_all(&shots).expect("the screenshots' folder");
    let backend_name = match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    let mut run =
        Run { client, app: &app, axe: &tools.axe, shots, backend: backend_name, counts: BTreeMap::new(), pages: 0 };
    walk(&mut run).await;
    let counts: Vec<String> = ["critical", "serious", "moderate", "minor"]
        .iter()
        .map(|impact| format!("{impact} {}", run.counts.get(*impact).copied().unwrap_or(0)))
        .collect();
    eprintln!("axe-core on {} console pages ({backend_name}): {}", run.pages, counts.join(", "));
    eprintln!("screenshots in {}", run.shots.display());
    let _ = run.client.close().await;
    drop(driver);
}

/// The walk through every page.
async fn walk(run: &mut Run<'_>) {
    // Sign in as the operator.
    run.goto("/console/").await;
    run.css("#credential").await;
    run.check("sign-in").await;
    run.fill("#credential", "not the token").await;
    run.click("main form button[type=submit]").await;
    run.wait_for("unknown, revoked or expired").await;
    run.fill("#credential", OPERATOR_TOKEN).await;
    run.click("main form button[type=submit]").await;
    run.css("dl.figures").await;
    run.check("overview").await;

    // An agent, through the agents page.
    run.click("nav a[href='/console/agents']").await;
    run.fill("#new-id", "browser-bot").await;
    run.fill("#new-name", "Browser <b>bot</b>").await;
    run.fill("#new-description", "made in a browser").await;
    run.click("form[method=post][action='/console/agents'] button[type=submit]").await;
    run.css("form[action='/console/agents/browser-bot/keys']").await;
    let agent =
        expect_json(run.app.op(Method::GET, "/admin/v1/agents/browser-bot").send().await.unwrap(), StatusCode::OK)
            .await;
    assert_eq!(agent["name"], "Browser <b>bot</b>");
    run.goto("/console/agents?q=browser").await;
    assert!(run.source().await.contains("Browser &lt;b&gt;bot&lt;/b&gt;"), "the search finds it, escaped");
    run.check("agents").await;

    // A key with both scopes: its secret shown once.
    run.goto("/console/agents/browser-bot").await;
    run.fill("#key-name", "browser").await;
    run.click("input[name=scope][value=registry]").await;
    run.click("form[action='/console/agents/browser-bot/keys'] button[type=submit]").await;
    let secret = run.css("#secret").await.prop("value").await.expect("the value").expect("a secret");
    assert!(secret.starts_with("bak_"), "{secret}");
    run.check("key-created").await;
    run.click("button[data-copy=secret]").await;
    run.goto("/console/agents/browser-bot").await;
    let page = run.source().await;
    assert!(!page.contains(&secret), "the secret is never shown again");
    assert!(page.contains(&secret[..12]), "its prefix is listed");
    run.check("agent").await;
    let mcp = Mcp::new(run.app, "browser-bot", &secret);

    // A resource, through the registry.
    run.goto("/console/agents/browser-bot/registry").await;
    run.click("a[href='/console/agents/browser-bot/resource']").await;
    run.fill("#uri", "test://docs/guide/intro").await;
    run.fill("#name", "intro").await;
    run.fill("#text", "Welcome from the browser").await;
    run.click("form[action='/console/agents/browser-bot/resource'] button[type=submit]").await;
    run.css("a[href*='resource/download']").await;
    run.check("resource").await;
    let read = mcp.legacy("resources/read", json!({"uri": "test://docs/guide/intro"})).await;
    assert_eq!(read.result()["contents"][0]["text"], "Welcome from the browser");
    run.goto("/console/agents/browser-bot/registry").await;
    assert!(run.source().await.contains("<details"), "directories expand");
    run.check("registry").await;

    // A template, and its "try a URI" box.
    run.click("a[href='/console/agents/browser-bot/template']").await;
    run.fill("#uri-template", "test://items/{id}").await;
    run.fill("#name", "item").await;
    run.fill("#text", "Item number {{ id }}").await;
    run.click("form[action='/console/agents/browser-bot/template'] button[type=submit]").await;
    run.fill("#try", "test://items/42").await;
    run.click("form[method=get] button[type=submit]").await;
    let tried = run.css("#read-result").await.text().await.expect("the read");
    assert!(tried.contains("Item number 42"), "{tried}");
    run.check("template").await;
    let read = mcp.legacy("resources/read", json!({"uri": "test://items/7"})).await;
    assert_eq!(read.result()["contents"][0]["text"], "Item number 7");

    // A prompt, its preview and its completions.
    run.goto("/console/agents/browser-bot/prompt").await;
    run.fill("#name", "greet").await;
    run.fill("#arguments", r#"[{"name": "who", "required": true, "completions": ["world", "wombat"]}]"#).await;
    run.fill("#messages", r#"[{"role": "user", "content": {"type": "text", "text": "Hello {{ who }}!"}}]"#).await;
    run.click("form[action='/console/agents/browser-bot/prompt'] button[type=submit]").await;
    run.fill("#arg-1", "wo").await;
    run.click("form[method=get] button[type=submit]").await;
    let rendered = run.css("#prompt-result").await.text().await.expect("the rendered prompt");
    assert!(rendered.contains("Hello wo!"), "{rendered}");
    let page = run.source().await;
    assert!(page.contains("world") && page.contains("wombat"), "the completions are shown");
    run.check("prompt").await;
    let got = mcp.legacy("prompts/get", json!({"name": "greet", "arguments": {"who": "you"}})).await;
    assert_eq!(got.result()["messages"][0]["content"]["text"], "Hello you!");

    // Live: a stream of this key, then its revocation in another tab closes it on the page.
    let session = Legacy::initialize(run.app, "browser-bot", &secret, "2025-11-25").await;
    session.subscribe("test://docs/guide/intro").await;
    let mut stream = session.open(None).await;
    run.goto("/console/agents/browser-bot/live").await;
    run.css("tr.stream").await;
    assert!(run.source().await.contains("test://docs/guide/intro"), "the subscription is listed");
    run.check("live").await;
    let live = run.client.window().await.expect("this tab");
    let other = run.client.new_window(true).await.expect("a new tab");
    run.client.switch_to_window(other.handle).await.expect("to the new tab");
    run.goto("/console/agents/browser-bot").await;
    run.click("form[action$='/revoke'] button[type=submit]").await;
    run.client.accept_alert().await.expect("the confirmation");
    run.wait_for("revoked 20").await;
    run.client.close_window().await.expect("the tab closes");
    run.client.switch_to_window(live).await.expect("back to the live page");
    // The page is not reloaded: its script's refresh shows the stream gone.
    run.wait_for("No open streams").await;
    stream.expect_end().await;

    // The audit log, filtered.
    run.goto("/console/audit").await;
    run.fill("#agent", "browser-bot").await;
    run.fill("#method", "resource.put").await;
    run.click("form.filters button[type=submit]:not([name])").await;
    run.wait_for_url("method=resource.put").await;
    run.css("tr.record").await;
    let rows = run.client.find_all(Locator::Css("tr.record")).await.expect("the records");
    assert!(!rows.is_empty());
    for row in rows {
        let text = row.text().await.expect("a row");
        assert!(text.contains("resource.put") && text.contains("console:operator"), "{text}");
    }
    run.check("audit").await;

    // Sign out, and in again with the agent's registry key: its registry only.
    run.click("form.sign-out button").await;
    run.css("#credential").await;
    let key = expect_json(
        run.app
            .op(Method::POST, "/admin/v1/agents/browser-bot/keys")
            .json(&json!({"scopes": ["registry"]}))
            .send()
            .await
            .unwrap(),
        StatusCode::CREATED,
    )
    .await;
    run.fill("#credential", key["key"].as_str().unwrap()).await;
    run.click("main form button[type=submit]").await;
    run.wait_for_url("/console/agents/browser-bot/registry").await;
    run.css("ul.tree").await;
    let nav = run.css("header nav").await.text().await.unwrap();
    assert!(!nav.contains("Agents") && !nav.contains("Audit"), "{nav}");
    run.check("owner-registry").await;
    run.goto("/console/audit").await;
    run.wait_for("this page is the operator").await;
}
