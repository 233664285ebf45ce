//! `[database]` and `[keys]`: the connection pool and the secret mixed into key digests; the database URL,
//! which never shows its password.

use std::fmt;

use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use super::redact;

section! {
    pub struct DatabaseConfig {
        /// Connections in the pool (PostgreSQL; SQLite uses one writer plus this many readers).
        pub max_connections: u32 = 16,
        /// How long a request waits for a pooled connection before it is answered 503.
        pub acquire_timeout_ms: u64 = 3000,
        /// How long start-up keeps retrying an unreachable database before it gives up with an error.
        pub startup_timeout_secs: u64 = 60,
    }
}

section! {
    pub struct KeysConfig {
        /// Optional secret mixed into key digests (HMAC-SHA-256). Changing it invalidates every key.
        #[serde(serialize_with = "redact")]
        pub pepper: Option<SecretString> = None,
    }
}

/// A database URL whose `Debug` and `Display` hide the password.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_postgres(&self) -> bool {
        self.0.starts_with("postgres://") || self.0.starts_with("postgresql://")
    }

    pub fn is_sqlite(&self) -> bool {
        self.0.starts_with("sqlite:")
    }

    /// The URL with any password replaced by `***`.
    pub fn redacted(&self) -> String {
        let url = &self.0;
        let mut redacted = match (url.find("://"), url.rfind('@')) {
            (Some(scheme_end), Some(at)) if at > scheme_end => {
                let userinfo = &url[scheme_end + 3..at];
                match userinfo.find(':') {
                    Some(colon) => format!("{}{}:***{}", &url[..scheme_end + 3], &userinfo[..colon], &url[at..]),
                    None => url.clone(),
                }
            }
            _ => url.clone(),
        };
        // A password can also be a query parameter (`?password=...`, libpq style).
        if let Some(query_start) = redacted.find('?') {
            let (base, query) = redacted.split_at(query_start + 1);
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _)) if name.eq_ignore_ascii_case("password") => format!("{name}=***"),
                    _ => pair.to_owned(),
                })
                .collect();
            redacted = format!("{base}{}", query.join("&"));
        }
        redacted
    }
}

/// Serialised with the password hidden (`hivegate config check` prints it).
impl Serialize for DatabaseUrl {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.redacted())
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.redacted())
    }
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}
