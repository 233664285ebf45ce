//! Seeding hivegate through its admin API, and the cold-read measurement.
//!
//! ```sh
//! seed base   --base URL --token T --agent ID [--count C] [--extra N]  # prints the agent's new mcp key
//! seed agents --base URL --token T --count N --per-agent M --out FILE
//! seed warm   --base URL --agents FILE                           # one read and one list per agent of FILE
//! seed cold   --base URL --agent ID --key K --extra N --reads R  # prints cold and warm read latencies
//! ```
//!
//! `base` creates the agent, a key with scope `mcp`, the 100 base resources (1 KiB of text each; `C` of
//! them with `--count`, always including the one W1 reads), the prompt, and `N` more small resources (`bench://bulk/…`, in batches of 1,000). `agents` creates `N`
//! agents (`a00000`, …) with `M` of the base resources each (always the one W1 reads, which alone has 1 KiB
//! of text, the others a line) and a key each, and writes `agent key` lines to FILE. `cold` reads `R` distinct bulk
//! resources one after the other (each one's first read: a cache miss), then the same ones again (hits),
//! and prints both latency distributions.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use hivegate_bench::{PROMPT, READ_URI, RESOURCES, prompt, resource, uri};
use serde_json::{Value, json};

/// Items per batch request (the admin API's maximum).
const BATCH: usize = 1000;
/// Admin requests in flight at once while seeding different agents. One agent's batches are sent one after
/// the other: they serialise on the agent's event sequence anyway, and queued ones would time out.
const PARALLEL: usize = 8;

type Failure = Box<dyn std::error::Error + Send + Sync>;

struct Admin {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Admin {
    async fn send(&self, method: reqwest::Method, path: &str, body: &Value) -> Result<Value, Failure> {
        let url = format!("{}/admin/v1{path}", self.base);
        for attempt in 0..5 {
            let response = self.http.request(method.clone(), &url).bearer_auth(&self.token).json(body).send().await?;
            let status = response.status();
            if status.is_success() {
                return Ok(response.json().await.unwrap_or(Value::Null));
            }
            let text = response.text().await.unwrap_or_default();
            if status.as_u16() == 503 && attempt < 4 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            return Err(format!("{method} {path}: {status}: {text}").into());
        }
        Err(format!("{method} {path}: still unavailable after retries").into())
    }

    async fn agent_with_key(&self, id: &str) -> Result<String, Failure> {
        self.send(reqwest::Method::POST, "/agents", &json!({"id": id, "name": format!("Benchmark agent {id}")}))
            .await?;
        let key = self.send(reqwest::Method::POST, &format!("/agents/{id}/keys"), &json!({"scopes": ["mcp"]})).await?;
        key["key"].as_str().map(str::to_owned).ok_or_else(|| "the key answer has no key".into())
    }

