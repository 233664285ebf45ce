//! Tenant isolation, as a property: randomized agents, keys, URIs and calls of every method, and never a byte
//! of another agent's data in any answer, notification, completion or audit query.
//!
//! Every agent's data carries its own marker (in URIs, names, texts, completion values); a request made for
//! agent A, with any key and any parameters (including other agents' URIs, prompt names and cursors), must
//! never answer with another agent's marker. `HIVEGATE_ISOLATION_REQUESTS` sets the number of requests (a few
//! thousand by default; the full run is `HIVEGATE_ISOLATION_REQUESTS=100000`), `HIVEGATE_ISOLATION_SEED` the
//! seed (printed, so a failure can be replayed).

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Api, Backend, TestApp, expect_json, spawn_app};
use crate::live_client::{Next, listen};
use crate::mcp_client::envelope;

both!(no_agent_ever_sees_another_agents_data);

const AGENTS: usize = 4;
/// Requests in flight at once.
const CONCURRENCY: usize = 8;

/// One agent's world: its marker, its keys, and the names its data uses.
struct World {
    id: String,
    marker: String,
    mcp_key: String,
    registry_key: String,
    uris: Vec<String>,
    prompts: Vec<String>,
    cursor: Option<String>,
}

fn requests_to_make() -> usize {
    std::env::var("HIVEGATE_ISOLATION_REQUESTS").ok().and_then(|n| n.parse().ok()).unwrap_or(3_000)
}

/// Sets up an agent whose every stored value carries `marker`.
async fn world(app: &TestApp, index: usize, rng: &mut StdRng) -> World {
    let id = format!("tenant-{index}");
    let marker = format!("MARK{index}X{:08x}", rng.random::<u32>());
    let response = app
        .op(Method::POST, "/admin/v1/agents")
        .json(&json!({"id": id, "name": format!("Agent {marker}"), "description": format!("About {marker}")}))
        .send()
        .await
        .unwrap();
    expect_json(response, StatusCode::CREATED).await;
    let mcp_key = app.issue_key(&id, &["mcp"]).await.key;
    let registry_key = app.issue_key(&id, &["registry"]).await.key;
    let mut uris = Vec::new();
    let mut upserts = Vec::new();
    for n in 0..30 {
        let uri = format!("test://{marker}/doc-{n}");
        let mut resource =
            json!({"uri": uri, "name": format!("{marker} doc {n}"), "text": format!("secret of {marker} #{n}")});
        if n == 0 {
            resource =
                json!({"uri": format!("test://{marker}"), "name": "dir", "mimeType": "inode/directory", "text": ""});
        }
        uris.push(resource["uri"].as_str().unwrap().to_owned());
        upserts.push(resource);
    }
    let batch = json!({"upsert": upserts});
    let path = format!("/admin/v1/agents/{id}/resources/batch");
    expect_json(app.op(Method::POST, &path).json(&batch).send().await.unwrap(), StatusCode::OK).await;
    let template = json!({"uriTemplate": format!("tmpl://{marker}/{{item}}"), "name": format!("{marker} template"),
        "text": format!("rendered for {marker}: {{{{ item }}}}")});
    let path = format!("/admin/v1/agents/{id}/resource-templates");
    let response = app.op(Method::PUT, &path).json(&template).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let mut prompts = Vec::new();
    for n in 0..3 {
        let name = format!("p{index}-{n}");
        let prompt = json!({"description": format!("{marker} prompt"),
            "arguments": [{"name": "topic", "required": true, "completions": [format!("{marker}-alpha"), format!("{marker}-beta")]}],
            "messages": [{"role": "user", "content": {"type": "text", "text": format!("{marker} asks about {{{{ topic }}}}")}}]});
        let response =
            app.op(Method::PUT, &format!("/admin/v1/agents/{id}/prompts/{name}")).json(&prompt).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        prompts.push(name);
    }
    World { id, marker, mcp_key, registry_key, uris, prompts, cursor: None }
}

