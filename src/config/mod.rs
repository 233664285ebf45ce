//! Configuration: defaults, then the TOML file, then `HIVEGATE_*` environment variables.
//!
//! Every key of `config/hivegate.toml` can be set as `HIVEGATE_<SECTION>__<KEY>`; the top-level keys as
//! `HIVEGATE_LISTEN`, `HIVEGATE_DATABASE_URL` and `HIVEGATE_ADMIN_TOKEN`. Unknown keys are errors, so a
//! typo is reported at start-up with the key's name instead of being silently ignored.
//!
//! # Map
//!
//! - this file: [`Config`] (the top-level keys and one field per section), loading it ([`Config::load`]),
//!   [`ConfigError`], and the two macros every section is written with: `section!` (the struct, each field's
//!   default beside it) and `key!` (a setting's dotted name, checked against [`Config`]'s fields).
//! - [`database`]: `[database]`, `[keys]`, and [`DatabaseUrl`], which never shows its password.
//! - [`http`]: `[http]` (listeners, timeouts, connection caps, the public origin) and `[tls]`.
//! - [`limits`]: `[limits]` (requests, fields, quotas, renders) and `[rate_limits]`.
//! - [`mcp`]: `[mcp]`, `[sessions]`, `[streams]`, `[events]` and `[cache]`.
//! - [`audit`]: `[audit]`.
//! - [`telemetry`]: `[log]` and `[telemetry]`.
//! - `[oauth]` is [`crate::oauth::config`], next to what it configures (written with `section!` too).
//! - `validate`: [`Config::validate`], every range and every setting that depends on another.
//! - [`report`]: the effective configuration with each value's source (`hivegate config check`).
//!
//! [`Config`]: crate::config::Config
//! [`Config::load`]: crate::config::Config::load
//! [`ConfigError`]: crate::config::ConfigError
//! [`database`]: crate::config::database
//! [`DatabaseUrl`]: crate::config::DatabaseUrl
//! [`limits`]: crate::config::limits
//! [`Config::validate`]: crate::config::Config::validate
//! [`report`]: crate::config::report

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use secrecy::SecretString;

