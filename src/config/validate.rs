//! [`Config::validate`]: every value in range, and the settings that depend on each other consistent. Each
//! error names its key, spelled by [`key!`] from the field itself.

use secrecy::ExposeSecret;

use super::http::is_origin_url;
use super::limits::{MAX_JSON_DEPTH, MAX_TEMPLATES_PER_AGENT};
use super::{Config, ConfigError};

/// A count or a time as a `u64`, for the range checks (counts are `u32` or `usize`, times `u64`).
trait ToU64 {
    fn to_u64(self) -> u64;
}

impl ToU64 for u64 {
    fn to_u64(self) -> u64 {
        self
    }
}

impl ToU64 for Option<u64> {
    fn to_u64(self) -> u64 {
        self.unwrap_or(0)
    }
}

impl ToU64 for u32 {
    fn to_u64(self) -> u64 {
        u64::from(self)
    }
}

impl ToU64 for usize {
    fn to_u64(self) -> u64 {
        self as u64
    }
}

/// `(key, value, max)` for the setting at `config.<section>.<key>`: it must be greater than 0, and at most
/// `max` when one follows `=>`.
macro_rules! setting {
    ($config:ident $(. $path:ident)+) => {
        setting!($config $(. $path)+ => u64::MAX)
    };
    ($config:ident $(. $path:ident)+ => $max:expr) => {
        (key!($($path).+), ToU64::to_u64($config $(. $path)+), $max)
    };
}

/// A day in milliseconds.
const DAY_MS: u64 = 24 * 60 * 60 * 1000;
/// A year in seconds.
const YEAR_SECS: u64 = 365 * 24 * 60 * 60;
/// The most records `audit.queue_capacity` may name (about 8 GB of typical records): a bounded channel
/// cannot hold any number, and a larger value would stop the server at start-up rather than be refused.
const MAX_QUEUE_RECORDS: u64 = 1 << 24;
/// Ten minutes in milliseconds.
const TEN_MINUTES_MS: u64 = 10 * 60 * 1000;

/// More connection threads than any machine has CPUs is a typo.
const MAX_HTTP_THREADS: u32 = 1024;

/// A budget beyond any memory is a typo; 1 TiB also stays far from what a `usize` can count.
const MAX_CACHE_BYTES: u64 = 1 << 40;

