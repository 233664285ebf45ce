//! The fixed in-process workload whose instruction count guards the MCP hot path against regressions
//! (bench/README.md, "Instruction counts"). `bench/instructions/run` runs it under callgrind and compares
//! the instructions per request with `bench/instructions/baseline`.
//!
//! The real application ([`hivegate::app::Application::build`] on SQLite in a temporary directory) with
//! authentication, rate limits and audit on, mimalloc with the server's options (not its purge thread) and
//! logging installed as the server installs it, at the default level; its routes are driven in-process on a single-threaded runtime,
//! without a socket. After seeding through the admin API it runs nine sections: W1 (`resources/read` of a
//! 1 KiB text resource), W2 (`resources/list`, a full page of 100) and W3 (`prompts/get` of a prompt with 2
//! arguments), each as a plain legacy request, as a legacy request in an `Mcp-Session-Id` session and as a
//! modern (2026-07-28) request. Every section has a warm-up and then [`measured`] requests, whose instructions
//! callgrind counts (`--zero-before`/`--dump-after` of that function). Every answer is checked.
//!
//! Deterministic by construction: fixed data and request bodies, one thread for the runtime, the audit
//! writer flushing by batch size only (`audit.batch_size` divides every section's count, the flush interval is
//! an hour) and waited for at the end of a section, so each section counts the same audit writes; no pruning
//! by the clock during the run.
//!
//! ```sh
//! cargo run --example instructions -- --requests 200 --warmup 100
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Method, Request, StatusCode};
use hivegate::audit::AuditStats;
use serde_json::{Value, json};

const TOKEN: &str = "bench-operator-token-0123456789";
const AGENT: &str = "bench";
/// Audit records per batch: a divisor of every section's warm-up and measured counts.
const AUDIT_BATCH: usize = 100;
/// Resources stored: the first page of `resources/list` is full (100) and has a next cursor.
const RESOURCES: usize = 150;
const README: &str = "bench://docs/readme";
const PROMPT: &str = "greet";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Workload {
    Read,
    List,
    Prompt,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Era {
    /// Plain legacy, as curl sends it: no session, no protocol header.
    Legacy,
    /// Legacy as SDK clients send it: `Mcp-Session-Id` and `MCP-Protocol-Version: 2025-11-25`.
    Session,
    /// 2026-07-28: the `_meta` envelope and the mirrored headers.
    Modern,
}

/// One section: a workload in an era, its request built once.
struct Section {
    name: String,
    headers: Vec<(&'static str, String)>,
    body: axum::body::Bytes,
    /// A fragment every good answer of the section contains.
    expect: &'static str,
    /// The length of the section's answer, learnt in the warm-up.
    length: usize,
}

/// The allocator the server runs with (src/main.rs): the counts include what allocating costs there, and do
/// not move with the state of glibc's bins, which two runs that allocate a little differently leave apart.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Bench {
    routes: hivegate::http::Routes,
    audit: Arc<AuditStats>,
    key: String,
}

fn main() -> anyhow::Result<()> {
    let (mut requests, mut warmup) = (200usize, 100usize);
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair.get(1).and_then(|v| v.parse::<usize>().ok());
        match (pair[0].as_str(), value) {
            ("--requests", Some(n)) => requests = n,
            ("--warmup", Some(n)) => warmup = n,
            (other, _) => anyhow::bail!("unknown option or missing count: {other} (see bench/README.md)"),
        }
    }
    if requests == 0 || !requests.is_multiple_of(AUDIT_BATCH) || !warmup.is_multiple_of(AUDIT_BATCH) {
        anyhow::bail!("--requests and --warmup must be multiples of {AUDIT_BATCH} (the audit batch), requests > 0");
    }

    hivegate::allocator::configure();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let dir = TempDir::new()?;
    let (app, bench) = runtime.block_on(start(&dir))?;
    let session = runtime.block_on(bench.initialize())?;

    let eras = [Era::Legacy, Era::Session, Era::Modern];
    let workloads = [Workload::Read, Workload::List, Workload::Prompt];
    for workload in workloads {
        for era in eras {
            let mut section = Section::new(workload, era, &session);
            // The warm-up, plus what brings the audit records queued so far to a whole number of batches.
            let queued = bench.audit.queued.load(Ordering::Relaxed) as usize;
            let align = (AUDIT_BATCH - queued % AUDIT_BATCH) % AUDIT_BATCH;
            runtime.block_on(bench.run(&mut section, warmup + align, true))?;
            runtime.block_on(bench.settle_audit());
            measured(&runtime, &bench, &mut section, requests)?;
            println!("section {} requests {requests}", section.name);
        }
    }
    drop(bench);
    drop(app);
    drop(runtime);
    Ok(())
}

