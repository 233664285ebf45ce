//! Notification fan-out benchmark: latency from an admin write to its delivery on N open streams, and the
//! server's memory per idle stream. Results and how to read them: bench/README.md.
//!
//! ```sh
//! fanout --streams 100,1000,5000,10000 --era both --changes 20 [--bin PATH] [--database-url URL]
//! fanout --target ceiling --ceiling-bin PATH --streams 5000
//! ```
//!
//! For every era and stream count it starts a fresh `hivegate serve` (the binary of `--bin`, default
//! `target/release/hivegate`) on an empty SQLite database (or `--database-url`), creates an agent and a key,
//! opens the streams (legacy: `initialize` + `GET` per stream; modern: one `subscriptions/listen` each),
//! measures the server's resident memory before and after, then makes `--changes` changes one after the
//! other (each a new resource: `notifications/resources/list_changed` to every stream) and records, for every
//! stream, the time from the start of the admin `PUT` to the arrival of the notification.
//!
//! `--target ceiling` measures the ceiling server's SSE equivalent instead (bench/src/bin/ceiling.rs): the
//! same streams as plain `GET /sse`, each change one `POST /notify` that one broadcast channel hands to
//! every stream, so the ratio of the two is hivegate's cost over the least an axum server can do.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc};

const TOKEN: &str = "bench-operator-token-0123456789";

struct Options {
    /// `hivegate` or `ceiling`.
    target: &'static str,
    ceiling_bin: String,
    counts: Vec<usize>,
    eras: Vec<&'static str>,
    changes: usize,
    bin: String,
    database_url: Option<String>,
}

fn options() -> Options {
    let mut options = Options {
        target: "hivegate",
        ceiling_bin: "bench/target/release/ceiling".to_owned(),
        counts: vec![100, 1000, 5000, 10000],
        eras: vec!["legacy", "modern"],
        changes: 20,
        bin: "target/release/hivegate".to_owned(),
        database_url: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair.get(1).cloned().unwrap_or_default();
        match pair[0].as_str() {
            "--streams" => options.counts = value.split(',').filter_map(|n| n.trim().parse().ok()).collect(),
            "--era" if value == "both" => {}
            "--era" if value == "legacy" => options.eras = vec!["legacy"],
            "--era" if value == "modern" => options.eras = vec!["modern"],
            "--changes" => options.changes = value.parse().unwrap_or(20),
            "--bin" => options.bin = value,
            "--target" if value == "hivegate" => options.target = "hivegate",
            "--target" if value == "ceiling" => options.target = "ceiling",
            "--ceiling-bin" => options.ceiling_bin = value,
            "--database-url" => options.database_url = Some(value),
            other => {
                eprintln!("fanout: unknown option {other} (see bench/README.md)");
                std::process::exit(2);
            }
        }
    }
    options
}

/// The server under test; killed on drop.
struct Server {
    child: Child,
    base: String,
    _dir: tempdir::Dir,
}

