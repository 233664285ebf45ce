//! The command line: `serve`, `migrate`, `healthcheck`, `config check`, `admin-token rotate`, `audit verify`,
//! and the admin API client commands `agent`, `key`, `resource`, `template`, `prompt` and `audit tail`.

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
        /// What to do with the configuration.
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Operator token commands.
    AdminToken {
        /// What to do with the operator token.
        #[command(subcommand)]
        command: AdminTokenCommand,
    },
    /// Audit log commands: check the hash chains in the database, or read the newest records from a running
    /// gateway.
    Audit {
        /// What to do with the audit log.
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Manage agents through the admin API of a running gateway.
    Agent {
        /// The gateway and the operator token.
        #[command(flatten)]
        target: Target,
        /// What to do with agents.
        #[command(subcommand)]
        command: AgentCommand,
    },
    /// Manage an agent's keys through the admin API of a running gateway.
    Key {
        /// The gateway and the operator token.
        #[command(flatten)]
        target: Target,
        /// What to do with keys.
        #[command(subcommand)]
        command: KeyCommand,
    },
    /// Manage an agent's resources through the admin API of a running gateway.
    Resource {
        /// The gateway and the operator token.
        #[command(flatten)]
        target: Target,
        /// What to do with resources.
        #[command(subcommand)]
        command: ResourceCommand,
    },
    /// Manage an agent's resource templates through the admin API of a running gateway.
    Template {
        /// The gateway and the operator token.
        #[command(flatten)]
        target: Target,
        /// What to do with resource templates.
        #[command(subcommand)]
        command: TemplateCommand,
    },
    /// Manage an agent's prompts through the admin API of a running gateway.
    Prompt {
        /// The gateway and the operator token.
        #[command(flatten)]
        target: Target,
        /// What to do with prompts.
        #[command(subcommand)]
        command: PromptCommand,
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
        /// The agent's id: lowercase letters, digits, `-` and `_`, up to 63 characters.
        id: String,
        /// Its display name. Default: the id.
        #[arg(long)]
        name: Option<String>,
        /// What it is for.
        #[arg(long)]
        description: Option<String>,
    },
    /// Print one agent.
    Get {
        /// The agent's id.
        id: String,
    },
    /// List every agent.
    List,
    /// Change an agent (a JSON merge-patch of it); prints it.
    Patch {
        /// The agent's id.
        id: String,
        /// A new display name.
        #[arg(long)]
        name: Option<String>,
        /// A new description.
        #[arg(long)]
        description: Option<String>,
        /// A JSON merge-patch (RFC 7396) of the agent, for fields without an option, e.g.
        /// '{"rateLimit": {"requestsPerSecond": 5}}' or '{"description": null}'; the options win over it.
        #[arg(long, value_name = "JSON")]
        json: Option<String>,
    },
    /// Delete an agent and everything it owns.
    Delete {
        /// The agent's id.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Issue a key; prints it with the key itself, shown this once.
    Issue {
        /// The agent the key acts for.
        agent: String,
        /// `mcp` or `registry`; repeat for both.
        #[arg(long = "scope", required = true)]
        scopes: Vec<String>,
        /// A name to recognise the key by.
        #[arg(long)]
        name: Option<String>,
        /// RFC 3339 time after which the key is refused.
        #[arg(long)]
        expires_at: Option<String>,
    },
    /// List an agent's keys (never the keys themselves).
    List {
        /// The agent whose keys to list.
        agent: String,
    },
    /// Change a key's name or rate limit (a JSON merge-patch of it); prints it.
    Patch {
        /// The agent the key belongs to.
        agent: String,
        /// The key's id (as `key list` shows it).
        key_id: String,
        /// A new name.
        #[arg(long)]
        name: Option<String>,
        /// A JSON merge-patch (RFC 7396) of the key, e.g. '{"rateLimit": {"burst": 20}}' or
        /// '{"rateLimit": null}'; the options win over it.
        #[arg(long, value_name = "JSON")]
        json: Option<String>,
    },
    /// Revoke a key: refused at once on every replica.
    Revoke {
        /// The agent the key belongs to.
        agent: String,
        /// The key's id (as `key list` shows it).
        key_id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ResourceCommand {
    /// Store a file as a resource (text when it is UTF-8 and of a textual type, else a blob); prints the
    /// resource. Refused before sending when it is larger than the configured limits.
    Put {
        /// The agent that serves the resource.
        agent: String,
        /// The resource's URI, e.g. `file:///notes.md`.
        #[arg(long)]
        uri: String,
        /// The file whose content to store.
        #[arg(long)]
        file: PathBuf,
        /// The resource's name. Default: the file's name.
        #[arg(long)]
        name: Option<String>,
        /// The resource's MIME type. Default: guessed from the file's extension (none when unknown).
        #[arg(long)]
        mime_type: Option<String>,
    },
    /// List an agent's resources (without content).
    List {
        /// The agent whose resources to list.
        agent: String,
    },
    /// Delete a resource.
    Delete {
        /// The agent that serves the resource.
        agent: String,
        /// The resource's URI.
        #[arg(long)]
        uri: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum TemplateCommand {
    /// Create or replace a resource template from a JSON file of its body (`uriTemplate`, `name`, and
    /// optionally `title`, `description`, `mimeType`, `annotations`, `text`); prints it.
    Put {
        /// The agent that serves the template.
        agent: String,
        /// The JSON file of the template.
        #[arg(long)]
        file: PathBuf,
    },
    /// List an agent's resource templates.
    List {
        /// The agent whose templates to list.
        agent: String,
    },
    /// Delete a resource template.
    Delete {
        /// The agent that serves the template.
        agent: String,
        /// The template's `uriTemplate`, e.g. `test://items/{id}`.
        #[arg(long)]
        uri_template: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum PromptCommand {
    /// Create or replace a prompt from a JSON file of its body (`messages`, and optionally `title`,
    /// `description`, `arguments`); prints it.
    Put {
        /// The agent that serves the prompt.
        agent: String,
        /// The prompt's name.
        name: String,
        /// The JSON file of the prompt.
        #[arg(long)]
        file: PathBuf,
    },
    /// Print one prompt.
    Get {
        /// The agent that serves the prompt.
        agent: String,
        /// The prompt's name.
        name: String,
    },
    /// List an agent's prompts.
    List {
        /// The agent whose prompts to list.
        agent: String,
    },
    /// Delete a prompt.
    Delete {
        /// The agent that serves the prompt.
        agent: String,
        /// The prompt's name.
        name: String,
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
    /// Check the audit hash chain of every agent (or of one) in the configured database, which must exist:
    /// exit 0 when every chain is intact, 1 with the first problem of each broken chain otherwise (and when
    /// the agent has no records).
    Verify {
        /// Only this agent's chain.
        #[arg(long)]
        agent: Option<String>,
    },
    /// Print the newest audit records of a running gateway, oldest first, one JSON object a line (NDJSON).
    Tail {
        /// The gateway and the operator token.
        #[command(flatten)]
        target: Target,
        /// Only this agent's records.
        #[arg(long)]
        agent: Option<String>,
        /// Only records of this MCP method or admin action (e.g. `tools/call`, `resource.put`).
        #[arg(long)]
        method: Option<String>,
        /// How many of the newest records to print first (1 to 1000).
        #[arg(short = 'n', long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
        lines: u32,
        /// Keep running, printing new records as they are written.
        #[arg(short, long)]
        follow: bool,
        /// With --follow, how often to ask for new records, in milliseconds.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..))]
        interval_ms: u64,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Load and validate the configuration, print the effective settings as TOML (each value's source as a
    /// comment, secrets redacted) and exit.
    Check,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Every argument and option of every command, at every depth, says what it is for in `--help`.
    #[test]
    fn every_argument_has_help_text() {
        fn check(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if id != "help" && id != "version" && arg.get_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in command.get_subcommands() {
                if sub.get_about().is_none() {
                    missing.push(format!("{path} {} (the command)", sub.get_name()));
                }
                check(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        check(&Cli::command(), "hivegate", &mut missing);
        assert!(missing.is_empty(), "without help text: {missing:?}");
    }
}
