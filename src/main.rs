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

/// mimalloc's options by their index in `mi_option_t` (mimalloc v3, as `libmimalloc-sys` 0.1.49 builds it;
/// the crate exports no constants for these two). A test checks that each index still holds the option's
/// default.
mod allocator {
    use libmimalloc_sys::{mi_option_set, mi_option_t};

    /// Whether arenas commit their memory at once (default 2: on systems that overcommit).
    pub const ARENA_EAGER_COMMIT: mi_option_t = 4;
    /// How long freed memory waits before it is returned to the system, in milliseconds (default 1000).
    pub const PURGE_DELAY: mi_option_t = 15;

    /// Freed memory goes back to the system at once, and arenas made from now on commit memory only when it
    /// is used, so that idle connections and streams cost about what they hold: 28–34 KiB per idle SSE
    /// stream, against 36–45 KiB with mimalloc's defaults (which keep freed memory resident for a second).
    /// The arena mimalloc made before `main` keeps its eager commit; the environment variables
    /// `MIMALLOC_ARENA_EAGER_COMMIT=0` and `MIMALLOC_PURGE_DELAY=0`, which the container image sets, reach
    /// that one too (22–26 KiB). The price is CPU: with mimalloc's defaults W1 served about 10 % more
    /// requests a second (bench/README.md). An option the environment sets keeps the environment's value,
    /// which mimalloc has already read.
    pub fn configure() {
        for (option, names) in OPTIONS {
            if !set_by_environment(names) {
                // SAFETY: `mi_option_set` only stores the value; mimalloc reads these options when it next
                // makes an arena or purges memory, so setting them while it is in use is allowed.
                unsafe { mi_option_set(option, 0) };
            }
        }
    }

    /// Each option with the environment variables mimalloc reads it from (its name and its older name;
    /// mimalloc ignores their case).
    const OPTIONS: [(mi_option_t, &[&str]); 2] = [
        (ARENA_EAGER_COMMIT, &["MIMALLOC_ARENA_EAGER_COMMIT", "MIMALLOC_EAGER_REGION_COMMIT"]),
        (PURGE_DELAY, &["MIMALLOC_PURGE_DELAY", "MIMALLOC_RESET_DELAY"]),
    ];

    fn set_by_environment(names: &[&str]) -> bool {
        std::env::vars_os()
            .any(|(key, _)| key.to_str().is_some_and(|key| names.iter().any(|name| key.eq_ignore_ascii_case(name))))
    }

    #[cfg(test)]
    mod tests {
        use libmimalloc_sys::mi_option_get;

        use super::*;

        #[test]
        fn the_option_indexes_name_the_options_meant() {
            // mimalloc's defaults (its src/options.c), unless the environment sets the option.
            for ((option, names), default) in OPTIONS.into_iter().zip([2, 1000]) {
                if !set_by_environment(names) {
                    // SAFETY: reading an option has no precondition.
                    assert_eq!(unsafe { mi_option_get(option) }, default, "{}", names[0]);
                }
            }
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    allocator::configure();
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