/// Declares a configuration section: the struct (`Debug`, serde; a missing key takes its default, an unknown
/// one is an error) with each field's default written beside it, and its `Default` made of those.
macro_rules! section {
    (
        $(#[$attr:meta])*
        pub struct $name:ident {
            $(
                $(#[$field_attr:meta])*
                pub $field:ident: $ty:ty = $default:expr,
            )*
        }
    ) => {
        $(#[$attr])*
        #[derive(Debug, ::serde::Deserialize, ::serde::Serialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct $name {
            $(
                $(#[$field_attr])*
                pub $field: $ty,
            )*
        }

        impl Default for $name {
            fn default() -> Self {
                Self { $($field: $default,)* }
            }
        }
    };
}

// `[oauth]` (crate::oauth::config) is declared with it too.
pub(crate) use section;

/// The dotted name of a setting: `key!(tls.cert_path)` is `"tls.cert_path"`. It is checked against
/// [`Config`]'s fields when compiled, so a renamed or misspelt key does not build.
macro_rules! key {
    ($first:ident $(. $rest:ident)*) => {{
        #[allow(dead_code)]
        fn exists(config: &$crate::config::Config) {
            let _ = &config.$first $(. $rest)*;
        }
        concat!(stringify!($first) $(, ".", stringify!($rest))*)
    }};
}

/// `[audit]`.
pub mod audit;
/// `[database]`, `[keys]`, the database URL.
pub mod database;
/// `[http]` and `[tls]`.
pub mod http;
/// `[limits]` and `[rate_limits]`.
pub mod limits;
/// `[mcp]`, `[sessions]`, `[streams]`, `[events]`, `[cache]`.
pub mod mcp;
/// The effective configuration with each value's source (`hivegate config check`).
pub mod report;
/// `[log]` and `[telemetry]`.
pub mod telemetry;
#[cfg(test)]
mod tests;
/// [`Config::validate`].
mod validate;

pub use audit::{AuditConfig, OnOverload};
pub use database::{DatabaseConfig, DatabaseUrl, KeysConfig};
pub use http::{HttpConfig, TlsConfig};
pub use limits::{LimitsConfig, MAX_JSON_DEPTH, MAX_TEMPLATES_PER_AGENT, RateLimitsConfig};
pub use mcp::{CacheConfig, EventsConfig, McpConfig, SessionsConfig, StreamsConfig};
pub use telemetry::{LogConfig, LogFormat, TelemetryConfig};

/// The file read when `--config` is not given and the file exists.
pub const DEFAULT_CONFIG_PATH: &str = "config/hivegate.toml";
/// The database used when none is configured: an embedded SQLite file in the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://hivegate.db?mode=rwc";

section! {
    /// The whole configuration: the top-level keys, then one field per section.
    pub struct Config {
        /// Address the HTTP server binds.
        pub listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 8080)),
        /// `sqlite://...` or `postgres://...`.
        pub database_url: DatabaseUrl = DatabaseUrl::new(DEFAULT_DATABASE_URL),
        /// The operator token; when set it is the only one, and none is generated or stored.
        #[serde(serialize_with = "redact")]
        pub admin_token: Option<SecretString> = None,
        pub database: DatabaseConfig = DatabaseConfig::default(),
        pub keys: KeysConfig = KeysConfig::default(),
        pub http: HttpConfig = HttpConfig::default(),
        pub tls: TlsConfig = TlsConfig::default(),
        pub limits: LimitsConfig = LimitsConfig::default(),
        pub mcp: McpConfig = McpConfig::default(),
        pub events: EventsConfig = EventsConfig::default(),
        pub cache: CacheConfig = CacheConfig::default(),
        pub sessions: SessionsConfig = SessionsConfig::default(),
        pub streams: StreamsConfig = StreamsConfig::default(),
        pub audit: AuditConfig = AuditConfig::default(),
        pub rate_limits: RateLimitsConfig = RateLimitsConfig::default(),
        pub log: LogConfig = LogConfig::default(),
        pub telemetry: TelemetryConfig = TelemetryConfig::default(),
        pub oauth: crate::oauth::config::OAuthConfig = crate::oauth::config::OAuthConfig::default(),
    }
}

/// A secret serialised as `"(redacted)"` when set (`hivegate config check` prints the configuration).
fn redact<S: serde::Serializer>(secret: &Option<SecretString>, serializer: S) -> Result<S::Ok, S::Error> {
    match secret {
        Some(_) => serializer.serialize_some("(redacted)"),
        None => serializer.serialize_none(),
    }
}

/// A configuration problem, naming the offending key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration: {0}")]
    Load(String),
    #[error("invalid configuration value for `{key}`: {message}")]
    Invalid { key: &'static str, message: String },
}

/// A loaded configuration with its layers: the defaults, the file (when one was read) and the environment.
pub struct Loaded {
    pub config: Config,
    /// The merged layers; [`Figment::find_metadata`] says which one a key's value came from.
    pub figment: Figment,
    /// The file read, if any.
    pub file: Option<PathBuf>,
}

/// Each problem of `error` on a line of its own, naming its key and where the key was set. An unknown key
/// lists the known ones (figment's own message quotes that list twice over).
fn describe(error: figment::Error) -> String {
    error
        .into_iter()
        .map(|error| {
            let key = error.path.join(".");
            let origin = error.metadata.as_ref().map(|metadata| match &metadata.source {
                Some(figment::Source::File(path)) => format!(" in {}", path.display()),
                _ => format!(" in {}", metadata.name),
            });
            let origin = origin.unwrap_or_default();
            match &error.kind {
                figment::error::Kind::UnknownField(found, expected) => {
                    let at = key.rsplit_once('.').map(|(section, _)| format!(" in [{section}]")).unwrap_or_default();
                    format!("unknown key `{found}`{at}{origin}; the known keys are {}", expected.join(", "))
                }
                kind => format!("{kind} for key `{key}`{origin}"),
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The top-level keys an environment variable can set; section keys (`HIVEGATE_<SECTION>__<KEY>`) are
/// checked against the sections. Other `HIVEGATE_*` variables (`HIVEGATE_CONFIG`, tooling's own) are not
/// configuration and are left alone.
const TOP_LEVEL_KEYS: [&str; 3] = [key!(listen), key!(database_url), key!(admin_token)];

impl Config {
    /// Load from `path` (or the default file when present), then the environment; then validate.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_with_sources(path).map(|loaded| loaded.config)
    }

    /// [`Config::load`], keeping where each value came from (for `hivegate config check`).
    pub fn load_with_sources(path: Option<&Path>) -> Result<Loaded, ConfigError> {
        let file = match path {
            Some(path) => {
                if !path.exists() {
                    return Err(ConfigError::Load(format!("config file {} does not exist", path.display())));
                }
                Some(path.to_owned())
            }
            None => Some(PathBuf::from(DEFAULT_CONFIG_PATH)).filter(|path| path.exists()),
        };
        // The defaults as a layer of their own, so that a value's metadata tells default from file.
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(file) = &file {
            figment = figment.merge(Toml::file_exact(file));
        }
        let env = Env::prefixed("HIVEGATE_")
            .split("__")
            .filter(|key| key.as_str().contains('.') || TOP_LEVEL_KEYS.iter().any(|name| key == *name));
        let figment = figment.merge(env);
        let config: Config = figment.extract().map_err(|error| ConfigError::Load(describe(error)))?;
        config.validate()?;
        Ok(Loaded { config, figment, file })
    }
}
