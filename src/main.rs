use std::process::ExitCode;

use clap::Parser;
use hivegate::app::{self, Application};
use hivegate::cli::{AuditCommand, Cli, Command, ConfigCommand};
use hivegate::config::Config;

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
    hivegate::telemetry::init(&config.log);
    let outcome = match cli.command {
        Command::Serve => match Application::build(config).await {
            Ok(application) => application.run_until_stopped().await,
            Err(error) => Err(error),
        },
        Command::Migrate => app::migrate_only(&config).await,
        Command::Healthcheck => app::healthcheck(config.listen).await,
        Command::Audit { command: AuditCommand::Verify { agent } } => {
            app::verify_audit(&config, agent.as_deref()).await
        }
        Command::Config { command: ConfigCommand::Check } => {
            println!("{config:#?}");
            Ok(())
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            eprintln!("hivegate: {error:#}");
            ExitCode::FAILURE
        }
    }
}