/// A random MCP call (method and params) for some agent, naming things of `pick` (possibly another agent).
fn call(rng: &mut StdRng, pick: &World, own_cursor: Option<&String>) -> (String, Value) {
    let uri = pick.uris[rng.random_range(0..pick.uris.len())].clone();
    let prompt = pick.prompts[rng.random_range(0..pick.prompts.len())].clone();
    match rng.random_range(0..9) {
        0 => ("resources/list".into(), json!({})),
        1 => ("resources/list".into(), json!({"cursor": own_cursor.cloned().unwrap_or_default()})),
        2 => ("resources/read".into(), json!({"uri": uri})),
        3 => ("resources/read".into(), json!({"uri": format!("tmpl://{}/x{}", pick.marker, rng.random::<u16>())})),
        4 => ("resources/templates/list".into(), json!({})),
        5 => ("prompts/list".into(), json!({})),
        6 => ("prompts/get".into(), json!({"name": prompt, "arguments": {"topic": "t"}})),
        7 => (
            "completion/complete".into(),
            json!({"ref": {"type": "ref/prompt", "name": prompt}, "argument": {"name": "topic", "value": ""}}),
        ),
        _ => (
            "completion/complete".into(),
            json!({"ref": {"type": "ref/resource", "uri": format!("tmpl://{}/{{item}}", pick.marker)}, "argument": {"name": "item", "value": ""}}),
        ),
    }
}

/// Fails when `text` (an answer for `agent`) holds any other agent's marker.
fn assert_isolated(worlds: &[World], agent: usize, what: &str, text: &str) {
    for (other, world) in worlds.iter().enumerate() {
        if other != agent && text.contains(&world.marker) {
            panic!("{what} for {} holds data of {}: {text}", worlds[agent].id, world.id);
        }
    }
}

