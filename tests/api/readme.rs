//! The README's modern curl session, run as written: its commands work verbatim against a server set up as
//! the walkthrough before it leaves it.

use std::process::Stdio;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::helpers::{Api, Backend, expect_json, spawn_app};

both!(the_modern_curl_session_works_as_written);

/// The SDK snippets that interop/run executes are the ones the README shows.
#[test]
fn the_readme_quotes_the_sdk_snippets_that_are_run() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md");
    for (fence, snippet) in [
        ("```python\n", include_str!("../../interop/snippets/python_sdk.py")),
        ("```js\n", include_str!("../../interop/snippets/ts_sdk.mjs")),
    ] {
        assert!(readme.contains(&format!("{fence}{snippet}```")), "README.md does not quote:\n{snippet}");
    }
}

/// The shell block after `marker` in README.md.
fn readme_block(marker: &str) -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md");
    let after = readme.split_once(marker).unwrap_or_else(|| panic!("no {marker} in README.md")).1;
    let start = after.find("```sh\n").expect("a sh block after the marker") + "```sh\n".len();
    let length = after[start..].find("```").expect("the block's end");
    after[start..start + length].to_owned()
}

async fn the_modern_curl_session_works_as_written(backend: Backend) {
    let app = spawn_app(backend).await;
    let response = app.op(Method::POST, "/admin/v1/agents").json(&json!({"id": "research-bot", "name": "Research"}));
    expect_json(response.send().await.unwrap(), StatusCode::CREATED).await;
    app.put_text("research-bot", "docs://guide/intro", "# Hello").await;
    let key = app.issue_key("research-bot", &["mcp"]).await.key;

    let mut shell = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(readme_block("<!-- modern-curl-session -->"))
        .env("BASE", app.base())
        .env("KEY", &key)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("bash");
    let mut lines = BufReader::new(shell.stdout.take().expect("stdout")).lines();
    // Discover and read answer one JSON line each (curl adds no line break: they may share a line with what
    // follows); the listen stream then acknowledges, and tells of a change.
    let mut output = String::new();
    let wanted = |output: &str| output.contains("notifications/resources/updated");
    let mut changed = false;
    while !wanted(&output) {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await;
        let line = line.expect("the session went quiet").expect("reading").expect("the session ended early");
        output.push_str(&line);
        output.push('\n');
        if !changed && output.contains("notifications/subscriptions/acknowledged") {
            app.put_text("research-bot", "docs://guide/intro", "# Hello again").await;
            changed = true;
        }
    }
    let _ = shell.kill().await;

    let discover = first_json_with(&output, "supportedVersions");
    assert_eq!(discover["result"]["supportedVersions"][0], "2026-07-28", "{output}");
    let read = first_json_with(&output, "\"contents\"");
    assert_eq!(read["result"]["contents"][0]["text"], "# Hello", "{output}");
    let ack = first_json_with(&output, "acknowledged");
    assert_eq!(
        ack["params"]["notifications"],
        json!({"resourcesListChanged": true, "resourceSubscriptions": ["docs://guide/intro"]}),
        "{output}"
    );
}

/// The first JSON value in `output` whose text contains `needle`: curl writes the answers without line
/// breaks, so a line may hold several, and the stream's `event:` field after them; `data:` lines hold one.
fn first_json_with(output: &str, needle: &str) -> Value {
    output
        .lines()
        .flat_map(|line| {
            let line = line.strip_prefix("data: ").unwrap_or(line);
            // The JSON values at the line's start, up to whatever is not JSON.
            serde_json::Deserializer::from_str(line).into_iter::<Value>().map_while(Result::ok).collect::<Vec<_>>()
        })
        .find(|value| value.to_string().contains(needle))
        .unwrap_or_else(|| panic!("no JSON with {needle} in: {output}"))
}