impl Config {
    /// Checks that no value is out of range; each error names its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        const OPERATOR_LISTEN: &str = key!(http.operator_listen);
        let config = self;
        if !self.database_url.is_postgres() && !self.database_url.is_sqlite() {
            return Err(ConfigError::Invalid {
                key: key!(database_url),
                message: format!("{} is neither sqlite://... nor postgres://...", self.database_url),
            });
        }
        if let Some(token) = &self.admin_token
            && token.expose_secret().len() < 16
        {
            return Err(ConfigError::Invalid {
                key: key!(admin_token),
                message: "the operator token must be at least 16 characters".to_owned(),
            });
        }
        if !(1..=MAX_TEMPLATES_PER_AGENT).contains(&self.limits.max_templates_per_agent) {
            return Err(ConfigError::Invalid {
                key: key!(limits.max_templates_per_agent),
                message: format!("must be between 1 and {MAX_TEMPLATES_PER_AGENT}"),
            });
        }
        if !(1..=MAX_JSON_DEPTH).contains(&self.limits.max_json_depth) {
            return Err(ConfigError::Invalid {
                key: key!(limits.max_json_depth),
                message: format!("must be between 1 and {MAX_JSON_DEPTH}"),
            });
        }
        // Times become `Duration`s and microsecond offsets: the bounded ones are kept far from overflowing.
        let ranges: [(&'static str, u64, u64); 40] = [
            (key!(audit.queue_capacity), config.audit.queue_records() as u64, MAX_QUEUE_RECORDS),
            setting!(config.audit.batch_size),
            setting!(config.audit.flush_interval_ms),
            setting!(config.database.max_connections),
            setting!(config.database.acquire_timeout_ms),
            setting!(config.http.request_timeout_ms),
            setting!(config.http.shutdown_grace_ms),
            setting!(config.http.header_read_timeout_ms => TEN_MINUTES_MS),
            setting!(config.http.idle_timeout_ms => DAY_MS),
            setting!(config.http.console_idle_timeout_secs),
            setting!(config.tls.reload_interval_ms => DAY_MS),
            setting!(config.tls.handshake_timeout_ms => TEN_MINUTES_MS),
            setting!(config.limits.max_body_bytes),
            setting!(config.limits.max_resource_bytes),
            setting!(config.limits.max_header_bytes),
            setting!(config.limits.max_uri_bytes),
            setting!(config.limits.max_name_bytes),
            setting!(config.limits.max_title_bytes),
            setting!(config.limits.max_description_bytes),
            setting!(config.limits.max_mime_type_bytes),
            setting!(config.limits.max_meta_bytes),
            setting!(config.limits.max_annotations_bytes),
            setting!(config.limits.max_uri_template_bytes),
            setting!(config.limits.max_template_text_bytes),
            setting!(config.limits.max_prompt_bytes),
            setting!(config.limits.max_completions_bytes),
            setting!(config.limits.max_prompt_arguments),
            setting!(config.limits.max_page_bytes),
            setting!(config.limits.max_renders_per_agent),
            setting!(config.limits.max_renders),
            setting!(config.events.retention_secs => 10 * YEAR_SECS),
            setting!(config.events.retention_count),
            setting!(config.events.prune_interval_ms),
            setting!(config.sessions.idle_timeout_secs => YEAR_SECS),
            setting!(config.sessions.max_subscriptions),
            setting!(config.sessions.max_per_key),
            setting!(config.streams.keep_alive_ms => 60 * 60 * 1000),
            setting!(config.streams.max_per_key),
            setting!(config.streams.max_per_agent),
            setting!(config.streams.queue_capacity => 1 << 20),
        ];
        for (key, value, _) in ranges {
            if value == 0 {
                return Err(ConfigError::Invalid { key, message: "must be greater than 0".to_owned() });
            }
        }
        if config.http.threads > MAX_HTTP_THREADS {
            return Err(ConfigError::Invalid {
                key: key!(http.threads),
                message: format!("must be at most {MAX_HTTP_THREADS} (0: one per CPU)"),
            });
        }
        for (key, value, _) in [setting!(config.cache.max_bytes), setting!(config.cache.max_content_bytes)] {
            if value > MAX_CACHE_BYTES {
                return Err(ConfigError::Invalid {
                    key,
                    message: format!("must be at most {MAX_CACHE_BYTES} (1 TiB)"),
                });
            }
        }
        for (key, value, max) in ranges {
            if value > max {
                return Err(ConfigError::Invalid { key, message: format!("must be at most {max}") });
            }
        }
        self.rate_limits.validate()?;
        self.tls.validate()?;
        if !self.http.public_admin && self.http.operator_listen.is_none() {
            return Err(ConfigError::Invalid {
                key: key!(http.public_admin),
                message: format!(
                    "can only be false when {OPERATOR_LISTEN} is set (the admin API would be served nowhere)"
                ),
            });
        }
        if self.http.operator_listen == Some(self.listen) && self.listen.port() != 0 {
            return Err(ConfigError::Invalid {
                key: OPERATOR_LISTEN,
                message: format!("must differ from listen ({})", self.listen),
            });
        }
        if self.log.level.trim().is_empty() {
            return Err(ConfigError::Invalid { key: key!(log.level), message: "must not be empty".to_owned() });
        }
        self.telemetry.validate()?;
        if let Some(url) = &self.http.public_url
            && !is_origin_url(url)
        {
            return Err(ConfigError::Invalid {
                key: key!(http.public_url),
                message: format!("{url:?} is not an http:// or https:// origin (scheme, host, optional port; no path)"),
            });
        }
        self.oauth.validate()?;
        Ok(())
    }
}
