use std::process::ExitCode;

use clap::Parser;
use hivegate::app::{self, Application};
use hivegate::cli::{AdminTokenCommand, AuditCommand, Cli, Command, ConfigCommand, Target};
use hivegate::client::AdminClient;
use hivegate::config::Config;

/// mimalloc rather than the system allocator: every request allocates and frees many small buffers, and
/// glibc's allocator spent a tenth of the request path's time in `malloc`/`free` (bench/README.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::load(cli.config.as_deref()) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("hivegate: {error}");
            return ExitCode::from(2);
        }
    };
    // Only the server exports traces; the one-shot commands (the container's healthcheck among them) log.
    let exports = matches!(cli.command, Command::Serve).then_some(&config.telemetry);
    let telemetry = match hivegate::telemetry::init(&config.log, exports) {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("hivegate: {error:#}");
            return ExitCode::from(2);
        }
    };
    let outcome = match cli.command {
        Command::Serve => match Application::build(config).await {
            Ok(application) => application.run_until_stopped().await,
            Err(error) => Err(error),
        },
        Command::Migrate => app::migrate_only(&config).await,
        Command::Healthcheck => app::healthcheck(&config).await,
        Command::AdminToken { command: AdminTokenCommand::Rotate } => app::rotate_operator_token(&config).await,
        Command::Audit { command: AuditCommand::Verify { agent } } => {
            app::verify_audit(&config, agent.as_deref()).await
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
        Command::Config { command: ConfigCommand::Check } => {
            println!("{config:#?}");
            Ok(())
        }
    };
    let code = match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            eprintln!("hivegate: {error:#}");
            ExitCode::FAILURE
        }
    };
    // Last, so that the spans of the drained requests are exported; the exporter blocks while it flushes.
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    code
}

/// Runs one admin API command against the gateway `target` names and prints its answer.
async fn admin<F, Fut>(config: &Config, target: Target, command: F) -> anyhow::Result<()>
where
    F: FnOnce(AdminClient) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<serde_json::Value>>,
{
    use secrecy::ExposeSecret;
    let token = target
        .token
        .or_else(|| config.admin_token.as_ref().map(|token| token.expose_secret().to_owned()))
        .ok_or_else(|| anyhow::anyhow!("no operator token: pass --token or set HIVEGATE_ADMIN_TOKEN"))?;
    let url = target.url.unwrap_or_else(|| app::admin_url(config));
    let answer = command(AdminClient::new(&url, &token)?).await?;
    if !answer.is_null() {
        println!("{}", serde_json::to_string_pretty(&answer)?);
    }
    Ok(())
}