    async fn batch(&self, agent: &str, upsert: Vec<Value>) -> Result<(), Failure> {
        self.send(reqwest::Method::POST, &format!("/agents/{agent}/resources/batch"), &json!({"upsert": upsert}))
            .await
            .map(drop)
    }
}

fn bulk_uri(index: usize) -> String {
    format!("bench://bulk/{index:07}")
}

fn bulk(index: usize) -> Value {
    json!({"uri": bulk_uri(index), "name": format!("bulk-{index:07}"), "mimeType": "text/plain",
        "text": format!("Bulk resource {index:07} of the benchmark.")})
}

async fn base(admin: &Admin, agent: &str, count: usize, extra: usize) -> Result<(), Failure> {
    let key = admin.agent_with_key(agent).await?;
    // `count` of the base resources, always with the one W1 reads among them.
    let count = count.clamp(1, RESOURCES);
    let first = 42usize.saturating_sub(count / 2).min(RESOURCES - count);
    admin.batch(agent, (first..first + count).map(resource).collect()).await?;
    admin.send(reqwest::Method::PUT, &format!("/agents/{agent}/prompts/{PROMPT}"), &prompt()).await?;
    let started = Instant::now();
    for from in (0..extra).step_by(BATCH) {
        admin.batch(agent, (from..(from + BATCH).min(extra)).map(bulk).collect()).await?;
        if from > 0 && from % 100_000 == 0 {
            eprintln!("seed: {from} bulk resources in {:.0} s", started.elapsed().as_secs_f64());
        }
    }
    if extra > 0 {
        eprintln!("seed: {extra} bulk resources in {:.1} s", started.elapsed().as_secs_f64());
    }
    println!("{key}");
    Ok(())
}

async fn agents(admin: &Admin, count: usize, per_agent: usize, out: &str) -> Result<(), Failure> {
    let started = Instant::now();
    let lines: Vec<String> = futures::stream::iter((0..count).map(|n| async move {
        let id = format!("a{n:05}");
        let key = admin.agent_with_key(&id).await?;
        // Fewer than the base resources: the last one is the one W1 reads.
        let read = (0..RESOURCES).position(|i| uri(i) == READ_URI).unwrap_or(0);
        let items = (0..per_agent)
            .map(|i| if i + 1 == per_agent && per_agent <= read { read } else { i })
            .map(|i| {
                let mut item = resource(i);
                if uri(i) != READ_URI {
                    item["text"] = json!(format!("Resource {i:03} of agent {id}."));
                }
                item
            })
            .collect();
        admin.batch(&id, items).await?;
        Ok::<_, Failure>(format!("{id} {key}"))
    }))
    .buffer_unordered(PARALLEL)
    .try_collect()
    .await?;
    std::fs::write(out, lines.join("\n") + "\n")?;
    eprintln!("seed: {count} agents with {per_agent} resources each in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Every agent of `file` (lines `agent key`) gets one W1 read and one W2 list, 8 at a time, so that the
/// measured run that follows finds each agent's key, row, page and content loaded.
async fn warm(base: &str, file: &str) -> Result<(), Failure> {
    let http = reqwest::Client::new();
    let text = std::fs::read_to_string(file)?;
    let started = Instant::now();
    let agents: Vec<(&str, &str)> = text.lines().filter_map(|line| line.split_once(' ')).collect();
    futures::stream::iter(agents.iter().map(|(agent, key)| {
        let http = &http;
        async move {
            for (method, params) in [("resources/read", json!({"uri": READ_URI})), ("resources/list", json!({}))] {
                let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
                let response =
                    http.post(format!("{base}/{agent}/mcp")).header("x-agent-api-key", *key).json(&body).send().await?;
                if !response.status().is_success() {
                    return Err::<(), Failure>(format!("{agent} {method}: {}", response.status()).into());
                }
                response.bytes().await?;
            }
            Ok::<(), Failure>(())
        }
    }))
    .buffer_unordered(PARALLEL)
    .try_collect::<()>()
    .await?;
    eprintln!("seed: {} agents warmed in {:.1} s", agents.len(), started.elapsed().as_secs_f64());
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(at.min(sorted.len().saturating_sub(1))).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

async fn cold(base: &str, agent: &str, key: &str, extra: usize, reads: usize) -> Result<(), Failure> {
    let http = reqwest::Client::new();
    let endpoint = format!("{base}/{agent}/mcp");
    // Distinct, spread over the whole registry, deterministic.
    let step = (extra / reads.max(1)).max(1);
    let uris: Vec<String> = (0..reads.min(extra)).map(|n| bulk_uri((n * step + 7919 * n) % extra)).collect();
    let mut seen = HashMap::new();
    let pass = |label: &'static str| {
        let (http, endpoint, uris) = (&http, &endpoint, &uris);
        async move {
            let mut latencies = Vec::with_capacity(uris.len());
            for (n, uri) in uris.iter().enumerate() {
                let body = json!({"jsonrpc": "2.0", "id": n, "method": "resources/read", "params": {"uri": uri}});
                let started = Instant::now();
                let response = http.post(endpoint).header("x-agent-api-key", key).json(&body).send().await?;
                let status = response.status();
                let answer: Value = response.json().await?;
                latencies.push(started.elapsed());
                if !status.is_success() || answer["result"]["contents"][0]["uri"] != json!(uri) {
                    return Err::<_, Failure>(format!("{label} read of {uri}: {status} {answer}").into());
                }
            }
            latencies.sort();
            Ok((label, latencies))
        }
    };
    for label in ["cold", "warm"] {
        let (label, latencies) = pass(label).await?;
        seen.insert(label, latencies);
    }
    let (cold, warm) = (&seen["cold"], &seen["warm"]);
    println!(
        "cold_p50_ms={:.3} cold_p99_ms={:.3} warm_p50_ms={:.3} warm_p99_ms={:.3} reads={}",
        percentile(cold, 0.5),
        percentile(cold, 0.99),
        percentile(warm, 0.5),
        percentile(warm, 0.99),
        cold.len()
    );
    Ok(())
}

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.windows(2).find(|pair| pair[0] == name).map(|pair| pair[1].as_str())
}

fn required<'a>(args: &'a [String], name: &str) -> &'a str {
    flag(args, name).unwrap_or_else(|| {
        eprintln!("seed: {name} is required (see the top of bench/src/bin/seed.rs)");
        std::process::exit(2)
    })
}

fn number(args: &[String], name: &str, default: usize) -> usize {
    flag(args, name).map_or(default, |value| {
        value.parse().unwrap_or_else(|_| {
            eprintln!("seed: {name} must be a number, not {value}");
            std::process::exit(2)
        })
    })
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let base_url = required(&args, "--base").trim_end_matches('/').to_owned();
    let admin =
        || Admin { http: reqwest::Client::new(), base: base_url.clone(), token: required(&args, "--token").to_owned() };
    let outcome = match args.first().map(String::as_str) {
        Some("base") => {
            base(&admin(), required(&args, "--agent"), number(&args, "--count", RESOURCES), number(&args, "--extra", 0))
                .await
        }
        Some("agents") => {
            agents(
                &admin(),
                number(&args, "--count", 10_000),
                number(&args, "--per-agent", 100),
                required(&args, "--out"),
            )
            .await
        }
        Some("warm") => warm(&base_url, required(&args, "--agents")).await,
        Some("cold") => {
            cold(
                &base_url,
                required(&args, "--agent"),
                required(&args, "--key"),
                number(&args, "--extra", 0),
                number(&args, "--reads", 1000),
            )
            .await
        }
        _ => {
            eprintln!("usage: seed base|agents|warm|cold ... (see the top of bench/src/bin/seed.rs)");
            std::process::exit(2)
        }
    };
    if let Err(error) = outcome {
        eprintln!("seed: {error}");
        std::process::exit(1);
    }
}
