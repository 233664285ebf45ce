//! The test harness: a fresh database per test (a SQLite file or a PostgreSQL database), the application
//! served on port 0 in this process ([`spawn_app`], [`spawn_app_with`] for other settings, [`spawn_app_on`] for
//! another replica on the same database) or the real binary in a child process ([`HivegateProcess`]), and
//! request helpers ([`Api`]) and assertions that check the contract's shapes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};

/// The operator token every test application is configured with.
pub const OPERATOR_TOKEN: &str = "test-operator-token-0123456789abcdef";
/// The environment variable naming the PostgreSQL server tests create their databases on.
pub const POSTGRES_URL_ENV: &str = "HIVEGATE_TEST_POSTGRES_URL";
/// How long a test waits for something that happens asynchronously before it fails.
pub const DEADLINE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

// ---------------------------------------------------------------------------------------------------------
// Databases
// ---------------------------------------------------------------------------------------------------------

/// A database that exists for one test: a temporary SQLite file, or a PostgreSQL database with a random name
/// on the server named by `HIVEGATE_TEST_POSTGRES_URL`. Removed (dropped) when the value is dropped.
pub struct TestDatabase {
    url: String,
    cleanup: Cleanup,
}

enum Cleanup {
    SqliteFile(PathBuf),
    PostgresDatabase { maintenance_url: String, name: String },
}

