//! The command line: `serve`, `migrate`, `healthcheck`, `config check`, `audit verify`, and the admin API
//! client commands `agent`, `key` and `resource`.

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
    /// Probe this instance's `/readyz` (for container health checks: no curl needed), on the operator
    /// listener when configured, else on the listen address (over TLS when configured). Exit 0 when ready.
    Healthcheck,
    /// Configuration commands.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Operator token commands.
    AdminToken {
        #[command(subcommand)]
        command: AdminTokenCommand,
    },
    /// Audit log commands.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Manage agents through the admin API of a running gateway.
    Agent {
        #[command(flatten)]
        target: Target,
        #[command(subcommand)]
        command: AgentCommand,
    },
    /// Manage an agent's keys through the admin API of a running gateway.
    Key {
        #[command(flatten)]
        target: Target,
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// Manage an agent's resources through the admin API of a running gateway.
    Resource {
        #[command(flatten)]
        target: Target,
        #[command(subcommand)]
        command: ResourceCommand,
    },
}

/// Which gateway the admin API commands talk to, and with which operator token.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// The gateway's base URL. Default: the configured operator listen address when set, else the listen
    /// address (https with TLS); loopback for 0.0.0.0.
    #[arg(long, env = "HIVEGATE_URL", global = true)]
    pub url: Option<String>,
    /// The operator token. Default: HIVEGATE_ADMIN_TOKEN.
    #[arg(long, global = true)]
    pub token: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Create an agent; prints it.
    Create {
        id: String,
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        description: Option<String>,
    },
    /// List every agent.
    List,
    /// Delete an agent and everything it owns.
    Delete { id: String },
}

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Issue a key; prints it with the key itself, shown this once.
    Issue {
        agent: String,
        /// `mcp` or `registry`; repeat for both.
        #[arg(long = "scope", required = true)]
        scopes: Vec<String>,
        #[arg(long)]
        name: Option<String>,
        /// RFC 3339 time after which the key is refused.
        #[arg(long)]
        expires_at: Option<String>,
    },
    /// List an agent's keys (never the keys themselves).
    List { agent: String },
    /// Revoke a key: refused at once on every replica.
    Revoke { agent: String, key_id: String },
}

#[derive(Debug, Subcommand)]
pub enum ResourceCommand {
    /// Store a file as a resource (text when it is UTF-8, else a blob); prints the resource.
    Put {
        agent: String,
        #[arg(long)]
        uri: String,
        #[arg(long)]
        file: PathBuf,
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        mime_type: Option<String>,
    },
    /// List an agent's resources (without content).
    List { agent: String },
    /// Delete a resource.
    Delete {
        agent: String,
        #[arg(long)]
        uri: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum AdminTokenCommand {
    /// Replace the stored (generated) operator token with a new one, printed once on stdout. Running
    /// replicas accept only the new one within 2 s. Refused when HIVEGATE_ADMIN_TOKEN is set.
    Rotate,
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
