//! The composition root: [`Application::build`] wires store, bus, caches and the HTTP server;
//! [`Application::run_until_stopped`] serves until SIGTERM/SIGINT and then drains.
//!
//! [`Application::build`]: crate::app::Application::build
//! [`Application::run_until_stopped`]: crate::app::Application::run_until_stopped

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::audit::{AuditTask, AuditWriter};
use crate::config::Config;
use crate::domain::key::random_token;
use crate::domain::{KeyDigest, KeyHasher};
use crate::events::LocalBus;
use crate::events::postgres::PgBus;
use crate::events::retention::{Pruner, Retention};
use crate::guard::{Guard, Reclaimer};
use crate::http::admission::Admission;
use crate::http::auth::{KeyCache, OperatorToken};
use crate::http::connection::Settings;
use crate::http::serve::Listener;
use crate::http::threads::ConnectionThreads;
use crate::mcp::session::Sessions;
use crate::mcp::stream::hub::Hub;
use crate::metrics::{Levels, ListenerName, Metrics};
use crate::registry::cache::RegistryCache;
use crate::registry::cursor::CursorCodec;
use crate::state::{AppState, Shared};
use crate::store::postgres::PgStore;
use crate::store::sqlite::SqliteStore;
use crate::store::{Store, StoreError, setting};
use crate::task::AbortOnDrop;
use crate::tls::{ServerTls, TlsHandshake};

/// The generated operator token's prefix, so it is never mistaken for an agent key.
pub(crate) const OPERATOR_TOKEN_PREFIX: &str = "hgo_";

pub struct Application {
    listener: TcpListener,
    /// The public listener's TLS handshakes, with `[tls]`.
    tls: Option<TlsHandshake>,
    address: SocketAddr,
    /// The operator endpoints' own listener (`http.operator_listen`), when configured.
    operator: Option<(TcpListener, SocketAddr)>,
    state: AppState,
    /// The PostgreSQL listener, running for as long as the application serves.
    pg_bus: Option<PgBus>,
    /// Prunes old events and expired sessions for as long as the application lives.
    _pruner: Pruner,
    /// Forgets idle rate-limit state for as long as the application lives.
    _reclaimer: Reclaimer,
    /// Re-reads a stored operator token digest, so a rotation reaches this replica.
    _operator_refresh: AbortOnDrop,
    /// Prunes the built-in authorization server's expired codes and tokens and idle clients, when it runs.
    _oauth_pruner: Option<AbortOnDrop>,
    /// Writes which keys were used, every few seconds (and once more at shutdown).
    _key_uses: AbortOnDrop,
    /// Writes MCP audit records; stopped (flushed) after the server drained.
    audit_task: AuditTask,
}

impl Application {
    /// Connects to the database (retrying while it is unreachable), applies migrations, loads the
    /// shared secrets, starts the bus and binds the listen address.
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        // The certificate first: a missing or broken file is reported at once, not after the database.
        let tls = if config.tls.enabled() { Some(ServerTls::load(&config.tls)?) } else { None };
        let bus = LocalBus::new();
        let metrics = Arc::new(Metrics::new());
        let store = connect_with_retry(&config, bus.clone()).await?;
        store.migrate().await.context("applying database migrations")?;
        let pg_bus = if config.database_url.is_postgres() {
            Some(PgBus::start(config.database_url.expose(), bus.clone()).await.context("starting the event listener")?)
        } else {
            None
        };

        let cursor_key = store.init_setting(setting::CURSOR_KEY, &hex::encode(rand::random::<[u8; 32]>())).await?;
        let cursors = CursorCodec::from_hex(&cursor_key).context("the stored cursor key is corrupt")?;
        let hasher = KeyHasher::new(config.keys.pepper.clone());
        let operator = operator_token(&config, store.as_ref(), &hasher).await?;

        let keys = Arc::new(KeyCache::new(store.clone(), hasher.clone()));
        bus.add_hook(keys.clone());
        let registry = RegistryCache::with_limits(
            store.clone(),
            usize::try_from(config.cache.budget()).unwrap_or(usize::MAX),
            usize::try_from(config.cache.max_content_bytes).unwrap_or(usize::MAX),
        );
        let registry = Arc::new(registry.counting_lookups_in(metrics.cache_lookups.clone()));
        bus.add_hook(registry.clone());
        let idle = Duration::from_secs(config.sessions.idle_timeout_secs);
        let sessions = Arc::new(Sessions::new(store.clone(), idle, config.sessions.max_per_key));
        bus.add_hook(sessions.clone());
        // Last: the hub wakes streams, which then read caches the hooks before it have already updated.
        let hub = Arc::new(Hub::new(store.clone(), &config.streams, metrics.clone()));
        bus.add_hook(hub.clone());
        let (audit, audit_task) = AuditWriter::start(store.clone(), &config.audit);
        metrics.register_levels(Levels {
            hub: hub.clone(),
            registry: registry.clone(),
            audit: audit.stats().clone(),
            store: store.clone(),
        });
        let pruner =
            Pruner::start(store.clone(), Retention::from_config(&config.events, &config.sessions, &config.audit));