impl TestDatabase {
    pub async fn new(backend: Backend) -> Self {
        match backend {
            Backend::Sqlite => {
                let path = std::env::temp_dir().join(format!("hivegate-test-{}.db", uuid::Uuid::new_v4().simple()));
                let url = format!("sqlite://{}?mode=rwc", path.display());
                Self { url, cleanup: Cleanup::SqliteFile(path) }
            }
            Backend::Postgres => {
                let maintenance_url = postgres_server_url();
                let name = format!("hgt_{}", uuid::Uuid::new_v4().simple());
                let mut conn = PgConnection::connect(&maintenance_url)
                    .await
                    .unwrap_or_else(|e| panic!("cannot connect to {POSTGRES_URL_ENV} ({maintenance_url}): {e}"));
                // A linguistic (ICU) collation where the server has one, so that any list ordered without
                // `collate "C"` shows up as not bytewise; the plain default otherwise.
                let icu = format!("create database {name} locale_provider icu icu_locale 'en-US' template template0");
                if let Err(error) = sqlx::query(sqlx::AssertSqlSafe(icu)).execute(&mut conn).await {
                    eprintln!("note: no ICU collation for the test database ({error}); using the server default");
                    sqlx::query(sqlx::AssertSqlSafe(format!("create database {name}")))
                        .execute(&mut conn)
                        .await
                        .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
                }
                let _ = conn.close().await;
                let url = with_database(&maintenance_url, &name);
                Self { url, cleanup: Cleanup::PostgresDatabase { maintenance_url, name } }
            }
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The PostgreSQL database's name (`None` for SQLite).
    pub fn postgres_name(&self) -> Option<&str> {
        match &self.cleanup {
            Cleanup::PostgresDatabase { name, .. } => Some(name),
            Cleanup::SqliteFile(_) => None,
        }
    }

    /// Runs `sql` on the test database directly (to tamper with what hivegate wrote).
    pub async fn execute(&self, sql: &'static str) {
        match &self.cleanup {
            Cleanup::PostgresDatabase { .. } => {
                let mut conn = PgConnection::connect(&self.url).await.expect("test database connection");
                sqlx::query(sql).execute(&mut conn).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
                let _ = conn.close().await;
            }
            Cleanup::SqliteFile(_) => {
                let mut conn = sqlx::SqliteConnection::connect(&self.url).await.expect("test database connection");
                sqlx::query(sql).execute(&mut conn).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
                let _ = conn.close().await;
            }
        }
    }

    /// The single number `sql` selects from the test database.
    pub async fn count(&self, sql: &'static str) -> i64 {
        match &self.cleanup {
            Cleanup::PostgresDatabase { .. } => {
                let mut conn = PgConnection::connect(&self.url).await.expect("test database connection");
                sqlx::query_scalar(sql).fetch_one(&mut conn).await.unwrap_or_else(|e| panic!("{sql}: {e}"))
            }
            Cleanup::SqliteFile(_) => {
                let mut conn = sqlx::SqliteConnection::connect(&self.url).await.expect("test database connection");
                sqlx::query_scalar(sql).fetch_one(&mut conn).await.unwrap_or_else(|e| panic!("{sql}: {e}"))
            }
        }
    }

    /// A connection to the PostgreSQL server outside the test database, for inspecting and disturbing it.
    pub async fn maintenance_connection(&self) -> PgConnection {
        match &self.cleanup {
            Cleanup::PostgresDatabase { maintenance_url, .. } => {
                PgConnection::connect(maintenance_url).await.expect("maintenance connection")
            }
            Cleanup::SqliteFile(_) => panic!("a SQLite test database has no maintenance connection"),
        }
    }
}

/// An open transaction on the test database that keeps hivegate's writes waiting until it is released: the
/// database's write lock (SQLite), or exclusive locks on `agent` and `session`, which reads pass (PostgreSQL).
pub enum WriteLock {
    Sqlite(sqlx::SqliteConnection),
    Postgres(PgConnection),
}

impl TestDatabase {
    /// Takes the [`WriteLock`]; it is held once this returns.
    pub async fn lock_writes(&self) -> WriteLock {
        match &self.cleanup {
            Cleanup::PostgresDatabase { .. } => {
                let mut conn = PgConnection::connect(&self.url).await.expect("test database connection");
                sqlx::raw_sql("begin; lock table agent, session in exclusive mode").execute(&mut conn).await.unwrap();
                WriteLock::Postgres(conn)
            }
            Cleanup::SqliteFile(_) => {
                let mut conn = sqlx::SqliteConnection::connect(&self.url).await.expect("test database connection");
                sqlx::raw_sql("begin immediate").execute(&mut conn).await.unwrap();
                WriteLock::Sqlite(conn)
            }
        }
    }
}

impl WriteLock {
    /// Ends the transaction (writing nothing): the waiting writes go on.
    pub async fn release(self) {
        match self {
            WriteLock::Postgres(mut conn) => {
                sqlx::raw_sql("rollback").execute(&mut conn).await.unwrap();
                let _ = conn.close().await;
            }
            WriteLock::Sqlite(mut conn) => {
                sqlx::raw_sql("rollback").execute(&mut conn).await.unwrap();
                let _ = conn.close().await;
            }
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        match &self.cleanup {
            Cleanup::SqliteFile(path) => {
                for suffix in ["", "-wal", "-shm", "-journal"] {
                    let mut file = path.clone().into_os_string();
                    file.push(suffix);
                    let _ = std::fs::remove_file(file);
                }
            }
            Cleanup::PostgresDatabase { maintenance_url, name } => {
                // Drop runs outside any async context we could await in: do it on a thread of its own.
                let (url, sql) = (maintenance_url.clone(), format!("drop database if exists {name} with (force)"));
                let dropped = std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                    runtime.block_on(async move {
                        let mut conn = PgConnection::connect(&url).await?;
                        sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut conn).await?;
                        conn.close().await
                    })
                })
                .join();
                if let Ok(Err(error)) = dropped {
                    eprintln!("warning: could not drop test database {name}: {error}");
                }
            }
        }
    }
}

/// The PostgreSQL server tests run against. Its absence is a failure: the suite never skips PostgreSQL.
pub fn postgres_server_url() -> String {
    match std::env::var(POSTGRES_URL_ENV) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "{POSTGRES_URL_ENV} is not set: the PostgreSQL half of the suite needs a server. Run the suite with \
             `scripts/test`, which starts a throwaway PostgreSQL, or set {POSTGRES_URL_ENV}=postgres://USER@HOST:PORT/DB"
        ),
    }
}

