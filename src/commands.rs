//! The one-shot commands: everything `hivegate <subcommand>` runs besides `serve` (the database commands,
//! the health probe, `config check`, the admin API client), and [`run`], which dispatches the command line to
//! them or to the gateway ([`crate::app::Application`]).
//!
//! [`run`]: crate::commands::run

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::app::{Application, OPERATOR_TOKEN_PREFIX, connect_with_retry};
use crate::cli::{AdminTokenCommand, AuditCommand, Cli, Command, ConfigCommand, Target};
use crate::client::AdminClient;
use crate::config::{Config, Loaded};
use crate::domain::KeyHasher;
use crate::domain::key::random_token;
use crate::events::LocalBus;
use crate::store::{Store, setting};

/// Runs the command line `cli`: loads the configuration, starts logging (and, for `serve`, trace export),
/// runs the command and reports its failure on stderr. The exit status is 2 when the configuration does not
/// load or logging cannot start, 1 when the command fails.
pub async fn run(cli: Cli) -> ExitCode {
    let loaded = match Config::load_with_sources(cli.config.as_deref()) {
        Ok(loaded) => loaded,
        Err(error) => {
            eprintln!("hivegate: {error}");
            return ExitCode::from(2);
        }
    };
    if let Command::Config { command: ConfigCommand::Check } = cli.command {
        return config_check(&loaded);
    }
    let config = loaded.config;
    // Only the server exports traces; the one-shot commands (the container's healthcheck among them) log.
    let exports = matches!(cli.command, Command::Serve).then_some(&config.telemetry);
    let telemetry = match crate::telemetry::init(&config.log, exports) {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("hivegate: {error:#}");
            return ExitCode::from(2);
        }
    };
    let outcome = match cli.command {
        Command::Serve => serve(config).await,
        Command::Migrate => migrate_only(&config).await,
        Command::Healthcheck => healthcheck(&config).await,
        Command::AdminToken { command: AdminTokenCommand::Rotate } => {
            async {
                require_existing_database(&config)?;
                rotate_operator_token(&config).await
            }
            .await
        }
        Command::Audit { command: AuditCommand::Verify { agent } } => {
            async {
                require_existing_database(&config)?;
                verify_audit(&config, agent.as_deref()).await
            }
            .await
        }
        Command::Audit { command: AuditCommand::Tail { target, agent, method, lines, follow, interval_ms } } => {
            let client = match admin_client(&config, target) {
                Ok(client) => client,
                Err(error) => return fail(&error),
            };
            let mut filter = Vec::new();
            filter.extend(agent.as_deref().map(|agent| ("agent", agent)));
            filter.extend(method.as_deref().map(|method| ("method", method)));
            let follow = follow.then(|| std::time::Duration::from_millis(interval_ms));
            client.audit_tail(&filter, lines, follow).await
        }
        Command::Agent { target, command } => {
            admin(&config, target, |client| async move { client.agent(command).await }).await
        }
        Command::Key { target, command } => {
            admin(&config, target, |client| async move { client.key(command).await }).await
        }
        Command::Resource { target, command } => {
            admin(&config, target, |client| async move { client.resource(command).await }).await
        }
        Command::Template { target, command } => {
            admin(&config, target, |client| async move { client.template(command).await }).await
        }
        Command::Prompt { target, command } => {
            admin(&config, target, |client| async move { client.prompt(command).await }).await
        }
        Command::Config { command: ConfigCommand::Check } => Ok(()),
    };
    let code = match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(&error),
    };
    // Last, so that the spans of the drained requests are exported; the exporter blocks while it flushes.
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    code
}

/// The gateway, until it is stopped.
async fn serve(config: Config) -> anyhow::Result<()> {
    crate::allocator::start_purger().context("starting the allocator's purge thread")?;
    // Room for the registry cache's budget twice over (its entries' estimates leave out the allocator's
    // rounding and the maps' own tables), and 128 MiB for the key cache and the agent rows beside it.
    let budget = usize::try_from(config.cache.budget()).unwrap_or(usize::MAX);
    let arena = budget.saturating_mul(2).saturating_add(128 << 20);
    let huge = crate::allocator::reserve_cache_arena(arena);
    tracing::debug!(bytes = arena, huge_pages = huge, "cache arena");
    Application::build(config).await?.run_until_stopped().await
}