        let guard = Arc::new(Guard::new(&config.rate_limits));
        let reclaimer = guard.start_reclaiming();

        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("binding the listen address {}", config.listen))?;
        let address = listener.local_addr()?;
        let tls = tls.map(|tls| tls.start(metrics.clone()));
        let operator_listener = match config.http.operator_listen {
            Some(operator_listen) => {
                let listener = TcpListener::bind(operator_listen)
                    .await
                    .with_context(|| format!("binding the operator listen address {operator_listen}"))?;
                let address = listener.local_addr()?;
                Some((listener, address))
            }
            None => None,
        };
        let renders = Arc::new(crate::mcp::render_gate::RenderGate::new(
            config.limits.max_renders_per_agent,
            config.limits.max_renders,
        ));
        // Without `http.public_url`, the bound address: fit for local use only.
        let public_url = config.http.public_url.clone().unwrap_or_else(|| {
            let scheme = if config.tls.enabled() { "https" } else { "http" };
            format!("{scheme}://{address}")
        });
        let oauth = Arc::new(crate::oauth::OAuth::new(&config.oauth, &public_url, store.clone()));
        // After the hub: its cache of granted subjects is nothing streams read.
        bus.add_hook(oauth.clone());
        // `oauth.mode = "builtin"`: the built-in authorization server, whose tokens the MCP endpoint takes.
        let oauth_server = if config.oauth.mode == crate::oauth::config::Mode::Builtin {
            let server = crate::oauth::server::BuiltinServer::start(
                &config.oauth.builtin,
                &public_url,
                store.clone(),
                hasher.clone(),
            )
            .await
            .context("starting the built-in authorization server")?;
            oauth.set_builtin(server.clone());
            Some(server)
        } else {
            None
        };
        let oauth_pruner = oauth_server.as_ref().map(|server| server.start_pruning());
        let console = Arc::new(crate::console::session::ConsoleSessions::new(std::time::Duration::from_secs(
            config.http.console_idle_timeout_secs,
        )));
        let state = AppState::new(Shared {
            renders,
            oauth,
            console,
            config: Arc::new(config),
            store,
            bus,
            keys,
            operator: Arc::new(operator),
            oauth_server,
            cursors: Arc::new(cursors),
            hasher,
            registry,
            sessions,
            hub,
            audit,
            metrics,
            guard,
        });
        let operator_refresh = {
            let (operator, store) = (state.operator.clone(), state.store.clone());
            AbortOnDrop::spawn(async move {
                let mut every = tokio::time::interval(crate::http::auth::OPERATOR_REFRESH);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    every.tick().await;
                    operator.refresh(store.as_ref()).await;
                }
            })
        };
        let key_uses = {
            let keys = state.keys.clone();
            AbortOnDrop::spawn(async move {
                let mut every = tokio::time::interval(crate::http::auth::TOUCH_WRITE_INTERVAL);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    every.tick().await;
                    keys.write_uses().await;
                }
            })
        };
        Ok(Self {
            listener,
            tls,
            address,
            operator: operator_listener,
            state,
            pg_bus,
            _pruner: pruner,
            _reclaimer: reclaimer,
            _operator_refresh: operator_refresh,
            _oauth_pruner: oauth_pruner,
            _key_uses: key_uses,
            audit_task,
        })
    }

    pub fn port(&self) -> u16 {
        self.address.port()
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The operator listener's address, when `http.operator_listen` is set.
    pub fn operator_address(&self) -> Option<SocketAddr> {
        self.operator.as_ref().map(|(_, address)| *address)
    }

    /// The shared state, to drive [`crate::http::routes`] in-process without a socket (the instruction-count
    /// benchmark, bench/instructions).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until SIGTERM or SIGINT, then drains.
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        self.run_with_shutdown(shutdown_signal()).await
    }

    /// Serves until `shutdown` completes; then stops accepting (on every listener), closes every SSE stream
    /// (so that clients reconnect to another replica), gives in-flight requests the configured grace period
    /// and returns.
    pub async fn run_with_shutdown(self, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
        let config = self.state.config.clone();
        let grace = Duration::from_millis(config.http.shutdown_grace_ms);
        let tls = self.tls.is_some();
        tracing::info!(address = %self.address, tls, backend = self.state.store.backend(), "listening");
        let listeners = if self.operator.is_some() { 2 } else { 1 };
        crate::http::serve::check_descriptor_limit(u64::from(config.http.max_connections) * listeners);

        let (stopping_tx, stopping) = tokio::sync::watch::channel(false);
        let hub = self.state.hub.clone();
        let signal = async move {
            shutdown.await;
            tracing::info!(
                streams = hub.open_streams(),
                "shutting down: no new connections, closing streams, draining in-flight requests"
            );
            hub.close();
            let _ = stopping_tx.send(true);
        };
        let stopped = |mut stopping: tokio::sync::watch::Receiver<bool>| async move {
            let _ = stopping.wait_for(|stopping| *stopping).await;
        };
        // Both listeners' connections are served on these threads; they stop when this function returns,
        // after the last audit records are written (see the module's docs).
        let threads = Arc::new(ConnectionThreads::start(config.http.threads as usize));
        tracing::debug!(threads = threads.len(), "connection threads started");
        let listener = |name: &'static str,
                        tcp: TcpListener,
                        tls: Option<TlsHandshake>,
                        routes: crate::http::Routes| {
            let http = &config.http;
            let trusted = config.rate_limits.trusted_proxies.clone();
            let metrics = self.state.metrics.clone();
            let admission =
                Admission::new(name, http.max_connections, http.max_connections_per_address, trusted, metrics.clone());
            let settings = Settings::new(
                routes,
                Duration::from_millis(http.header_read_timeout_ms),
                Duration::from_millis(http.idle_timeout_ms),
                metrics,
                name,
            );
            Listener { tcp, tls, admission, settings: Arc::new(settings), threads: threads.clone() }
        };
        let public =
            listener(ListenerName::Public.as_str(), self.listener, self.tls, crate::http::routes(self.state.clone()));
        let public = crate::http::serve::serve(public, stopped(stopping.clone()));
        let operator = async {
            if let Some((tcp, address)) = self.operator {
                tracing::info!(%address, "operator endpoints listening");
                let operator = listener(
                    ListenerName::Operator.as_str(),
                    tcp,
                    None,
                    crate::http::operator_routes(self.state.clone()),
                );
                crate::http::serve::serve(operator, stopped(stopping.clone())).await;
            }
        };
        let servers = async { tokio::join!(public, operator) };
        // Drives the shutdown signal; once it came, the grace period starts.
        let deadline = async move {
            signal.await;
            tokio::time::sleep(grace).await;
        };
        tokio::select! {
            _ = servers => {}
            () = deadline => tracing::warn!(grace_ms = grace.as_millis() as u64, "shutdown grace period over; closing remaining connections"),
        }
        // Every request has ended: write the audit records still queued.
        self.audit_task.stop(grace).await;
        self.state.keys.write_uses().await;
        // Leave the live replicas, so that other replicas' changes stop waiting for this one at once.
        if let Some(pg_bus) = self.pg_bus {
            pg_bus.stop().await;
        }
        tracing::info!("stopped");
        Ok(())
    }
}