/// `url` with its database (path) replaced by `database`; the query string is kept.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{base}/{database}?{query}"),
        None => format!("{base}/{database}"),
    }
}

// ---------------------------------------------------------------------------------------------------------
// The application in this process
// ---------------------------------------------------------------------------------------------------------

/// The application served on an ephemeral port of this process, on a database of its own.
pub struct TestApp {
    /// The public listener's base URL (`https://` with `[tls]`).
    pub address: String,
    /// The operator listener's base URL, when `http.operator_listen` is set.
    pub operator: Option<String>,
    pub client: reqwest::Client,
    pub db: Arc<TestDatabase>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

/// Starts the application on a fresh database of `backend`.
pub async fn spawn_app(backend: Backend) -> TestApp {
    let db = Arc::new(TestDatabase::new(backend).await);
    spawn_app_on(db).await
}

/// Starts the application on a fresh database of `backend`, with `configure` applied to its configuration.
pub async fn spawn_app_with(backend: Backend, configure: impl FnOnce(&mut hivegate::config::Config)) -> TestApp {
    let db = Arc::new(TestDatabase::new(backend).await);
    start_app(db, configure).await
}

/// Starts another application (replica) on an existing test database.
pub async fn spawn_app_on(db: Arc<TestDatabase>) -> TestApp {
    start_app(db, |_| {}).await
}

/// Starts another application (replica) on an existing test database, with `configure` applied to its
/// configuration (as the first one's, for a limit every replica must apply alike).
pub async fn spawn_app_on_with(
    db: Arc<TestDatabase>,
    configure: impl FnOnce(&mut hivegate::config::Config),
) -> TestApp {
    start_app(db, configure).await
}

/// The configuration test applications start from: a fresh database's URL, listening on port 0 of loopback,
/// [`OPERATOR_TOKEN`], rate limits far above what the stories send.
pub fn test_config(db: &TestDatabase) -> hivegate::config::Config {
    let mut config = hivegate::config::Config::default();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.database_url = hivegate::config::DatabaseUrl::new(db.url());
    config.admin_token = Some(secrecy::SecretString::from(OPERATOR_TOKEN));
    // Stories send hundreds of requests a second from one key and many 401s from one address: limits far
    // above that (still applied, so every answer goes through the limiters). `rate_limits.rs` sets its own.
    config.rate_limits.agent_requests_per_second = 1_000_000;
    config.rate_limits.agent_burst = 1_000_000;
    config.rate_limits.key_requests_per_second = 1_000_000;
    config.rate_limits.key_burst = 1_000_000;
    config.rate_limits.admin_requests_per_second = 1_000_000;
    config.rate_limits.admin_burst = 1_000_000;
    config.rate_limits.failed_auth_attempts = 1_000_000;
    // Two connection threads, as on the machines the suite runs on, however many CPUs this one has: tests run
    // side by side, each with an application of its own.
    config.http.threads = 2;
    config
}

async fn start_app(db: Arc<TestDatabase>, configure: impl FnOnce(&mut hivegate::config::Config)) -> TestApp {
    let mut config = test_config(&db);
    configure(&mut config);
    let scheme = if config.tls.enabled() { "https" } else { "http" };
    let app = hivegate::app::Application::build(config).await.expect("the application builds");
    let port = app.port();
    let operator = app.operator_address().map(|address| format!("http://{address}"));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_with_shutdown(async move {
        let _ = rx.await;
    }));
    TestApp {
        address: format!("{scheme}://127.0.0.1:{port}"),
        operator,
        client: http_client(),
        db,
        shutdown: Some(tx),
        server: Some(server),
    }
}

impl TestApp {
    /// Shuts the application down as SIGTERM would and waits (at most [`DEADLINE`]) until it has stopped.
    pub async fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            let outcome = tokio::time::timeout(DEADLINE, server).await.expect("the application stops in time");
            outcome.expect("the server task").expect("the application stops cleanly");
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// The request helpers, shared by the in-process application and the child processes.
pub trait Api {
    fn base(&self) -> &str;
    fn http(&self) -> &reqwest::Client;
    fn operator_token(&self) -> &str {
        OPERATOR_TOKEN
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base(), path)
    }

