//! `[log]` and `[telemetry]`: what is logged and how, and where OpenTelemetry traces go.

use serde::{Deserialize, Serialize};

use super::ConfigError;

section! {
    pub struct LogConfig {
        /// `pretty` for people, `json` for log pipelines.
        pub format: LogFormat = LogFormat::Pretty,
        /// A tracing filter, e.g. `info` or `hivegate=debug,sqlx=warn`; `RUST_LOG` wins when set.
        pub level: String = "info".to_owned(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Pretty,
    Json,
}

section! {
    /// OpenTelemetry traces (the `otel` cargo feature). The section exists in every build, so one configuration
    /// file serves both; a build without the feature refuses an endpoint instead of ignoring it.
    pub struct TelemetryConfig {
        /// The collector's OTLP/HTTP base URL (`http://collector:4318`); spans go to `<url>/v1/traces` as
        /// protobuf. Unset: no traces are exported.
        pub otlp_endpoint: Option<String> = None,
        /// `service.name` of the exported spans.
        pub service_name: String = "hivegate".to_owned(),
        /// Share of new traces recorded (0.0 to 1.0); a request that comes with trace context follows its
        /// caller's sampling decision.
        pub sample_ratio: f64 = 1.0,
    }
}

impl TelemetryConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        const OTLP_ENDPOINT: &str = key!(telemetry.otlp_endpoint);
        if let Some(endpoint) = &self.otlp_endpoint {
            if !cfg!(feature = "otel") {
                return Err(ConfigError::Invalid {
                    key: OTLP_ENDPOINT,
                    message: "this build has no OpenTelemetry support (build with `--features otel`), \
                              or leave the key unset"
                        .to_owned(),
                });
            }
            let is_http = endpoint.starts_with("http://") || endpoint.starts_with("https://");
            if !is_http || endpoint.parse::<axum::http::Uri>().is_err() {
                return Err(ConfigError::Invalid {
                    key: OTLP_ENDPOINT,
                    message: format!("{endpoint:?} is not an http:// or https:// URL"),
                });
            }
        }
        if self.service_name.trim().is_empty() {
            return Err(ConfigError::Invalid {
                key: key!(telemetry.service_name),
                message: "must not be empty".to_owned(),
            });
        }
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Err(ConfigError::Invalid {
                key: key!(telemetry.sample_ratio),
                message: "must be between 0.0 and 1.0".to_owned(),
            });
        }
        Ok(())
    }
}
