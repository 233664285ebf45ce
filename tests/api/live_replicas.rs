//! Live updates across hivegate processes on one PostgreSQL database: no sticky sessions, resumption on
//! another replica, revocation everywhere at once, and a LISTEN connection lost while changes happen.

use std::collections::HashSet;

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::{Api, Backend, DEADLINE, HivegateProcess, OPERATOR_TOKEN, TestDatabase, expect_status};
use crate::live_client::{Legacy, Next, Sse, listen, resources_changed, summary, updated};
use crate::mcp_client::Answer;

async fn two_replicas() -> (TestDatabase, HivegateProcess, HivegateProcess) {
    let db = TestDatabase::new(Backend::Postgres).await;
    let (a, b) = tokio::join!(
        HivegateProcess::start(db.url(), Some(OPERATOR_TOKEN)),
        HivegateProcess::start(db.url(), Some(OPERATOR_TOKEN))
    );
    (db, a, b)
}

/// Creates agent `bot` through `a` with an `mcp` key.
async fn agent(a: &HivegateProcess) -> String {
    a.create_agent("bot").await;
    a.issue_key("bot", &["mcp"]).await.key
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_served_by_every_replica() {
    let (_db, a, b) = two_replicas().await;
    let key = agent(&a).await;
    a.put_text("bot", "test://a", "one").await;
    // Initialized on A, subscribed through B, streamed from A: no stickiness needed.
    let on_a = Legacy::initialize(&a, "bot", &key, "2025-11-25").await;
    let on_b = Legacy {
        api: &b,
        agent: on_a.agent.clone(),
        key: key.clone(),
        session: on_a.session.clone(),
        version: on_a.version.clone(),
    };
    on_b.subscribe("test://a").await;
    let mut stream = on_a.open(None).await;
    let mut modern = listen(&a, "bot", &key, json!(1), json!({"resourceSubscriptions": ["test://a"]})).await;
    modern.next().await;
    // Changed through B, notified on A.
    b.put_text("bot", "test://a", "two").await;
    assert_eq!(summary(&stream.message().await), updated("test://a"));
    assert_eq!(summary(&modern.message().await), updated("test://a"));
    // Unsubscribed through B: A's stream stops getting the updates.
    on_b.unsubscribe("test://a").await;
    b.put_text("bot", "test://a", "six").await;
    b.put_text("bot", "test://b", "new").await;
    assert_eq!(summary(&stream.message().await), resources_changed());
    // A second GET, on B, replaces A's stream.
    let mut replacement = on_b.open(None).await;
    stream.expect_end().await;
    replacement.next().await;
    // DELETE through A: B's stream closes and B refuses the session at once.
    let response = on_a.request(Method::DELETE).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    replacement.expect_end().await;
    on_b.call("ping", json!({})).await.error(StatusCode::NOT_FOUND, -31410);
}

/// Reads the next message of `stream`, reopening it on `client` after `last_id` whenever it ends.
async fn resumed_message<'a>(
    stream: &mut Sse,
    client: &Legacy<'a, HivegateProcess>,
    last_id: &mut Option<String>,
) -> crate::live_client::Event {
    loop {
        match stream.next_within(DEADLINE).await {
            Next::Event(event) => {
                if event.id.is_some() {
                    last_id.clone_from(&event.id);
                }
                if !event.data.is_empty() {
                    return event;
                }
            }
            Next::End => *stream = client.open(last_id.as_deref()).await,
            Next::Quiet => panic!("nothing arrived within {DEADLINE:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_resumes_on_another_replica() {
    let (_db, mut a, mut b) = two_replicas().await;
    let key = agent(&a).await;
    let on_a = Legacy::initialize(&a, "bot", &key, "2025-11-25").await;
    on_a.subscribe("test://a").await;
    let mut stream = on_a.open(None).await;
    let mut last_id = stream.next().await.id;
    b.put_text("bot", "test://a", "1").await;
    let seen = stream.message().await;
    last_id.clone_from(&seen.id);
    assert_eq!(summary(&seen), resources_changed());

    // A crashes; changes go on through B; the client resumes on B where it stopped.
    let session = on_a.session.clone();
    a.kill();
    b.put_text("bot", "test://a", "2").await;
    b.put_text("bot", "test://a", "3").await;
    let on_b = Legacy { api: &b, agent: "bot".to_owned(), key: key.clone(), session, version: "2025-11-25".to_owned() };
    let mut resumed = on_b.open(last_id.as_deref()).await;
    let first = resumed.message().await;
    let second = resumed.message().await;
    assert_eq!([summary(&first), summary(&second)], [updated("test://a"), updated("test://a")]);
    assert_ne!(first.id, second.id);
    resumed.expect_quiet().await;

    // B is stopped with SIGTERM: its streams end (a listen with its final result) and it exits 0.
    let mut modern = listen(&b, "bot", &key, json!("m"), json!({"resourcesListChanged": true})).await;
    modern.next().await;
    let status = b.terminate().await;
    assert!(status.success(), "SIGTERM: {status}");
    resumed.expect_end().await;
    let rest = modern.expect_end().await;
    assert_eq!(rest.last().map(|event| event.json()["result"]["resultType"].clone()), Some(json!("complete")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_key_is_refused_and_its_streams_close_everywhere() {
    let (_db, a, b) = two_replicas().await;
    let key = agent(&a).await;
    let doomed = a.issue_key("bot", &["mcp"]).await;
    let client = Legacy::initialize(&b, "bot", &doomed.key, "2025-11-25").await;
    let mut legacy = client.open(None).await;
    let mut modern = listen(&b, "bot", &doomed.key, json!(9), json!({"promptsListChanged": true})).await;
    modern.next().await;
    let mut kept = listen(&b, "bot", &key, json!(1), json!({"resourcesListChanged": true})).await;
    kept.next().await;
    a.revoke_key("bot", &doomed.id).await;
    // Refused by B on the very next request, and B's streams of that key are closed.
    client.call("ping", json!({})).await.error(StatusCode::UNAUTHORIZED, -31401);
    legacy.expect_end().await;
    let rest = modern.expect_end().await;
    assert_eq!(rest.last().map(|event| event.json()["id"].clone()), Some(json!(9)));
    // The other key's stream is untouched.
    a.put_text("bot", "test://a", "x").await;
    assert_eq!(summary(&kept.message().await), resources_changed());
    let answer = Answer::of(b.with_key(Method::GET, "/bot/mcp", &doomed.key).send().await.unwrap()).await;
    answer.error(StatusCode::UNAUTHORIZED, -31401);
}

/// The PostgreSQL backends running hivegate's LISTEN.
async fn listener_pids(conn: &mut sqlx::PgConnection, database: &str) -> Vec<i32> {
    sqlx::query_scalar("select pid from pg_stat_activity where datname = $1 and application_name = 'hivegate-listener'")
        .bind(database)
        .fetch_all(&mut *conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_notification_is_lost_when_the_listen_connection_drops() {
    let (db, a, b) = two_replicas().await;
    let key = agent(&a).await;
    let database = db.postgres_name().unwrap().to_owned();
    let mut conn = db.maintenance_connection().await;
    a.put_text("bot", "test://a", "--").await;
    let client = Legacy::initialize(&b, "bot", &key, "2025-11-25").await;
    client.subscribe("test://a").await;
    let mut legacy = client.open(None).await;
    let mut last_id = legacy.next().await.id;
    let mut modern = listen(&b, "bot", &key, json!(1), json!({"resourceSubscriptions": ["test://a"]})).await;
    modern.next().await;

    // Changes through A while every replica's listener is cut, and after.
    const CHANGES: usize = 12;
    let writer = async {
        for i in 0..CHANGES {
            if i == 3 {
                for pid in listener_pids(&mut conn, &database).await {
                    let _: bool = sqlx::query_scalar("select pg_terminate_backend($1)")
                        .bind(pid)
                        .fetch_one(&mut conn)
                        .await
                        .unwrap();
                }
            }
            a.put_text("bot", "test://a", &format!("{i:02}")).await;
        }
    };
    let reader = async {
        let mut ids = Vec::new();
        while ids.len() < CHANGES {
            let event = resumed_message(&mut legacy, &client, &mut last_id).await;
            assert_eq!(summary(&event), updated("test://a"));
            ids.push(event.id.clone().expect("an id"));
        }
        ids
    };
    let ((), ids) = tokio::join!(writer, reader);
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), CHANGES, "each update once: {ids:?}");
    for _ in 0..CHANGES {
        assert_eq!(summary(&modern.message().await), updated("test://a"));
    }
    legacy.expect_quiet().await;
    modern.expect_quiet().await;
    let response = a.op(Method::GET, "/readyz").send().await.unwrap();
    expect_status(response, StatusCode::OK).await;
    let _ = sqlx::Connection::close(conn).await;
}
