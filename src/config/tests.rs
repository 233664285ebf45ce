//! The configuration's unit tests: defaults, validation, the environment layer, `config check`'s helpers.

use super::report::{environment_variable, toml_key};
use super::*;

/// The default configuration, changed by `change`.
fn changed(change: impl FnOnce(&mut Config)) -> Config {
    let mut config = Config::default();
    change(&mut config);
    config
}

/// Asserts that `config` is refused (`why` says why it should be) with an error naming `key`; returns the
/// error's text.
#[track_caller]
fn assert_refused(config: &Config, key: &str, why: &str) -> String {
    let error = config.validate().expect_err(why).to_string();
    assert!(error.contains(key), "{error}");
    error
}

/// Runs `test` in an environment of its own (figment's jail) holding the variables `env`; `test` can change
/// it further with `jail.set_env`.
// `figment::Jail` fixes the closure's error type (figment's own, which is large).
#[allow(clippy::result_large_err)]
fn in_jail(env: &[(&str, &str)], test: impl FnOnce(&mut figment::Jail) -> Result<(), String>) {
    figment::Jail::expect_with(|jail| {
        for (name, value) in env {
            jail.set_env(name, value);
        }
        test(jail).map_err(figment::Error::from)
    });
}

/// The configuration the jail's environment makes.
fn load() -> Result<Config, String> {
    Config::load(None).map_err(|error| error.to_string())
}

/// The error of loading a configuration the jail's environment makes invalid (`why` says why), lower-cased
/// when `lower` (serde names a field as it likes).
#[track_caller]
fn load_refused(why: &str, key: &str, lower: bool) {
    let error = Config::load(None).expect_err(why).to_string();
    let text = if lower { error.to_lowercase() } else { error.clone() };
    assert!(text.contains(key), "{error}");
}

#[test]
fn database_url_password_is_redacted() {
    let url = DatabaseUrl::new("postgres://user:secret@db:5432/hivegate");
    assert_eq!(url.redacted(), "postgres://user:***@db:5432/hivegate");
    assert!(!format!("{url:?}").contains("secret"));
    assert_eq!(DatabaseUrl::new("sqlite://x.db").redacted(), "sqlite://x.db");
    let url = DatabaseUrl::new("postgres://db/hivegate?user=u&password=secret&sslmode=disable");
    assert_eq!(url.redacted(), "postgres://db/hivegate?user=u&password=***&sslmode=disable");
    assert!(!format!("{url:?}").contains("secret"));
}

#[test]
fn defaults_are_valid() {
    Config::default().validate().expect("defaults validate");
}

#[test]
fn public_url_is_an_origin() {
    let with_url = |url: &str| changed(|config| config.http.public_url = Some(url.to_owned()));
    for url in ["https://mcp.example.com", "http://127.0.0.1:8080/", "https://h.example:8443"] {
        with_url(url).validate().unwrap_or_else(|error| panic!("{url}: {error}"));
    }
    for url in ["mcp.example.com", "ftp://h", "https://h/prefix", "https://h?q=1", "https://u@h", "https://h#f"] {
        assert_refused(&with_url(url), "http.public_url", url);
    }
}

#[test]
fn connection_threads_are_one_per_cpu_or_a_count_within_bounds() {
    for threads in [0, 1, 1024] {
        changed(|config| config.http.threads = threads).validate().unwrap_or_else(|error| panic!("{threads}: {error}"));
    }
    assert_refused(
        &changed(|config| config.http.threads = 1025),
        "http.threads",
        "more threads than any machine has CPUs",
    );
}

#[test]
fn live_update_settings_are_checked() {
    let config = changed(|config| config.streams.queue_capacity = 0);
    assert_refused(&config, "streams.queue_capacity", "an empty queue is refused");
    let config = changed(|config| config.sessions.idle_timeout_secs = u64::MAX);
    assert_refused(&config, "sessions.idle_timeout_secs", "an absurd timeout is refused");
}

#[test]
fn quotas_and_audit_settings_are_checked() {
    for templates in [0, MAX_TEMPLATES_PER_AGENT + 1] {
        let config = changed(|config| config.limits.max_templates_per_agent = templates);
        assert_refused(&config, "limits.max_templates_per_agent", "templates out of range");
    }
    for depth in [0, MAX_JSON_DEPTH + 1] {
        let config = changed(|config| config.limits.max_json_depth = depth);
        assert_refused(&config, "limits.max_json_depth", "depth out of range");
    }
    let config = changed(|config| config.limits.max_uri_bytes = 0);
    assert_refused(&config, "limits.max_uri_bytes", "a zero URI limit");
    let config = changed(|config| config.audit.batch_size = 0);
    assert_refused(&config, "audit.batch_size", "an empty batch is refused");
    let config = changed(|config| config.audit.queue_capacity = Some(0));
    assert_refused(&config, "audit.queue_capacity", "an empty audit queue is refused");
    let config = changed(|config| config.audit.queue_capacity = Some(usize::MAX));
    assert_refused(&config, "audit.queue_capacity", "a queue no channel can hold is refused");
    changed(|config| config.audit.queue_capacity = Some(1 << 24)).validate().expect("the largest queue");
    let config = changed(|config| {
        config.audit.agent_retention_days.insert("bot".to_owned(), 0);
    });
    assert_eq!(config.audit.retention_of("bot", None), None, "0 keeps that agent's records forever");
    assert_eq!(config.audit.retention_of("other", None), Some(std::time::Duration::from_secs(90 * 86_400)));
    assert_eq!(
        config.audit.retention_of("bot", Some(2)),
        Some(std::time::Duration::from_secs(2 * 86_400)),
        "the agent's own setting wins"
    );
    assert_eq!(config.audit.retention_of("other", Some(0)), None);
}

