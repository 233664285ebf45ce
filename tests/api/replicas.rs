//! Several hivegate processes on one PostgreSQL database (SQLite serves a single replica).

use reqwest::{Method, StatusCode};
use serde_json::json;
use sqlx::{Connection, PgConnection};

use crate::helpers::{
    Api, Backend, DEADLINE, HivegateProcess, OPERATOR_TOKEN, TestDatabase, eventually, expect_json, expect_problem,
    expect_status, str_of, uris,
};

/// Two replicas started at once on a fresh PostgreSQL database.
async fn two_replicas() -> (TestDatabase, HivegateProcess, HivegateProcess) {
    let db = TestDatabase::new(Backend::Postgres).await;
    let (a, b) = tokio::join!(
        HivegateProcess::start(db.url(), Some(OPERATOR_TOKEN)),
        HivegateProcess::start(db.url(), Some(OPERATOR_TOKEN))
    );
    (db, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_through_one_replica_are_seen_by_another_at_once() {
    let (_db, a, b) = two_replicas().await;
    let resources = "/admin/v1/agents/bot/resources";

    // An agent created on A exists on B; a change to it is seen at once.
    a.create_agent("bot").await;
    let response = b.op(Method::GET, "/admin/v1/agents/bot").send().await.unwrap();
    assert_eq!(expect_json(response, StatusCode::OK).await["name"], "Agent bot");
    let response = a.op(Method::PATCH, "/admin/v1/agents/bot").json(&json!({"name": "Renamed"})).send().await;
    expect_json(response.unwrap(), StatusCode::OK).await;
    let response = b.op(Method::GET, "/admin/v1/agents/bot").send().await.unwrap();
    assert_eq!(expect_json(response, StatusCode::OK).await["name"], "Renamed");

    // A resource: absent on B (so B has looked), put through A, then read from B at once; replaced; deleted.
    expect_problem(b.get_content("bot", "test://shared").await, StatusCode::NOT_FOUND).await;
    assert!(b.list_all(resources, None).await.is_empty());
    a.put_text("bot", "test://shared", "version 1").await;
    let read = expect_json(b.get_content("bot", "test://shared").await, StatusCode::OK).await;
    assert_eq!(read["text"], "version 1");
    assert_eq!(uris(&b.list_all(resources, None).await), ["test://shared"]);
    a.put_text("bot", "test://shared", "version 2").await;
    let read = expect_json(b.get_content("bot", "test://shared").await, StatusCode::OK).await;
    assert_eq!(read["text"], "version 2");
    let response = a.op(Method::DELETE, resources).query(&[("uri", "test://shared")]).send().await.unwrap();
    expect_status(response, StatusCode::NO_CONTENT).await;
    expect_problem(b.get_content("bot", "test://shared").await, StatusCode::NOT_FOUND).await;
    assert!(b.list_all(resources, None).await.is_empty());

    // A cursor made by A is accepted by B.
    for i in 0..5 {
        a.put_text("bot", &format!("test://{i}"), "x").await;
    }
    let response = a.op(Method::GET, resources).query(&[("limit", "2")]).send().await.unwrap();
    let page = expect_json(response, StatusCode::OK).await;
    let cursor = str_of(&page, "nextCursor");
    let response = b.op(Method::GET, resources).query(&[("limit", "2"), ("cursor", cursor)]).send().await.unwrap();
    let page = expect_json(response, StatusCode::OK).await;
    assert_eq!(uris(page["items"].as_array().unwrap()), ["test://2", "test://3"]);

    // A registry key used on B, revoked through A: refused by B on its very next request.
    let key = a.issue_key("bot", &["registry"]).await;
    let response = b.with_key(Method::GET, resources, &key.key).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    a.revoke_key("bot", &key.id).await;
    let response = b.with_key(Method::GET, resources, &key.key).send().await.unwrap();
    expect_problem(response, StatusCode::UNAUTHORIZED).await;

    // An agent deleted through A: its key, used on B just before, is refused by B at once.
    let key = a.issue_key("bot", &["registry"]).await;
    let response = b.with_key(Method::GET, resources, &key.key).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    let response = a.op(Method::DELETE, "/admin/v1/agents/bot").send().await.unwrap();
    expect_status(response, StatusCode::NO_CONTENT).await;
    let response = b.with_key(Method::GET, resources, &key.key).send().await.unwrap();
    expect_problem(response, StatusCode::UNAUTHORIZED).await;
    let response = b.op(Method::GET, "/admin/v1/agents/bot").send().await.unwrap();
    expect_problem(response, StatusCode::NOT_FOUND).await;
}

/// The backends of `database` that run hivegate's LISTEN: by application name, else by their last query.
async fn listener_pids(conn: &mut PgConnection, database: &str) -> Vec<i32> {
    let by_name: Vec<i32> = sqlx::query_scalar(
        "select pid from pg_stat_activity where datname = $1 and application_name = 'hivegate-listener'",
    )
    .bind(database)
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    if !by_name.is_empty() {
        return by_name;
    }
    sqlx::query_scalar("select pid from pg_stat_activity where datname = $1 and query ilike 'listen%'")
        .bind(database)
        .fetch_all(&mut *conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_recovers_from_a_broken_listen_connection() {
    let (db, a, b) = two_replicas().await;
    let database = db.postgres_name().unwrap().to_owned();
    let mut conn = db.maintenance_connection().await;
    let resources = "/admin/v1/agents/bot/resources";

    a.create_agent("bot").await;
    let revoked_while_down = a.issue_key("bot", &["registry"]).await;
    let revoked_after = a.issue_key("bot", &["registry"]).await;
    for key in [&revoked_while_down, &revoked_after] {
        let response = b.with_key(Method::GET, resources, &key.key).send().await.unwrap();
        expect_json(response, StatusCode::OK).await;
    }
    expect_problem(b.get_content("bot", "test://while-down").await, StatusCode::NOT_FOUND).await;

    // Both replicas listen; cut their listener connections.
    let listeners = listener_pids(&mut conn, &database).await;
    assert!(listeners.len() >= 2, "expected a LISTEN connection per replica, found {listeners:?}");
    for pid in &listeners {
        let terminated: bool =
            sqlx::query_scalar("select pg_terminate_backend($1)").bind(pid).fetch_one(&mut conn).await.unwrap();
        assert!(terminated, "could not terminate backend {pid}");
    }

    // Changes made while the listeners are down …
    a.revoke_key("bot", &revoked_while_down.id).await;
    a.put_text("bot", "test://while-down", "made while B was deaf").await;

    // … are visible on B once it has reconnected and resynchronised.
    let started = std::time::Instant::now();
    loop {
        let now = listener_pids(&mut conn, &database).await;
        if now.len() >= 2 && now.iter().all(|pid| !listeners.contains(pid)) {
            break;
        }
        assert!(started.elapsed() < DEADLINE, "the replicas did not reconnect their listeners: {now:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    eventually("B to refuse the key revoked while its listener was down", || async {
        let response = b.with_key(Method::GET, resources, &revoked_while_down.key).send().await.unwrap();
        (response.status() == StatusCode::UNAUTHORIZED).then_some(())
    })
    .await;
    let read = expect_json(b.get_content("bot", "test://while-down").await, StatusCode::OK).await;
    assert_eq!(read["text"], "made while B was deaf");

    // The bus works again: a key revoked now is refused by B on its very next request.
    let response = b.with_key(Method::GET, resources, &revoked_after.key).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    a.revoke_key("bot", &revoked_after.id).await;
    let response = b.with_key(Method::GET, resources, &revoked_after.key).send().await.unwrap();
    expect_problem(response, StatusCode::UNAUTHORIZED).await;

    // And so is a change of content.
    a.put_text("bot", "test://while-down", "after").await;
    let read = expect_json(b.get_content("bot", "test://while-down").await, StatusCode::OK).await;
    assert_eq!(read["text"], "after");
    let _ = conn.close().await;
}

/// The replicas a change waits for, as the database lists them.
async fn registered_replicas(conn: &mut PgConnection) -> usize {
    let count: i64 = sqlx::query_scalar("select count(*) from replica").fetch_one(&mut *conn).await.unwrap();
    usize::try_from(count).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_is_waited_for_while_it_runs_and_leaves_when_stopped() {
    let (db, a, mut b) = two_replicas().await;
    let mut conn = PgConnection::connect(db.url()).await.unwrap();
    assert_eq!(registered_replicas(&mut conn).await, 2);

    // A change through B is applied by A before B answers: A refuses the revoked key at once.
    b.create_agent("bot").await;
    let key = b.issue_key("bot", &["registry"]).await;
    let resources = "/admin/v1/agents/bot/resources";
    let response = a.with_key(Method::GET, resources, &key.key).send().await.unwrap();
    expect_json(response, StatusCode::OK).await;
    b.revoke_key("bot", &key.id).await;
    let response = a.with_key(Method::GET, resources, &key.key).send().await.unwrap();
    expect_problem(response, StatusCode::UNAUTHORIZED).await;

    // A stopped replica deregisters, so changes stop waiting for it; the other serves on.
    assert!(b.terminate().await.success(), "{}", b.logs());
    assert_eq!(registered_replicas(&mut conn).await, 1);
    a.put_text("bot", "test://after", "still served").await;
    let read = expect_json(a.get_content("bot", "test://after").await, StatusCode::OK).await;
    assert_eq!(read["text"], "still served");
    let _ = conn.close().await;
}