    /// A request without credentials.
    fn anon(&self, method: Method, path: &str) -> RequestBuilder {
        self.http().request(method, self.url(path))
    }

    /// A request with the operator token.
    fn op(&self, method: Method, path: &str) -> RequestBuilder {
        self.anon(method, path).bearer_auth(self.operator_token())
    }

    /// A request with an agent key in `X-Agent-API-Key`.
    fn with_key(&self, method: Method, path: &str, key: &str) -> RequestBuilder {
        self.anon(method, path).header("x-agent-api-key", key)
    }

    /// Creates agent `id` as the operator; panics unless 201.
    async fn create_agent(&self, id: &str) -> Value {
        let response = self
            .op(Method::POST, "/admin/v1/agents")
            .json(&json!({"id": id, "name": format!("Agent {id}")}))
            .send()
            .await
            .unwrap();
        expect_json(response, StatusCode::CREATED).await
    }

    /// Issues a key for `agent` with `scopes` as the operator; panics unless 201.
    async fn issue_key(&self, agent: &str, scopes: &[&str]) -> IssuedKey {
        let response = self
            .op(Method::POST, &format!("/admin/v1/agents/{agent}/keys"))
            .json(&json!({"name": "test", "scopes": scopes}))
            .send()
            .await
            .unwrap();
        let body = expect_json(response, StatusCode::CREATED).await;
        IssuedKey { id: str_of(&body, "id").to_owned(), key: str_of(&body, "key").to_owned() }
    }

    /// Issues a key for `agent` as the operator with `body` (`scopes`, `expiresAt`, `rateLimit`...); panics
    /// unless 201. Returns the created key as the answer shows it.
    async fn issue_key_with(&self, agent: &str, body: &Value) -> Value {
        let response =
            self.op(Method::POST, &format!("/admin/v1/agents/{agent}/keys")).json(body).send().await.unwrap();
        expect_json(response, StatusCode::CREATED).await
    }

    /// Revokes a key as the operator; panics unless 204.
    async fn revoke_key(&self, agent: &str, key_id: &str) {
        let response =
            self.op(Method::DELETE, &format!("/admin/v1/agents/{agent}/keys/{key_id}")).send().await.unwrap();
        expect_status(response, StatusCode::NO_CONTENT).await;
    }

    /// `PUT .../resources` as the operator, answered as it comes.
    async fn put_resource(&self, agent: &str, resource: &Value) -> Response {
        self.op(Method::PUT, &format!("/admin/v1/agents/{agent}/resources")).json(resource).send().await.unwrap()
    }

    /// Stores a text resource as the operator; panics unless 201 or 200.
    async fn put_text(&self, agent: &str, uri: &str, text: &str) -> Value {
        let response = self.put_resource(agent, &json!({"uri": uri, "name": uri, "text": text})).await;
        let status = response.status();
        assert!(
            status == StatusCode::CREATED || status == StatusCode::OK,
            "PUT resource {uri}: expected 201 or 200, got {status}: {}",
            response.text().await.unwrap_or_default()
        );
        response.json().await.unwrap()
    }

    /// `GET .../resources/content?uri=` as the operator.
    async fn get_content(&self, agent: &str, uri: &str) -> Response {
        self.op(Method::GET, &format!("/admin/v1/agents/{agent}/resources/content"))
            .query(&[("uri", uri)])
            .send()
            .await
            .unwrap()
    }

    /// Every item of a list, following `nextCursor` with `limit` per page; checks every page's shape.
    async fn list_all(&self, path: &str, limit: Option<u32>) -> Vec<Value> {
        self.list_pages(path, limit).await.into_iter().flatten().collect()
    }