#[test]
fn rate_limits_are_checked() {
    let mut config = changed(|config| config.rate_limits.key_burst = 0);
    assert_refused(&config, "rate_limits.key_burst", "a rate without a burst is refused");
    config.rate_limits.key_requests_per_second = 0;
    config.validate().expect("0 requests per second is unlimited, whatever the burst");
    config.rate_limits.failed_auth_window_secs = 0;
    assert_refused(&config, "rate_limits.failed_auth_window_secs", "attempts without a window are refused");
    config.rate_limits.failed_auth_attempts = 0;
    config.validate().expect("0 attempts turns the check off");
}

#[test]
fn telemetry_settings_are_checked() {
    let mut config = changed(|config| config.telemetry.sample_ratio = 1.5);
    assert_refused(&config, "telemetry.sample_ratio", "a ratio above 1 is refused");
    config.telemetry.sample_ratio = f64::NAN;
    assert_refused(&config, "telemetry.sample_ratio", "NaN is refused");
    let config = changed(|config| config.telemetry.service_name = " ".to_owned());
    assert_refused(&config, "telemetry.service_name", "an empty service name is refused");
    let mut config = changed(|config| config.telemetry.otlp_endpoint = Some("http://collector:4318".to_owned()));
    if cfg!(feature = "otel") {
        config.validate().expect("an endpoint is accepted by a build with the otel feature");
        config.telemetry.otlp_endpoint = Some("collector:4318".to_owned());
        assert_refused(&config, "telemetry.otlp_endpoint", "an endpoint without a scheme is refused");
    } else {
        let why = "a build without the otel feature refuses an endpoint";
        let error = assert_refused(&config, "telemetry.otlp_endpoint", why);
        assert!(error.contains("--features otel"), "{error}");
    }
}