/// The counted part of one section: `requests` requests, then the audit writer's batches written.
#[inline(never)]
fn measured(
    runtime: &tokio::runtime::Runtime,
    bench: &Bench,
    section: &mut Section,
    requests: usize,
) -> anyhow::Result<()> {
    runtime.block_on(async {
        bench.run(section, requests, false).await?;
        bench.settle_audit().await;
        Ok(())
    })
}

async fn start(dir: &TempDir) -> anyhow::Result<(hivegate::app::Application, Bench)> {
    let mut config = hivegate::config::Config::default();
    config.listen = "127.0.0.1:0".parse()?;
    config.database_url = hivegate::config::DatabaseUrl::new(format!("sqlite://{}?mode=rwc", dir.file().display()));
    config.admin_token = Some(secrecy::SecretString::from(TOKEN));
    // Logging as the server sets it up, at the default level (`info`): its spans are part of every request.
    let _telemetry = hivegate::telemetry::init(&config.log, None)?;
    // Limits are applied to every request, high enough never to refuse one here.
    config.rate_limits.agent_requests_per_second = 1_000_000;
    config.rate_limits.agent_burst = 1_000_000;
    config.rate_limits.key_requests_per_second = 1_000_000;
    config.rate_limits.key_burst = 1_000_000;
    config.rate_limits.admin_requests_per_second = 1_000_000;
    config.rate_limits.admin_burst = 1_000_000;
    config.audit.mcp_requests = true;
    config.audit.batch_size = AUDIT_BATCH;
    config.audit.flush_interval_ms = 3_600_000;
    // Background work that runs by the clock would land in whichever section is running: pruning (events,
    // sessions, audit) waits for an hour, longer than any run.
    config.events.prune_interval_ms = 3_600_000;
    let app = hivegate::app::Application::build(config).await?;
    let state = app.state();
    let mut bench =
        Bench { routes: hivegate::http::routes(state.clone()), audit: state.audit.stats().clone(), key: String::new() };
    bench.seed().await?;
    Ok((app, bench))
}

impl Bench {
    async fn send(
        &self,
        request: Request<Body>,
    ) -> anyhow::Result<(StatusCode, axum::http::HeaderMap, axum::body::Bytes)> {
        let mut request = request;
        request.extensions_mut().insert(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
        let response = self.routes.serve(request).await;
        let (parts, body) = response.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX).await?;
        Ok((parts.status, parts.headers, body))
    }

