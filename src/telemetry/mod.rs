//! Logging and tracing: `tracing` to stderr, pretty or JSON, filtered by `RUST_LOG` or the configured level;
//! with the `otel` cargo feature and `telemetry.otlp_endpoint` set, the same spans exported as OpenTelemetry
//! traces over OTLP/HTTP.
//!
//! Every request runs in a `request` span ([`crate::http`]) that carries its request id, route and (once
//! authenticated) agent, so each log line of a request names them. The span joins the caller's trace when
//! the request carries W3C trace context ([`TraceParent`]); an MCP message's own context in `params._meta`
//! is the parent of that message's `mcp` span ([`crate::mcp`]), as the OpenTelemetry conventions for MCP
//! ask, with a link to the HTTP request's span. Without the feature these calls do nothing and nothing of
//! OpenTelemetry is compiled in.
//!
//! [`TraceParent`]: crate::telemetry::TraceParent

use tracing::Span;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::config::{LogConfig, LogFormat, TelemetryConfig};

/// W3C Trace Context parsing.
pub mod context;
/// The OpenTelemetry pipeline.
#[cfg(feature = "otel")]
mod otel;

pub use context::TraceParent;
#[cfg(feature = "otel")]
pub use otel::install_with_provider;

/// What [`init`] set up. [`Telemetry::shutdown`] it last: spans still buffered are exported then.
#[must_use = "shut telemetry down on exit, or buffered spans are lost"]
pub struct Telemetry {
    #[cfg(feature = "otel")]
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Telemetry {
    /// Exports the spans still buffered (waiting at most the exporter's timeout) and stops the exporter.
    /// Blocking: call it outside the async runtime's workers (`spawn_blocking`) or after the runtime.
    pub fn shutdown(self) {
        #[cfg(feature = "otel")]
        if let Some(provider) = self.provider
            && let Err(error) = provider.shutdown()
        {
            eprintln!("hivegate: exporting the last spans failed: {error}");
        }
    }
}

/// Installs the global subscriber; with `telemetry` (the server's), also the OpenTelemetry export it
/// configures. Safe to call more than once (later calls install nothing), which tests rely on. Fails only
/// when the configured OTLP exporter cannot be built.
pub fn init(log: &LogConfig, telemetry: Option<&TelemetryConfig>) -> anyhow::Result<Telemetry> {
    #[cfg(feature = "otel")]
    {
        let provider = match telemetry {
            Some(telemetry) => otel::provider(telemetry)?,
            None => None,
        };
        install(log, provider.as_ref().map(otel::layer));
        Ok(Telemetry { provider })
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = telemetry;
        install(log, None::<tracing_subscriber::layer::Identity>);
        Ok(Telemetry {})
    }
}

/// The log layer, filtered by `RUST_LOG` or `log.level`, next to `extra` (the OpenTelemetry layer, which
/// filters for itself). Returns whether this call installed the global subscriber.
fn install<L>(log: &LogConfig, extra: Option<L>) -> bool
where
    L: tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync,
{
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&log.level));
    // Colours only for a person at a terminal: a redirected stderr (a file, a log collector) gets plain text.
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let fmt = match log.format {
        LogFormat::Json => fmt.json().flatten_event(true).with_current_span(true).boxed(),
        LogFormat::Pretty => fmt.compact().boxed(),
    };
    tracing_subscriber::registry().with(extra).with(fmt.with_filter(filter)).try_init().is_ok()
}

/// Makes `span`, not yet entered, a child of the caller's span that `parent` names (the request's
/// `traceparent` header). Does nothing without the `otel` feature or when no traces are exported.
pub fn set_remote_parent(span: &Span, parent: Option<&TraceParent>) {
    #[cfg(feature = "otel")]
    if let Some(parent) = parent {
        otel::set_remote_parent(span, parent);
    }
    #[cfg(not(feature = "otel"))]
    let _ = (span, parent);
}

/// Makes `span`, not yet entered, a child of the caller's span that an MCP message's `_meta` names, linked
/// to the current span (the HTTP request's, in the trace of its headers). Without `parent`, `span` stays a
/// child of the current span. Does nothing without the `otel` feature or when no traces are exported.
pub fn follow_message_parent(span: &Span, parent: Option<&TraceParent>) {
    #[cfg(feature = "otel")]
    if let Some(parent) = parent {
        otel::set_remote_parent(span, parent);
        otel::link_current(span);
    }
    #[cfg(not(feature = "otel"))]
    let _ = (span, parent);
}