mod tempdir {
    /// A scratch directory, removed on drop.
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Server {
    async fn start(options: &Options) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = std::env::temp_dir().join(format!("hivegate-bench-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let url =
            options.database_url.clone().unwrap_or_else(|| format!("sqlite://{}/bench.db?mode=rwc", dir.display()));
        let child = if options.target == "ceiling" {
            let bin = std::fs::canonicalize(&options.ceiling_bin)
                .unwrap_or_else(|e| panic!("no {} ({e}): bench/run builds it", options.ceiling_bin));
            Command::new(bin)
                .args(["--listen", &format!("127.0.0.1:{port}")])
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", options.ceiling_bin))
        } else {
            Self::hivegate(options, port, &dir, url)
        };
        let server = Self { child, base: format!("http://127.0.0.1:{port}"), _dir: tempdir::Dir(dir) };
        let client = reqwest::Client::new();
        for _ in 0..300 {
            if client.get(format!("{}/readyz", server.base)).send().await.is_ok_and(|r| r.status().is_success()) {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{} did not become ready", options.target);
    }

    fn hivegate(options: &Options, port: u16, dir: &std::path::Path, url: String) -> Child {
        let bin = std::fs::canonicalize(&options.bin)
            .unwrap_or_else(|e| panic!("no {} ({e}): cargo build --release first", options.bin));
        Command::new(bin)
            .arg("serve")
            .current_dir(dir)
            .env("HIVEGATE_LISTEN", format!("127.0.0.1:{port}"))
            .env("HIVEGATE_DATABASE_URL", url)
            .env("HIVEGATE_ADMIN_TOKEN", TOKEN)
            .env("HIVEGATE_LOG__LEVEL", "warn")
            .env("HIVEGATE_STREAMS__MAX_PER_KEY", "100000")
            .env("HIVEGATE_STREAMS__MAX_PER_AGENT", "100000")
            // Every legacy stream is a session of the one key (1,000 by default).
            .env("HIVEGATE_SESSIONS__MAX_PER_KEY", "100000")
            // Opening thousands of streams with one key is the set-up, not the load being measured.
            .env("HIVEGATE_RATE_LIMITS__KEY_REQUESTS_PER_SECOND", "0")
            .env("HIVEGATE_RATE_LIMITS__AGENT_REQUESTS_PER_SECOND", "0")
            .env("HIVEGATE_DATABASE__MAX_CONNECTIONS", "32")
            // Every stream comes from 127.0.0.1: the per-address connection cap would refuse all but 512.
            .env("HIVEGATE_HTTP__MAX_CONNECTIONS_PER_ADDRESS", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e} (cargo build --release first)", options.bin))
    }

    /// Resident memory of the server process, in KiB.
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Admin calls with the operator token.
async fn admin(http: &reqwest::Client, base: &str, method: reqwest::Method, path: &str, body: Value) -> Value {
    let response =
        http.request(method, format!("{base}/admin/v1{path}")).bearer_auth(TOKEN).json(&body).send().await.unwrap();
    assert!(response.status().is_success(), "{path}: {}", response.status());
    response.json().await.unwrap_or(Value::Null)
}

/// What a stream reports.
enum Arrival {
    /// The stream is established (its first event came).
    Opened,
    /// A `list_changed` arrived at this instant.
    Notified(Instant),
}

/// Opens one stream (holding `permit` until it is established) and reports its arrivals.
async fn stream(
    http: reqwest::Client,
    base: String,
    key: String,
    era: &'static str,
    index: usize,
    permit: tokio::sync::OwnedSemaphorePermit,
    arrivals: mpsc::UnboundedSender<Arrival>,
) {
    let endpoint = format!("{base}/bench/mcp");
    let request = if era == "sse" {
        http.get(format!("{base}/sse")).header("accept", "text/event-stream")
    } else if era == "legacy" {
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
            "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}});
        let response = http.post(&endpoint).header("x-agent-api-key", &key).json(&init).send().await.unwrap();
        let session = response.headers()["mcp-session-id"].to_str().unwrap().to_owned();
        http.get(&endpoint)
            .header("x-agent-api-key", &key)
            .header("mcp-session-id", session)
            .header("accept", "text/event-stream")
    } else {
        let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}});
        let body = json!({"jsonrpc": "2.0", "id": index, "method": "subscriptions/listen",
            "params": {"_meta": meta, "notifications": {"resourcesListChanged": true}}});
        http.post(&endpoint)
            .header("x-agent-api-key", &key)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "subscriptions/listen")
            .json(&body)
    };
    let response = request.send().await.unwrap();
    assert!(response.status().is_success(), "stream {index}: {}", response.status());
    let mut body = response.bytes_stream();
    let mut permit = Some(permit);
    while let Some(Ok(chunk)) = body.next().await {
        let now = Instant::now();
        if permit.take().is_some() {
            let _ = arrivals.send(Arrival::Opened);
        }
        let seen = chunk.windows(12).filter(|w| *w == b"list_changed").count();
        for _ in 0..seen {
            let _ = arrivals.send(Arrival::Notified(now));
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

async fn run(options: &Options, era: &'static str, count: usize) {
    let server = Server::start(options).await;
    let http = reqwest::Client::builder().pool_max_idle_per_host(usize::MAX).build().unwrap();
    let ceiling = options.target == "ceiling";
    let key = if ceiling {
        String::new()
    } else {
        admin(&http, &server.base, reqwest::Method::POST, "/agents", json!({"id": "bench", "name": "Bench"})).await;
        let key =
            admin(&http, &server.base, reqwest::Method::POST, "/agents/bench/keys", json!({"scopes": ["mcp"]})).await;
        key["key"].as_str().unwrap().to_owned()
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before = server.rss_kib();

    let (tx, mut rx) = mpsc::unbounded_channel();
    let opening = Arc::new(Semaphore::new(64));
    let started = Instant::now();
    for index in 0..count {
        let permit = opening.clone().acquire_owned().await.unwrap();
        tokio::spawn(stream(http.clone(), server.base.clone(), key.clone(), era, index, permit, tx.clone()));
    }
    for _ in 0..count {
        assert!(matches!(rx.recv().await, Some(Arrival::Opened)));
    }
    let opened_in = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_after = server.rss_kib();

    let mut latencies = Vec::with_capacity(count * options.changes);
    for change in 0..options.changes {
        let resource = json!({"uri": format!("bench://r/{change}"), "name": "r", "text": "x"});
        let sent = Instant::now();
        if ceiling {
            let response = http.post(format!("{}/notify", server.base)).send().await.unwrap();
            assert!(response.status().is_success(), "notify: {}", response.status());
        } else {
            admin(&http, &server.base, reqwest::Method::PUT, "/agents/bench/resources", resource).await;
        }
        for _ in 0..count {
            match tokio::time::timeout(Duration::from_secs(60), rx.recv()).await {
                Ok(Some(Arrival::Notified(at))) => latencies.push(at.duration_since(sent)),
                _ => panic!("change {change}: not every stream was notified within 60 s"),
            }
        }
    }
    latencies.sort();
    let per_stream = (rss_after.saturating_sub(rss_before)) as f64 / count as f64;
    println!(
        "| {} | {era} | {count} | {:.1} | {:.1} | {:.1} | {per_stream:.1} | {:.1} |",
        options.target,
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        ms(*latencies.last().unwrap()),
        opened_in.as_secs_f64()
    );
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let options = options();
    println!("| server | era | streams | p50 ms | p99 ms | max ms | KiB per idle stream | opened in s |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    let eras = if options.target == "ceiling" { vec!["sse"] } else { options.eras.clone() };
    for era in eras {
        for count in options.counts.clone() {
            run(&options, era, count).await;
        }
    }
}
