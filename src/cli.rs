//! The command line: `serve`, `migrate`, `healthcheck`, `config check`, `audit verify`.

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
    /// Audit log commands.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Check the audit hash chain of every agent (or of one): exit 0 when every chain is intact, 1 with the
    /// first problem of each broken chain otherwise.
    Verify {
        /// Only this agent's chain.
        #[arg(long)]
        agent: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Load and validate the configuration, print the effective settings (secrets redacted) and exit.
    Check,
}
