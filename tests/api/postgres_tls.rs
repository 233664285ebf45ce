//! TLS to PostgreSQL: with `sslmode` asking for it in the database URL, the store's pool and the LISTEN
//! connection are encrypted, and a server certificate the configured `sslrootcert` did not sign stops start-up.
//!
//! These stories need a test server URL that asks for TLS (`scripts/test`'s own cluster does, over
//! `verify-full`). Without one they are skipped with a note, unless `HIVEGATE_TEST_POSTGRES_TLS` is set (as
//! `scripts/test` and CI set it), in which case they fail instead of skipping.

use crate::helpers::{Api, Backend, TempDir, TestDatabase, postgres_server_url, spawn_app, test_config};

/// The environment variable that makes the TLS stories required rather than skipped.
const REQUIRE_TLS_ENV: &str = "HIVEGATE_TEST_POSTGRES_TLS";

/// The `sslmode` of `url`'s query string, if any.
fn ssl_mode(url: &str) -> Option<&str> {
    let (_, query) = url.split_once('?')?;
    query.split('&').find_map(|pair| match pair.split_once('=') {
        Some((name, value)) if name == "sslmode" || name == "ssl-mode" => Some(value),
        _ => None,
    })
}

/// Whether the test server's URL insists on TLS; `false` (after a note) when the stories are to be skipped.
fn server_url_requires_tls() -> bool {
    let url = postgres_server_url();
    if matches!(ssl_mode(&url), Some("require" | "verify-ca" | "verify-full")) {
        return true;
    }
    assert!(
        std::env::var_os(REQUIRE_TLS_ENV).is_none(),
        "{REQUIRE_TLS_ENV} is set but the test server's URL does not ask for TLS (sslmode=require, verify-ca or \
         verify-full)"
    );
    eprintln!("note: the test server's URL does not ask for TLS; skipping the PostgreSQL TLS story");
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_and_the_listener_connect_over_tls_when_the_url_asks() {
    if !server_url_requires_tls() {
        return;
    }
    let app = spawn_app(Backend::Postgres).await;
    app.create_agent("bot").await;

    let database = app.db.postgres_name().unwrap().to_owned();
    let mut conn = app.db.maintenance_connection().await;
    let rows: Vec<(String, bool)> = sqlx::query_as(
        "select a.application_name::text, s.ssl from pg_stat_activity a join pg_stat_ssl s using (pid) \
         where a.datname = $1 order by 1",
    )
    .bind(&database)
    .fetch_all(&mut conn)
    .await
    .unwrap();
    for name in ["hivegate", "hivegate-listener"] {
        assert!(rows.iter().any(|(application, _)| application == name), "no {name} connection in {rows:?}");
    }
    assert!(rows.iter().all(|(_, ssl)| *ssl), "a connection to the database without TLS: {rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_the_root_certificate_did_not_sign_stops_start_up() {
    if !server_url_requires_tls() {
        return;
    }
    let db = TestDatabase::new(Backend::Postgres).await;
    let dir = TempDir::new();
    let other_ca = dir.path().join("other-ca.pem");
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("a certificate");
    std::fs::write(&other_ca, generated.cert.pem()).unwrap();

    let (base, query) = db.url().split_once('?').expect("a query string");
    let query: Vec<&str> =
        query.split('&').filter(|pair| !pair.starts_with("sslrootcert=") && !pair.starts_with("sslmode=")).collect();
    let url = format!("{base}?{}&sslmode=verify-full&sslrootcert={}", query.join("&"), other_ca.display());

    let mut config = test_config(&db);
    config.database_url = hivegate::config::DatabaseUrl::new(&url);
    config.database.startup_timeout_secs = 0;
    let error = match hivegate::app::Application::build(config).await {
        Ok(_) => panic!("started against a server whose certificate {} did not sign", other_ca.display()),
        Err(error) => format!("{error:#}"),
    };
    assert!(error.contains("connecting to the database"), "{error}");
    assert!(error.to_lowercase().contains("certificate"), "the certificate is not named: {error}");
}

/// The client certificate of `scripts/postgres.sh`'s cluster, whose role signs in with it only: its
/// certificate and key files, when the cluster made them.
fn client_certificate() -> Option<(String, String)> {
    let cert = std::env::var("HIVEGATE_TEST_POSTGRES_CLIENT_CERT").ok()?;
    let key = std::env::var("HIVEGATE_TEST_POSTGRES_CLIENT_KEY").ok()?;
    Some((cert, key))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_in_the_url_signs_in_where_the_server_requires_one() {
    if !server_url_requires_tls() {
        return;
    }
    let Some((cert, key)) = client_certificate() else {
        assert!(
            std::env::var_os(REQUIRE_TLS_ENV).is_none() || !postgres_server_url().contains("localhost"),
            "the throwaway cluster of scripts/postgres.sh names its client certificate"
        );
        eprintln!("note: no client certificate for the test server; skipping the client certificate story");
        return;
    };
    let db = TestDatabase::new(Backend::Postgres).await;
    // The role that signs in with its certificate only (`cert` in pg_hba.conf).
    let as_cert_role = db.url().replacen("postgres://postgres@", "postgres://hivegate_cert@", 1);
    assert_ne!(as_cert_role, db.url(), "the test database's URL names the postgres role");

    // Without the certificate the server refuses the role: start-up stops and says so.
    let mut config = test_config(&db);
    config.database_url = hivegate::config::DatabaseUrl::new(&as_cert_role);
    config.database.startup_timeout_secs = 0;
    if hivegate::app::Application::build(config).await.is_ok() {
        panic!("the role that needs a client certificate signed in without one");
    }

    // With `sslcert` and `sslkey` it signs in, migrates and serves.
    let url = format!("{as_cert_role}&sslcert={cert}&sslkey={key}");
    let mut config = test_config(&db);
    config.database_url = hivegate::config::DatabaseUrl::new(&url);
    let app = hivegate::app::Application::build(config).await.expect("signed in with the client certificate");
    let store = app.state().store.clone();
    store.ping().await.expect("the store answers");
    let rows: Vec<(String, bool)> = sqlx::query_as(
        "select a.usename::text, s.ssl from pg_stat_activity a join pg_stat_ssl s using (pid) \
         where a.datname = $1 and a.application_name = 'hivegate'",
    )
    .bind(db.postgres_name().unwrap())
    .fetch_all(&mut db.maintenance_connection().await)
    .await
    .unwrap();
    assert!(!rows.is_empty() && rows.iter().all(|(user, ssl)| user == "hivegate_cert" && *ssl), "{rows:?}");
}
