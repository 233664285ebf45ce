//! The command line: `serve`, `migrate`, `config check`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "hivegate", version, about = "A multi-tenant MCP gateway")]
pub struct Cli {
    /// Configuration file (TOML). Default: config/hivegate.toml when it exists.
    #[arg(long, global = true, env = "HIVEGATE_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway until SIGTERM or SIGINT.
    Serve,
    /// Apply database migrations and exit.
    Migrate,
    /// Probe this instance's `/readyz` (for container health checks: no curl needed). Exit 0 when ready.
    Healthcheck,
    /// Configuration commands.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Load and validate the configuration, print the effective settings (secrets redacted) and exit.
    Check,
}