/// Connects to the configured database, retrying with backoff while it is unreachable, for at most
/// `database.startup_timeout_secs`; each failed attempt is logged so operators see why start-up waits.
pub(crate) async fn connect_with_retry(config: &Config, bus: LocalBus) -> anyhow::Result<Arc<dyn Store>> {
    let url = &config.database_url;
    let give_up = tokio::time::Instant::now() + Duration::from_secs(config.database.startup_timeout_secs);
    let mut backoff = Duration::from_millis(200);
    loop {
        let quotas = config.limits.quotas();
        let attempt: Result<Arc<dyn Store>, StoreError> = if url.is_postgres() {
            PgStore::connect(url.expose(), &config.database)
                .await
                .map(|s| Arc::new(s.with_quotas(quotas)) as Arc<dyn Store>)
        } else {
            SqliteStore::connect(url.expose(), &config.database, bus.clone())
                .await
                .map(|s| Arc::new(s.with_quotas(quotas)) as Arc<dyn Store>)
        };
        match attempt {
            Ok(store) => return Ok(store),
            Err(StoreError::Unavailable(error)) if tokio::time::Instant::now() + backoff < give_up => {
                tracing::warn!(database = %url, %error, retry_in_ms = backoff.as_millis() as u64, "database unreachable; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(error) => return Err(anyhow::Error::new(error).context(format!("connecting to the database {url}"))),
        }
    }
}

/// The configured operator token, or the stored one; on the very first start of a database without a
/// configured token, generates one, stores its digest and prints it once on stderr.
async fn operator_token(config: &Config, store: &dyn Store, hasher: &KeyHasher) -> anyhow::Result<OperatorToken> {
    if let Some(token) = &config.admin_token {
        return Ok(OperatorToken::Configured(token.clone()));
    }
    let token = random_token(OPERATOR_TOKEN_PREFIX);
    let digest = hasher.digest(&token).to_hex();
    // Several replicas may start at once: the first insert wins, and only its process prints.
    let stored = store.init_setting(setting::OPERATOR_TOKEN_DIGEST, &digest).await?;
    if stored == digest {
        eprintln!("hivegate: generated operator token (shown once; keep it, or set HIVEGATE_ADMIN_TOKEN): {token}");
    }
    let digest = KeyDigest::from_hex(&stored).context("the stored operator token digest is corrupt")?;
    Ok(OperatorToken::stored(hasher.clone(), digest))
}

/// Completes on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {},
        () = terminate => {},
    }
}