    /// The pages of a list, following `nextCursor` with `limit` per page; checks every page's shape.
    async fn list_pages(&self, path: &str, limit: Option<u32>) -> Vec<Vec<Value>> {
        list_pages_with(
            |cursor| {
                let mut request = self.op(Method::GET, path);
                if let Some(limit) = limit {
                    request = request.query(&[("limit", limit.to_string())]);
                }
                if let Some(cursor) = cursor {
                    request = request.query(&[("cursor", cursor)]);
                }
                request
            },
            limit,
        )
        .await
    }
}

impl Api for TestApp {
    fn base(&self) -> &str {
        &self.address
    }

    fn http(&self) -> &reqwest::Client {
        &self.client
    }
}

/// Walks a paginated list: `request(cursor)` builds the request for a page. Every page but the last must be
/// full (`limit` items, or 100 by default) and carry `nextCursor`; the last page must not carry it, and only
/// the first page may be empty (a cursor never leads to an empty page).
pub async fn list_pages_with(
    request: impl Fn(Option<String>) -> RequestBuilder,
    limit: Option<u32>,
) -> Vec<Vec<Value>> {
    let page_size = limit.unwrap_or(100) as usize;
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = pages.len();
        assert!(page < 10_000, "pagination does not end");
        let response = request(cursor.clone()).send().await.unwrap();
        let body = expect_json(response, StatusCode::OK).await;
        let items = body["items"].as_array().unwrap_or_else(|| panic!("a list without `items`: {body}")).clone();
        assert!(items.len() <= page_size, "page {page} holds {} items, limit {page_size}", items.len());
        assert!(page == 0 || !items.is_empty(), "page {page} is empty: the page before announced a next page");
        let next = body.get("nextCursor").cloned();
        let full = items.len() == page_size;
        pages.push(items);
        match next {
            None => return pages,
            Some(Value::String(next)) => {
                assert!(full, "page {page} is not full but announces a next page");
                assert!(!next.is_empty(), "nextCursor is empty on page {page}");
                cursor = Some(next);
            }
            Some(other) => panic!("nextCursor must be a string or absent, got {other}"),
        }
    }
}

/// A key as the response creating it shows it.
#[derive(Debug, Clone)]
pub struct IssuedKey {
    pub id: String,
    pub key: String,
}

// ---------------------------------------------------------------------------------------------------------
// Response assertions
// ---------------------------------------------------------------------------------------------------------

/// Asserts the status and returns the JSON body (which must be `application/json`).
pub async fn expect_json(response: Response, status: StatusCode) -> Value {
    let got = response.status();
    let url = response.url().clone();
    let content_type = content_type(&response);
    let text = response.text().await.unwrap();
    assert_eq!(got, status, "{url}: expected {status}, got {got}: {text}");
    assert!(
        content_type.starts_with("application/json"),
        "{url}: expected application/json, got {content_type:?}: {text}"
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: body is not JSON ({e}): {text}"))
}

/// Asserts the status and returns the body as text.
pub async fn expect_status(response: Response, status: StatusCode) -> String {
    let got = response.status();
    let url = response.url().clone();
    let text = response.text().await.unwrap();
    assert_eq!(got, status, "{url}: expected {status}, got {got}: {text}");
    text
}

/// Asserts an RFC 9457 problem with `status`: `application/problem+json`, `type`/`title`/`detail` strings
/// and a `status` member equal to the HTTP status. Returns the problem.
pub async fn expect_problem(response: Response, status: StatusCode) -> Value {
    let got = response.status();
    let url = response.url().clone();
    let content_type = content_type(&response);
    let text = response.text().await.unwrap();
    assert_eq!(got, status, "{url}: expected {status}, got {got}: {text}");
    check_problem(&url, &content_type, status, &text)
}

/// Like [`expect_problem`] for any of `statuses`, where the contract allows more than one.
pub async fn expect_problem_in(response: Response, statuses: &[StatusCode]) -> Value {
    let got = response.status();
    let url = response.url().clone();
    let content_type = content_type(&response);
    let text = response.text().await.unwrap();
    assert!(statuses.contains(&got), "{url}: expected one of {statuses:?}, got {got}: {text}");
    check_problem(&url, &content_type, got, &text)
}

fn check_problem(url: &reqwest::Url, content_type: &str, status: StatusCode, text: &str) -> Value {
    assert!(
        content_type.starts_with("application/problem+json"),
        "{url}: an error must be application/problem+json, got {content_type:?}: {text}"
    );
    let problem: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{url}: problem is not JSON ({e}): {text}"));
    for member in ["type", "title", "detail"] {
        assert!(problem[member].is_string(), "{url}: problem member `{member}` must be a string: {problem}");
    }
    assert_eq!(problem["status"], json!(status.as_u16()), "{url}: problem `status` member: {problem}");
    problem
}

pub fn content_type(response: &Response) -> String {
    response.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned()
}

/// The string member `key` of `value`; panics with the value when it is missing.
pub fn str_of<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key].as_str().unwrap_or_else(|| panic!("expected a string member `{key}` in {value}"))
}