    async fn admin(&self, method: Method, path: &str, body: Value) -> anyhow::Result<Value> {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))?;
        let (status, _, body) = self.send(request).await?;
        if !status.is_success() {
            anyhow::bail!("{path}: {status} {}", String::from_utf8_lossy(&body));
        }
        Ok(serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    /// The agent, its `mcp` key, the resources and the prompt, through the admin API.
    async fn seed(&mut self) -> anyhow::Result<()> {
        self.admin(Method::POST, "/admin/v1/agents", json!({"id": AGENT, "name": "Bench"})).await?;
        let key = self
            .admin(Method::POST, &format!("/admin/v1/agents/{AGENT}/keys"), json!({"name": "bench", "scopes": ["mcp"]}))
            .await?;
        self.key = key["key"].as_str().ok_or_else(|| anyhow::anyhow!("no key in {key}"))?.to_owned();
        let resources = format!("/admin/v1/agents/{AGENT}/resources");
        // 1 KiB of text: a line of 64 bytes, 16 times.
        let text = "The quick brown fox jumps over the lazy dog; pack my box now.\n\n\n".repeat(16);
        assert_eq!(text.len(), 1024);
        self.admin(
            Method::PUT,
            &resources,
            json!({"uri": README, "name": "readme", "mimeType": "text/plain", "text": text}),
        )
        .await?;
        for n in 1..RESOURCES {
            let uri = format!("bench://docs/page-{n:04}");
            let body = json!({"uri": uri, "name": format!("page {n}"), "description": "A page of the bench corpus.",
                "mimeType": "text/plain", "text": format!("Page {n}.")});
            self.admin(Method::PUT, &resources, body).await?;
        }
        let prompt = json!({"description": "Greets someone about something.",
            "arguments": [{"name": "name", "required": true}, {"name": "topic", "required": true}],
            "messages": [{"role": "user", "content": {"type": "text",
                "text": "Hello {{ name }}, tell me about {{ topic }}."}}]});
        self.admin(Method::PUT, &format!("/admin/v1/agents/{AGENT}/prompts/{PROMPT}"), prompt).await?;
        Ok(())
    }

    /// A legacy session at 2025-11-25; its `Mcp-Session-Id`.
    async fn initialize(&self) -> anyhow::Result<String> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
            "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}});
        let request = Request::post(format!("/{AGENT}/mcp"))
            .header("x-agent-api-key", &self.key)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Body::from(body.to_string()))?;
        let (status, headers, body) = self.send(request).await?;
        let session = headers.get("mcp-session-id").and_then(|v| v.to_str().ok());
        match (status, session) {
            (StatusCode::OK, Some(session)) => Ok(session.to_owned()),
            _ => anyhow::bail!("initialize: {status} {}", String::from_utf8_lossy(&body)),
        }
    }

    /// `count` requests of the section, one after the other; each answer must be a 200 with a result.
    /// `check_all` also parses every answer (the warm-up) and learns the answer's length; measured runs
    /// check the status and that length (the data is fixed, so every good answer has the same length).
    async fn run(&self, section: &mut Section, count: usize, check_all: bool) -> anyhow::Result<()> {
        for _ in 0..count {
            let mut request = Request::post(format!("/{AGENT}/mcp")).header("x-agent-api-key", &self.key);
            for (name, value) in &section.headers {
                request = request.header(*name, value);
            }
            let (status, _, body) = self.send(request.body(Body::from(section.body.clone()))?).await?;
            if check_all {
                let text = String::from_utf8_lossy(&body);
                let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                if status != StatusCode::OK || answer.get("result").is_none() || !text.contains(section.expect) {
                    anyhow::bail!("{}: {status} {text}", section.name);
                }
                section.length = body.len();
            } else if status != StatusCode::OK || body.len() != section.length {
                anyhow::bail!("{}: {status} {}", section.name, String::from_utf8_lossy(&body));
            }
        }
        Ok(())
    }

    /// Waits until the audit writer has stored every record queued so far. It looks rarely, so that the
    /// count hardly depends on how long the write takes on a busy machine.
    async fn settle_audit(&self) {
        while self.audit.queued.load(Ordering::Relaxed) > self.audit.written.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Section {
    fn new(workload: Workload, era: Era, session: &str) -> Self {
        let (method, mut params, name, expect) = match workload {
            Workload::Read => ("resources/read", json!({"uri": README}), README, "The quick brown fox"),
            Workload::List => ("resources/list", json!({}), "", "nextCursor"),
            Workload::Prompt => (
                "prompts/get",
                json!({"name": PROMPT, "arguments": {"name": "Ada", "topic": "engines"}}),
                PROMPT,
                "Hello Ada, tell me about engines.",
            ),
        };
        let mut headers = vec![("content-type", "application/json".to_owned())];
        match era {
            Era::Legacy => {}
            Era::Session => {
                headers.push(("accept", "application/json, text/event-stream".to_owned()));
                headers.push(("mcp-protocol-version", "2025-11-25".to_owned()));
                headers.push(("mcp-session-id", session.to_owned()));
            }
            Era::Modern => {
                params["_meta"] = json!({
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1.0.0"},
                    "io.modelcontextprotocol/clientCapabilities": {}
                });
                headers.push(("accept", "application/json, text/event-stream".to_owned()));
                headers.push(("mcp-protocol-version", "2026-07-28".to_owned()));
                headers.push(("mcp-method", method.to_owned()));
                if !name.is_empty() {
                    headers.push(("mcp-name", name.to_owned()));
                }
            }
        }
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
        let workload = match workload {
            Workload::Read => "w1-read",
            Workload::List => "w2-list",
            Workload::Prompt => "w3-prompt",
        };
        let era = match era {
            Era::Legacy => "legacy",
            Era::Session => "session",
            Era::Modern => "modern",
        };
        Self { name: format!("{workload}/{era}"), headers, body: body.to_string().into(), expect, length: 0 }
    }
}

/// A private directory for the SQLite database, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> anyhow::Result<Self> {
        let path = std::env::temp_dir().join(format!("hivegate-instructions-{}", std::process::id()));
        std::fs::create_dir_all(&path)?;
        Ok(Self(path))
    }

    fn file(&self) -> PathBuf {
        self.0.join("bench.db")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
