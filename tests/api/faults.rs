//! Fault injection: a TCP proxy between hivegate and PostgreSQL that the test cuts and restores.
//!
//! While the database is unreachable, readiness fails, writes answer 503 with `Retry-After` (never hang),
//! and MCP requests' audit records wait in the writer's queue; once it is back everything recovers by
//! itself, every acknowledged write is there, and the queued audit records are written.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

use crate::helpers::{
    Api, Backend, HivegateProcess, OPERATOR_TOKEN, TestDatabase, eventually, expect_json, expect_problem,
};

/// A TCP proxy to `target` that can be cut (every open connection dropped, new ones closed at once).
struct FaultProxy {
    address: SocketAddr,
    is_cut: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
}

impl FaultProxy {
    async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let is_cut = Arc::new(AtomicBool::new(false));
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (cut, open) = (is_cut.clone(), connections.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else { continue };
                if cut.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let task = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                open.lock().unwrap().push(task.abort_handle());
            }
        })
        .abort_handle();
        Self { address, is_cut, connections, accept }
    }

    /// Drops every connection through the proxy and refuses new ones until [`FaultProxy::restore`].
    fn cut(&self) {
        self.is_cut.store(true, Ordering::SeqCst);
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    fn restore(&self) {
        self.is_cut.store(false, Ordering::SeqCst);
    }

    /// `url` with its host and port replaced by the proxy's.
    fn url_for(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap();
        let (authority, path) = rest.split_once('/').unwrap();
        let user = authority.rsplit_once('@').map(|(user, _)| format!("{user}@")).unwrap_or_default();
        format!("{scheme}://{user}{}/{path}", self.address)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// The PostgreSQL server's address in `url`.
fn server_address(url: &str) -> SocketAddr {
    let authority = url.split_once("://").unwrap().1.split('/').next().unwrap();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let host_port = if host_port.contains(':') { host_port.to_owned() } else { format!("{host_port}:5432") };
    let host_port = host_port.replace("localhost", "127.0.0.1");
    host_port.parse().unwrap_or_else(|e| panic!("{host_port}: {e}"))
}

async fn mcp_read(app: &HivegateProcess, key: &str, uri: &str) -> reqwest::Response {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": uri}});
    app.with_key(Method::POST, "/bot/mcp", key).json(&body).send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_going_away_and_coming_back() {
    let db = TestDatabase::new(Backend::Postgres).await;
    let proxy = FaultProxy::start(server_address(db.url())).await;
    let env = [("HIVEGATE_DATABASE__ACQUIRE_TIMEOUT_MS", "500"), ("HIVEGATE_AUDIT__FLUSH_INTERVAL_MS", "50")];
    let app = HivegateProcess::start_with_env(&proxy.url_for(db.url()), Some(OPERATOR_TOKEN), &env).await;
    app.create_agent("bot").await;
    let key = app.issue_key("bot", &["mcp"]).await.key;
    app.put_text("bot", "test://before", "acknowledged before the cut").await;
    assert_eq!(mcp_read(&app, &key, "test://before").await.status(), StatusCode::OK);

    proxy.cut();
    // Not ready, and writes fail fast with 503 and Retry-After: nothing hangs.
    eventually("/readyz to answer 503", || async {
        let response = app.anon(Method::GET, "/readyz").send().await.unwrap();
        (response.status() == StatusCode::SERVICE_UNAVAILABLE).then_some(())
    })
    .await;
    let write = json!({"uri": "test://during", "name": "during", "text": "never acknowledged"});
    let response = app.put_resource("bot", &write).await;
    assert_eq!(response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned()), Some("1".to_owned()));
    expect_problem(response, StatusCode::SERVICE_UNAVAILABLE).await;
    // MCP requests too: with the bus cut off a replica cannot know what changed, so it serves nothing from
    // its caches (not even a revoked key's requests) and answers 503 with -31503 and Retry-After. The bus
    // learns of the cut on its own connection, which a loaded machine may schedule after `/readyz` has
    // failed its ping: from then on, nothing is served. A read served before then is audited (counted).
    let served_before_the_bus_knew = std::sync::atomic::AtomicUsize::new(0);
    eventually("the MCP endpoint to stop serving from its caches", || async {
        match mcp_read(&app, &key, "test://before").await.status() {
            StatusCode::SERVICE_UNAVAILABLE => Some(()),
            StatusCode::OK => {
                served_before_the_bus_knew.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                None
            }
            other => panic!("a read during the cut answered {other}"),
        }
    })
    .await;
    let served = served_before_the_bus_knew.load(std::sync::atomic::Ordering::SeqCst);
    for uri in ["test://before", "test://unknown"] {
        let response = mcp_read(&app, &key, uri).await;
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(response.headers().contains_key("retry-after"));
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["code"], -31503, "{answer}");
    }

    proxy.restore();
    eventually("/readyz to answer 200 again", || async {
        let response = app.anon(Method::GET, "/readyz").send().await.unwrap();
        (response.status() == StatusCode::OK).then_some(())
    })
    .await;
    // Everything acknowledged is there, the refused write is not, and writes work again.
    let read = expect_json(app.get_content("bot", "test://before").await, StatusCode::OK).await;
    assert_eq!(read["text"], "acknowledged before the cut");
    expect_problem(app.get_content("bot", "test://during").await, StatusCode::NOT_FOUND).await;
    app.put_text("bot", "test://after", "after").await;
    assert_eq!(mcp_read(&app, &key, "test://after").await.status(), StatusCode::OK);

    // Every read that passed authentication is in the audit log, written in batches.
    let records = eventually("the reads' audit records", || async {
        let query = [("agent", "bot"), ("method", "resources/read")];
        let response = app.op(Method::GET, "/admin/v1/audit").query(&query).send().await.unwrap();
        let page = expect_json(response, StatusCode::OK).await;
        let items = page["items"].as_array().cloned().unwrap_or_default();
        (items.len() >= 2 + served).then_some(items)
    })
    .await;
    let targets: Vec<&str> = records.iter().filter_map(|record| record["target"].as_str()).collect();
    let mut expected = vec!["test://after"];
    expected.extend(std::iter::repeat_n("test://before", 1 + served));
    assert_eq!(targets, expected, "{records:?}");
}