#[test]
fn rate_limits_come_from_the_environment() {
    let env = [
        ("HIVEGATE_RATE_LIMITS__KEY_REQUESTS_PER_SECOND", "7"),
        ("HIVEGATE_RATE_LIMITS__TRUSTED_PROXIES", r#"["10.0.0.0/8", "::1/128"]"#),
    ];
    in_jail(&env, |jail| {
        let config = load()?;
        assert_eq!(config.rate_limits.key_requests_per_second, 7);
        assert_eq!(config.rate_limits.trusted_proxies.len(), 2);
        jail.set_env("HIVEGATE_RATE_LIMITS__TRUSTED_PROXIES", r#"["not a network"]"#);
        load_refused("a malformed network is refused", "trusted_proxies", true);
        Ok(())
    });
}

#[test]
fn the_audit_queue_is_a_share_of_memory_unless_set() {
    use super::audit::{MAX_DEFAULT_QUEUE_RECORDS, MIN_DEFAULT_QUEUE_RECORDS, default_queue_records};
    const GIB: u64 = 1 << 30;
    assert_eq!(default_queue_records(None), MIN_DEFAULT_QUEUE_RECORDS, "memory unknown: the least");
    assert_eq!(default_queue_records(Some(GIB)), MIN_DEFAULT_QUEUE_RECORDS, "a small container: the least");
    assert_eq!(default_queue_records(Some(8 * GIB)), 285_569, "a sixty-fourth of 8 GiB in records of 470 bytes");
    assert_eq!(default_queue_records(Some(24 * GIB)), 856_708);
    assert_eq!(default_queue_records(Some(1 << 40)), MAX_DEFAULT_QUEUE_RECORDS, "a large machine: the most");
    assert_eq!(default_queue_records(Some(u64::MAX)), MAX_DEFAULT_QUEUE_RECORDS);
    in_jail(&[], |jail| {
        let config = load()?;
        assert_eq!(config.audit.queue_capacity, None, "unset, the capacity is a share of memory");
        let memory = crate::registry::cache::process_memory();
        assert_eq!(config.audit.queue_records(), default_queue_records(memory));
        jail.set_env("HIVEGATE_AUDIT__QUEUE_CAPACITY", "1000");
        let config = load()?;
        assert_eq!((config.audit.queue_capacity, config.audit.queue_records()), (Some(1000), 1000));
        jail.set_env("HIVEGATE_AUDIT__QUEUE_CAPACITY", "0");
        load_refused("an empty audit queue is refused", "audit.queue_capacity", false);
        Ok(())
    });
}

#[test]
fn the_cache_budget_comes_from_the_environment() {
    in_jail(&[], |jail| {
        let config = load()?;
        assert_eq!(config.cache.max_bytes, None, "unset, the budget is a share of memory");
        assert_eq!(config.cache.budget(), crate::registry::cache::default_max_bytes());
        jail.set_env("HIVEGATE_CACHE__MAX_BYTES", "536870912");
        jail.set_env("HIVEGATE_CACHE__MAX_CONTENT_BYTES", "0");
        let config = load()?;
        assert_eq!((config.cache.max_bytes, config.cache.max_content_bytes), (Some(536_870_912), 0));
        assert_eq!(config.cache.budget(), 536_870_912);
        jail.set_env("HIVEGATE_CACHE__MAX_BYTES", "0");
        assert_eq!(load()?.cache.budget(), 0, "0 still caches nothing");
        jail.set_env("HIVEGATE_CACHE__MAX_BYTES", "-1");
        load_refused("a negative budget is refused", "max_bytes", true);
        jail.set_env("HIVEGATE_CACHE__MAX_BYTES", "1099511627776000");
        load_refused("a budget beyond any memory is refused", "cache.max_bytes", false);
        Ok(())
    });
}

#[test]
fn tls_and_operator_settings_are_checked() {
    let mut config = changed(|config| config.tls.cert_path = Some(PathBuf::from("cert.pem")));
    assert_refused(&config, "tls.key_path", "a certificate without a key");
    config.tls.cert_path = None;
    config.tls.key_path = Some(PathBuf::from("key.pem"));
    assert_refused(&config, "tls.cert_path", "a key without a certificate");
    config.tls.cert_path = Some(PathBuf::from("cert.pem"));
    config.validate().expect("both files");
    config.tls.reload_interval_ms = 0;
    assert_refused(&config, "tls.reload_interval_ms", "no reload interval");

    let mut config = changed(|config| config.http.public_admin = false);
    assert_refused(&config, "http.public_admin", "the admin API served nowhere");
    config.http.operator_listen = Some(config.listen);
    assert_refused(&config, "http.operator_listen", "one address for both listeners");
    config.http.operator_listen = Some(SocketAddr::from(([127, 0, 0, 1], 9090)));
    config.validate().expect("an operator listener of its own");
}

#[test]
fn tls_and_operator_settings_come_from_the_environment() {
    let env = [
        ("HIVEGATE_HTTP__OPERATOR_LISTEN", "127.0.0.1:9090"),
        ("HIVEGATE_HTTP__PUBLIC_ADMIN", "false"),
        ("HIVEGATE_TLS__CERT_PATH", "/etc/hivegate/tls/tls.crt"),
        ("HIVEGATE_TLS__KEY_PATH", "/etc/hivegate/tls/tls.key"),
    ];
    in_jail(&env, |jail| {
        let config = load()?;
        assert_eq!(config.http.operator_listen, Some(SocketAddr::from(([127, 0, 0, 1], 9090))));
        assert!(!config.http.public_admin && config.tls.enabled());
        jail.set_env("HIVEGATE_HTTP__OPERATOR_LISTEN", "not an address");
        load_refused("a malformed address is refused", "operator_listen", true);
        Ok(())
    });
}

#[test]
fn environment_overrides_known_keys_and_ignores_other_variables() {
    // `HIVEGATE_BIN` is no key: it is not configuration, and is left alone.
    let env = [
        ("HIVEGATE_LISTEN", "127.0.0.1:9999"),
        ("HIVEGATE_LIMITS__MAX_BODY_BYTES", "1234"),
        ("HIVEGATE_BIN", "target/debug/hivegate"),
    ];
    in_jail(&env, |jail| {
        let config = load()?;
        assert_eq!(config.listen.port(), 9999);
        assert_eq!(config.limits.max_body_bytes, 1234);
        jail.set_env("HIVEGATE_LIMITS__MAX_BODY", "1");
        load_refused("a misspelt key in a known section is refused", "max_body", false);
        Ok(())
    });
}

#[test]
fn keys_that_are_not_bare_are_quoted() {
    assert_eq!([toml_key("max_body_bytes"), toml_key("a.b")], ["max_body_bytes", "\"a.b\""]);
}

#[test]
fn environment_variables_are_named_after_their_key() {
    let variables = [environment_variable(&["limits", "max_body_bytes"]), environment_variable(&["listen"])];
    assert_eq!(variables, ["HIVEGATE_LIMITS__MAX_BODY_BYTES", "HIVEGATE_LISTEN"]);
}