/// Reports a failed command on stderr, once and plain (it is not also logged), and gives its exit status.
fn fail(error: &anyhow::Error) -> ExitCode {
    eprintln!("hivegate: {error:#}");
    ExitCode::FAILURE
}

/// `hivegate config check`: the loaded configuration (already validated) as TOML with its sources. A closed
/// stdout (`| head -1`) ends it quietly.
fn config_check(loaded: &Loaded) -> ExitCode {
    use std::io::Write as _;
    let text = match crate::config::report::render(loaded) {
        Ok(text) => text,
        Err(error) => return fail(&error),
    };
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(error) => fail(&anyhow::Error::new(error).context("writing to stdout")),
    }
}

/// The admin API client for the gateway `target` names.
fn admin_client(config: &Config, target: Target) -> anyhow::Result<AdminClient> {
    use secrecy::ExposeSecret;
    let token = target
        .token
        .or_else(|| config.admin_token.as_ref().map(|token| token.expose_secret().to_owned()))
        .ok_or_else(|| anyhow::anyhow!("no operator token: pass --token or set HIVEGATE_ADMIN_TOKEN"))?;
    let url = target.url.unwrap_or_else(|| admin_url(config));
    AdminClient::new(&url, &token, &config.limits)
}

/// Runs one admin API command against the gateway `target` names and prints its answer.
async fn admin<F, Fut>(config: &Config, target: Target, command: F) -> anyhow::Result<()>
where
    F: FnOnce(AdminClient) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<serde_json::Value>>,
{
    use std::io::Write as _;
    let answer = command(admin_client(config, target)?).await?;
    if !answer.is_null() {
        let mut text = serde_json::to_string_pretty(&answer)?;
        text.push('\n');
        match std::io::stdout().lock().write_all(text.as_bytes()) {
            Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
                return Err(anyhow::Error::new(error).context("writing to stdout"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// `hivegate migrate`: connect, apply migrations, exit.
pub async fn migrate_only(config: &Config) -> anyhow::Result<()> {
    let store = connect_with_retry(config, LocalBus::new()).await?;
    store.migrate().await.context("applying database migrations")?;
    tracing::info!(backend = store.backend(), "migrations applied");
    Ok(())
}

/// `hivegate audit verify`: checks every agent's audit records (or `agent`'s) and prints one line per agent
/// and per broken stream. Fails when anything is broken.
pub async fn verify_audit(config: &Config, agent: Option<&str>) -> anyhow::Result<()> {
    let store = connect_with_retry(config, LocalBus::new()).await?;
    store.migrate().await.context("applying database migrations")?;
    let report = crate::audit::verify::verify(store.as_ref(), agent).await?;
    if report.agents.is_empty() && report.streams.is_empty() {
        let Some(agent) = agent else {
            println!("no audit chain");
            return Ok(());
        };
        anyhow::bail!("{}", no_audit_records(store.as_ref(), agent).await?);
    }
    for (stream_id, problem) in &report.streams {
        println!("BROKEN  stream {stream_id}: {problem}");
    }
    for (agent_id, outcome) in &report.agents {
        match outcome {
            Ok(records) => println!("ok      {agent_id}: {records} records"),
            Err(problem) => println!("BROKEN  {agent_id}: {problem}"),
        }
    }
    let broken = report.broken();
    anyhow::ensure!(broken == 0, "{broken} audit chain(s) broken");
    Ok(())
}

/// Where a client on this machine reaches a server listening on `listen`: loopback for an unspecified
/// address such as `0.0.0.0`.
pub fn reachable(listen: SocketAddr) -> SocketAddr {
    let mut target = listen;
    if target.ip().is_unspecified() {
        target.set_ip(if target.is_ipv4() { [127, 0, 0, 1].into() } else { std::net::Ipv6Addr::LOCALHOST.into() });
    }
    target
}

/// The base URL through which a client on this machine reaches this instance's admin API: the operator
/// listener when there is one, else `listen` (https with `[tls]`).
pub fn admin_url(config: &Config) -> String {
    match config.http.operator_listen {
        Some(operator) => format!("http://{}", reachable(operator)),
        None if config.tls.enabled() => format!("https://{}", reachable(config.listen)),
        None => format!("http://{}", reachable(config.listen)),
    }
}

/// `hivegate healthcheck`: `GET /readyz` on this instance, succeeding on HTTP 200. It asks the operator
/// listener when one is configured, else the listen address (over TLS with `[tls]`); an unspecified
/// address such as `0.0.0.0` is probed on loopback.
pub async fn healthcheck(config: &Config) -> anyhow::Result<()> {
    let (target, tls) = match config.http.operator_listen {
        Some(operator) => (reachable(operator), false),
        None => (reachable(config.listen), config.tls.enabled()),
    };
    let url = format!("{}://{target}/readyz", if tls { "https" } else { "http" });
    // Straight to the instance: no proxy from the environment, no redirect followed.
    let mut client = reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none());
    if tls {
        // This probe talks to its own instance on loopback: see `LoopbackProbe` for why it accepts the
        // presented certificate without checking it.
        let provider = crate::tls::provider();
        let tls = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .context("configuring TLS for the probe")?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(crate::tls::LoopbackProbe(provider)))
            .with_no_client_auth();
        client = client.use_preconfigured_tls(tls);
    }
    let client = client.build().context("building the probe's HTTP client")?;
    let response = tokio::time::timeout(Duration::from_secs(3), client.get(&url).send())
        .await
        .context("no answer within 3 s")?
        // The connection's own error (refused, reset, a failed handshake), not the layers reqwest wraps it in.
        .map_err(|error| anyhow::anyhow!("{}", anyhow::Error::from(error).root_cause()))
        .with_context(|| format!("probing {url}"))?;
    match response.status() {
        reqwest::StatusCode::OK => Ok(()),
        status => anyhow::bail!("/readyz answered {}", status.as_str()),
    }
}

/// Why `audit verify --agent` found nothing: there is no such agent, or it has no audit records.
async fn no_audit_records(store: &dyn Store, agent: &str) -> anyhow::Result<String> {
    let exists = match crate::domain::AgentId::parse(agent) {
        Ok(id) => store.get_agent(&id).await?.is_some(),
        Err(_) => false,
    };
    Ok(if exists {
        format!("agent {agent} has no audit records")
    } else {
        format!("there is no agent {agent} and no audit records for it")
    })
}

/// For the offline commands (`audit verify`, `admin-token rotate`), which must not create a database: fails,
/// naming the file, when the configured SQLite database does not exist (run in the wrong directory, the
/// default `sqlite://hivegate.db?mode=rwc` would otherwise create an empty one). PostgreSQL databases are
/// never created by connecting.
pub fn require_existing_database(config: &Config) -> anyhow::Result<()> {
    use std::str::FromStr as _;
    let url = config.database_url.expose();
    if !config.database_url.is_sqlite() || url.contains(":memory:") || url.contains("mode=memory") {
        return Ok(());
    }
    let options = sqlx::sqlite::SqliteConnectOptions::from_str(url)
        .with_context(|| format!("the database URL {} is not a valid SQLite URL", config.database_url))?;
    let path = options.get_filename();
    anyhow::ensure!(
        path.exists(),
        "the database {} does not exist (database_url {}); run this where the gateway's database is, or set \
         HIVEGATE_DATABASE_URL or --config",
        path.display(),
        config.database_url
    );
    Ok(())
}

/// `hivegate admin-token rotate`: replaces the stored operator token with a new one and prints it, once.
/// Running replicas take it within [`crate::http::auth::OPERATOR_REFRESH`]; the old one stops working.
pub async fn rotate_operator_token(config: &Config) -> anyhow::Result<()> {
    anyhow::ensure!(
        config.admin_token.is_none(),
        "the operator token is configured (HIVEGATE_ADMIN_TOKEN): change it there, there is nothing stored to rotate"
    );
    let store = connect_with_retry(config, LocalBus::new()).await?;
    store.migrate().await.context("applying database migrations")?;
    let hasher = KeyHasher::new(config.keys.pepper.clone());
    let token = random_token(OPERATOR_TOKEN_PREFIX);
    store.put_setting(setting::OPERATOR_TOKEN_DIGEST, &hasher.digest(&token).to_hex()).await?;
    tracing::info!("operator token rotated");
    println!("{token}");
    Ok(())
}