async fn no_agent_ever_sees_another_agents_data(backend: Backend) {
    let seed =
        std::env::var("HIVEGATE_ISOLATION_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random::<u64>);
    eprintln!("isolation: seed {seed} (HIVEGATE_ISOLATION_SEED={seed} replays it)");
    let mut rng = StdRng::seed_from_u64(seed);
    let app = spawn_app(backend).await;
    let mut worlds = Vec::new();
    for index in 0..AGENTS {
        worlds.push(world(&app, index, &mut rng).await);
    }
    // A cursor of each agent's resource list, to be presented to other agents.
    for world in &mut worlds {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list", "params": {}});
        let answer: Value = app
            .with_key(Method::POST, &format!("/{}/mcp", world.id), &world.mcp_key)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        world.cursor = answer["result"]["nextCursor"].as_str().map(str::to_owned);
    }
    // Every agent listens for everything.
    let mut streams = Vec::new();
    for world in &worlds {
        let filter =
            json!({"resourcesListChanged": true, "promptsListChanged": true, "resourceUris": world.uris.clone()});
        let mut stream = listen(&app, &world.id, &world.mcp_key, json!(1), filter).await;
        stream.next().await;
        streams.push(stream);
    }

    let total = requests_to_make();
    let worlds = Arc::new(worlds);
    let plan: Vec<(usize, usize, usize, bool, String, Value)> = (0..total)
        .map(|_| {
            let agent = rng.random_range(0..AGENTS);
            // Mostly the agent's own key; sometimes another agent's, which must be refused.
            let key_of = if rng.random_bool(0.9) { agent } else { rng.random_range(0..AGENTS) };
            let named = if rng.random_bool(0.7) { agent } else { rng.random_range(0..AGENTS) };
            let modern = rng.random_bool(0.5);
            let cursor = worlds[named].cursor.as_ref();
            let (method, params) = call(&mut rng, &worlds[named], cursor);
            (agent, key_of, named, modern, method, params)
        })
        .collect();
    let chunks: Vec<Vec<_>> = plan.chunks(total.div_ceil(CONCURRENCY).max(1)).map(<[_]>::to_vec).collect();
    let app = Arc::new(app);
    let mut tasks = Vec::new();
    for chunk in chunks {
        let (app, worlds) = (app.clone(), worlds.clone());
        tasks.push(tokio::spawn(async move {
            for (agent, key_of, _named, modern, method, params) in chunk {
                let world = &worlds[agent];
                let key = &worlds[key_of].mcp_key;
                let mut request = app.with_key(Method::POST, &format!("/{}/mcp", world.id), key);
                let mut params = params;
                if modern {
                    params["_meta"] = envelope();
                    request =
                        request.header("mcp-protocol-version", "2026-07-28").header("mcp-method", method.as_str());
                    if let Some(name) = params["uri"].as_str().or(params["name"].as_str()) {
                        request = request.header("mcp-name", name.to_owned());
                    }
                }
                // What the request itself names may be echoed back (in an error's `data.uri`, say); that is
                // the client's own input, not another agent's data.
                let echoes: Vec<String> =
                    [&params["uri"], &params["name"], &params["ref"]["uri"], &params["ref"]["name"]]
                        .into_iter()
                        .filter_map(|value| value.as_str().map(str::to_owned))
                        .collect();
                let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
                let response =
                    request.header("accept", "application/json, text/event-stream").json(&body).send().await.unwrap();
                let status = response.status();
                let mut text = response.text().await.unwrap();
                for echo in &echoes {
                    text = text.replace(echo.as_str(), "");
                }
                if key_of != agent {
                    assert_eq!(status, StatusCode::FORBIDDEN, "another agent's key on {}: {text}", world.id);
                }
                assert_isolated(&worlds, agent, &format!("{method} ({status})"), &text);
            }
        }));
    }
    // Meanwhile, changes land in every agent; their notifications reach only the agent's own streams.
    let writer = {
        let (app, worlds) = (app.clone(), worlds.clone());
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        tokio::spawn(async move {
            for n in 0..40 {
                let world = &worlds[rng.random_range(0..AGENTS)];
                let uri = &world.uris[rng.random_range(1..world.uris.len())]; // not the directory
                let resource = json!({"uri": uri, "name": format!("{} doc", world.marker), "text": format!("{} v{n}", world.marker)});
                let response = app
                    .with_key(Method::PUT, &format!("/admin/v1/agents/{}/resources", world.id), &world.registry_key)
                    .json(&resource)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), StatusCode::OK);
            }
        })
    };
    for task in tasks {
        task.await.unwrap();
    }
    writer.await.unwrap();

    // Every notification a stream got is about its own agent.
    for (agent, stream) in streams.iter_mut().enumerate() {
        let mut received = 0;
        while let Next::Event(event) = stream.next_within(std::time::Duration::from_millis(300)).await {
            assert_isolated(&worlds, agent, "a notification", &event.data);
            received += 1;
        }
        eprintln!("isolation: {} received {received} notifications", worlds[agent].id);
    }

    // The audit log, queried per agent, holds that agent's records only. A record's `target` is what the
    // client asked for (possibly another agent's URI), so it is the one field not checked for markers.
    for (agent, world) in worlds.iter().enumerate() {
        let response =
            app.op(Method::GET, "/admin/v1/audit/export").query(&[("agent", world.id.as_str())]).send().await.unwrap();
        let text = response.text().await.unwrap();
        assert!(!text.is_empty());
        for line in text.lines() {
            let mut record: Value = serde_json::from_str(line).unwrap();
            assert_eq!(record["agentId"], world.id.as_str(), "{line}");
            record["target"] = Value::Null;
            assert_isolated(&worlds, agent, "an audit record", &record.to_string());
        }
    }
    eprintln!("isolation: {total} requests across {AGENTS} agents, seed {seed}");
}