/// Whether `member` is absent or null (an optional field that is not set).
pub fn is_unset(value: &Value, member: &str) -> bool {
    value.get(member).is_none_or(Value::is_null)
}

/// Asserts that `value[member]` is an RFC 3339 timestamp in UTC and returns it.
pub fn timestamp(value: &Value, member: &str) -> chrono::DateTime<chrono::Utc> {
    let text = str_of(value, member);
    let parsed = chrono::DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("`{member}` = {text:?} is not RFC 3339 ({e}) in {value}"));
    assert_eq!(parsed.offset().local_minus_utc(), 0, "`{member}` = {text:?} is not in UTC");
    parsed.with_timezone(&chrono::Utc)
}

pub fn base64(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

pub fn unbase64(text: &str) -> Vec<u8> {
    BASE64.decode(text).unwrap_or_else(|e| panic!("not standard base64 ({e}): {text:?}"))
}

/// The `uri` members of list items, in order.
pub fn uris(items: &[Value]) -> Vec<String> {
    items.iter().map(|item| str_of(item, "uri").to_owned()).collect()
}

/// Polls `check` until it returns `Some`, failing after [`DEADLINE`] with `what`.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(started.elapsed() < DEADLINE, "timed out after {DEADLINE:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------------------------
// The real binary in a child process
// ---------------------------------------------------------------------------------------------------------

/// A directory under the system's temporary directory, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> Self {
        let path = std::env::temp_dir().join(format!("hivegate-test-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A port that was free a moment ago (bound on port 0, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A `hivegate` command with a clean environment: no inherited `HIVEGATE_*` variable, the working directory
/// a fresh temporary one (so no `config/hivegate.toml` is picked up), the given database and token.
pub fn hivegate_command(dir: &Path, database_url: &str, admin_token: Option<&str>) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_hivegate"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("HIVEGATE_") {
            command.env_remove(name);
        }
    }
    command.current_dir(dir).env("HIVEGATE_DATABASE_URL", database_url).env("HIVEGATE_LOG__FORMAT", "json");
    if let Some(token) = admin_token {
        command.env("HIVEGATE_ADMIN_TOKEN", token);
    }
    command
}

/// `hivegate serve` in a child process; killed on drop. Its stdout and stderr go to files in its own
/// temporary directory, read with [`HivegateProcess::stdout`] / [`HivegateProcess::stderr`].
pub struct HivegateProcess {
    child: std::process::Child,
    pub address: String,
    pub port: u16,
    pub client: reqwest::Client,
    token: String,
    dir: TempDir,
}

impl HivegateProcess {
    /// Starts `hivegate serve` on a free port and waits until `GET /healthz` answers 200.
    pub async fn start(database_url: &str, admin_token: Option<&str>) -> Self {
        Self::start_with_env(database_url, admin_token, &[]).await
    }

    /// [`HivegateProcess::start`] with extra environment variables (configuration overrides).
    pub async fn start_with_env(database_url: &str, admin_token: Option<&str>, env: &[(&str, &str)]) -> Self {
        Self::start_with_client(database_url, admin_token, env, http_client()).await
    }

    /// [`HivegateProcess::start_with_env`] with the client requests are sent with; the address is `https://`
    /// when `env` configures TLS (the client must then trust the certificate).
    pub async fn start_with_client(
        database_url: &str,
        admin_token: Option<&str>,
        env: &[(&str, &str)],
        client: reqwest::Client,
    ) -> Self {
        let scheme = if env.iter().any(|(name, _)| *name == "HIVEGATE_TLS__CERT_PATH") { "https" } else { "http" };
        let dir = TempDir::new();
        let port = free_port();
        let stdout = std::fs::File::create(dir.path().join("stdout.log")).unwrap();
        let stderr = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
        let child = hivegate_command(dir.path(), database_url, admin_token)
            .arg("serve")
            .env("HIVEGATE_LISTEN", format!("127.0.0.1:{port}"))
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("the hivegate binary starts");
        let mut process = Self {
            child,
            address: format!("{scheme}://127.0.0.1:{port}"),
            port,
            client,
            token: admin_token.unwrap_or_default().to_owned(),
            dir,
        };
        process.wait_until_healthy().await;
        process
    }

    async fn wait_until_healthy(&mut self) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("hivegate exited with {status} before it was healthy\n{}", self.logs());
            }
            if let Ok(response) = self.client.get(self.url("/healthz")).timeout(Duration::from_secs(2)).send().await
                && response.status() == StatusCode::OK
            {
                return;
            }
            assert!(started.elapsed() < DEADLINE, "hivegate not healthy after {DEADLINE:?}\n{}", self.logs());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Uses `token` as the operator token for [`Api::op`] from now on.
    pub fn set_operator_token(&mut self, token: &str) {
        self.token = token.to_owned();
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stdout.log")).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }

    pub fn logs(&self) -> String {
        format!("--- stdout ---\n{}\n--- stderr ---\n{}", self.stdout(), self.stderr())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits (at most [`DEADLINE`]) for the process to exit; returns its exit status.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let sent = std::process::Command::new("kill").arg("-TERM").arg(self.pid().to_string()).status().unwrap();
        assert!(sent.success(), "kill -TERM failed");
        self.exited().await
    }

    /// Waits (at most [`DEADLINE`]) for the process to exit; returns its exit status.
    pub async fn exited(&mut self) -> std::process::ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(started.elapsed() < DEADLINE, "hivegate still running {DEADLINE:?} after SIGTERM\n{}", self.logs());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Kills the process (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HivegateProcess {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("hivegate on port {} logs:\n{}", self.port, self.logs());
        }
    }
}

impl Api for HivegateProcess {
    fn base(&self) -> &str {
        &self.address
    }

    fn http(&self) -> &reqwest::Client {
        &self.client
    }

    fn operator_token(&self) -> &str {
        &self.token
    }
}

/// Runs `hivegate <args>` to completion (at most [`DEADLINE`]) and returns its status and output.
pub async fn run_hivegate(dir: &Path, database_url: &str, args: &[&str]) -> std::process::Output {
    let mut command = tokio::process::Command::from(hivegate_command(dir, database_url, Some(OPERATOR_TOKEN)));
    command.args(args).stdin(std::process::Stdio::null()).kill_on_drop(true);
    tokio::time::timeout(DEADLINE, command.output())
        .await
        .unwrap_or_else(|_| panic!("hivegate {args:?} did not finish within {DEADLINE:?}"))
        .expect("the hivegate binary runs")
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_name_is_replaced() {
        assert_eq!(with_database("postgres://p@h:5432/postgres", "x"), "postgres://p@h:5432/x");
        assert_eq!(with_database("postgres://p@h:5432", "x"), "postgres://p@h:5432/x");
        assert_eq!(with_database("postgres://p:s@h/db?sslmode=disable", "x"), "postgres://p:s@h/x?sslmode=disable");
    }
}
