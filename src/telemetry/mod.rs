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
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{FilterExt as _, LevelFilter, Targets, filter_fn};
use tracing_subscriber::layer::Context;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::config::{LogConfig, LogFormat, TelemetryConfig};

/// W3C Trace Context parsing.
pub mod context;
/// Span fields formatted only for the lines that show them.
mod deferred;
/// A log writer for tests.
#[cfg(test)]
mod lines;
/// The OpenTelemetry pipeline.
#[cfg(feature = "otel")]
mod otel;
/// The request span, made only when something is written in it.
pub mod request;

pub use context::TraceParent;
use deferred::Deferred;
#[cfg(feature = "otel")]
pub use otel::install_with_provider;
use request::OnDemand;

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

/// The log layer, filtered by `RUST_LOG` or `log.level` (spans of [`EXPORT_TARGET`] left out), next to
/// `extra` (the OpenTelemetry layer, which filters for itself). Returns whether this call installed the global
/// subscriber.
///
/// Unless spans are exported, the subscriber makes a request's span only when something is written in it
/// ([`OnDemand`]); the log layer sees span fields only when it writes a line inside the span ([`Deferred`]).
/// A filter of targets and levels alone (`info`, `hivegate=debug,sqlx=warn`: every filter but those that
/// name spans or field values in `[...]`) is a [`Targets`] filter, which decides by a callsite's target and
/// level and keeps nothing per span; `EnvFilter`, which the others need, keeps every span in a map behind a
/// lock that each span's creation, entry, exit and close take.
///
/// Without `extra` the log filter is the subscriber's own: what it leaves out is never made, and a span
/// costs no per-layer bookkeeping. A filter of the log layer alone (with `extra`, which wants other spans)
/// looks the span up again on each of its creation, entries, exits, records and close, to tell whether it
/// is the log layer's: about a tenth of the request path's own time at the default level (bench/README.md);
/// and it is asked about every span and event, never only once per callsite ([`AlwaysAsked`]).
fn install<L>(log: &LogConfig, extra: Option<L>) -> bool
where
    L: tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync,
{
    let spec = std::env::var("RUST_LOG").ok().filter(|spec| EnvFilter::try_new(spec).is_ok());
    let spec = spec.as_deref().unwrap_or(&log.level);
    match (extra, static_filter(spec)) {
        (Some(extra), targets) => {
            let for_logs = filter_fn(|metadata| metadata.target() != EXPORT_TARGET);
            let fmt = match targets {
                Some(targets) => log_layer(log).with_filter(AlwaysAsked(targets.and(for_logs))).boxed(),
                None => log_layer(log).with_filter(AlwaysAsked(EnvFilter::new(spec).and(for_logs))).boxed(),
            };
            // Spans are made at once when they are exported: no `OnDemand`.
            let installed = tracing_subscriber::registry().with(extra).with(fmt).try_init().is_ok();
            if installed {
                EXPORTING.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            installed
        }
        (None, Some(targets)) => {
            let subscriber = tracing_subscriber::registry().with(without_export(targets)).with(log_layer(log));
            OnDemand::new(subscriber).try_init().is_ok()
        }
        (None, None) => {
            let filter = EnvFilter::new(format!("{spec},{EXPORT_TARGET}=off"));
            OnDemand::new(tracing_subscriber::registry().with(filter).with(log_layer(log))).try_init().is_ok()
        }
    }
}

/// A log layer's own filter (beside the OpenTelemetry layer, which wants other spans), asked about every span
/// and event, never only once for its callsite.
///
/// tracing-subscriber hands a per-layer filter's answer from `enabled` to the creation of the span or event
/// through thread-local state. A callsite every layer always wants is made without `enabled` being called,
/// so its creation would read whatever an earlier call left there: after a bare `tracing::enabled!` check
/// (ours, or sqlx's after each query) of something the log layer does not want, the next such span or event
/// was left out of the logs (tokio-rs/tracing#2519). Capping the filter's interest at "sometimes" has every
/// one asked first.
struct AlwaysAsked<F>(F);

impl<S, F: tracing_subscriber::layer::Filter<S>> tracing_subscriber::layer::Filter<S> for AlwaysAsked<F> {
    fn enabled(&self, metadata: &tracing::Metadata<'_>, context: &Context<'_, S>) -> bool {
        self.0.enabled(metadata, context)
    }

    fn callsite_enabled(&self, metadata: &'static tracing::Metadata<'static>) -> Interest {
        let interest = self.0.callsite_enabled(metadata);
        if interest.is_always() { Interest::sometimes() } else { interest }
    }

    fn event_enabled(&self, event: &tracing::Event<'_>, context: &Context<'_, S>) -> bool {
        self.0.event_enabled(event, context)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.0.max_level_hint()
    }

    fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, context: Context<'_, S>) {
        self.0.on_new_span(attributes, id, context);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, context: Context<'_, S>) {
        self.0.on_record(id, values, context);
    }

    fn on_enter(&self, id: &Id, context: Context<'_, S>) {
        self.0.on_enter(id, context);
    }

    fn on_exit(&self, id: &Id, context: Context<'_, S>) {
        self.0.on_exit(id, context);
    }

    fn on_close(&self, id: Id, context: Context<'_, S>) {
        self.0.on_close(id, context);
    }
}

/// `targets` with the spans made for trace export alone ([`EXPORT_TARGET`]) left out, whatever level the
/// filter gives `hivegate` (the more specific target wins).
fn without_export(targets: Targets) -> Targets {
    targets.with_target(EXPORT_TARGET, LevelFilter::OFF)
}

/// The log layer in the configured format, to stderr, its span fields [`Deferred`].
fn log_layer<S>(log: &LogConfig) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a> + Send + Sync,
{
    // Colours only for a person at a terminal: a redirected stderr (a file, a log collector) gets plain text.
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match log.format {
        LogFormat::Json => Deferred::new(fmt.json().flatten_event(true).with_current_span(true)).boxed(),
        LogFormat::Pretty => Deferred::new(fmt.compact()).boxed(),
    }
}

/// The target of spans made for trace export alone, which log lines leave out: the `mcp` span of each
/// message and its dispatch span (`call`, `notify`), whose agent, method and era the request span carries
/// too. Without an export nothing enables them, so they cost nothing.
pub const EXPORT_TARGET: &str = "hivegate::export";

/// Whether the installed subscriber exports spans (OpenTelemetry): only then are fields that serve the
/// export alone, such as a span's `otel.name`, worth making.
static EXPORTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether spans are exported as OpenTelemetry traces.
pub fn is_exporting() -> bool {
    EXPORTING.load(std::sync::atomic::Ordering::Relaxed)
}

/// `spec` as a filter of targets and levels, unless it names spans or field values (`[...]`), which only
/// `EnvFilter` can match.
fn static_filter(spec: &str) -> Option<Targets> {
    if spec.contains('[') {
        return None;
    }
    spec.split(',').map(str::trim).filter(|directive| !directive.is_empty()).collect::<Vec<_>>().join(",").parse().ok()
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

#[cfg(test)]
mod tests {
    use tracing::Level;
    use tracing::level_filters::LevelFilter;

    use tracing::Subscriber;
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::layer::{Identity, SubscriberExt as _};

    use super::lines::Lines;
    use super::{AlwaysAsked, EXPORT_TARGET, static_filter, without_export};

    /// A log layer beside a layer that wants everything (as the OpenTelemetry layer does), filtered as the
    /// server filters it when traces are exported; its lines into `lines`.
    fn beside_an_export(lines: &Lines) -> impl Subscriber + Send + Sync + 'static {
        let log = tracing_subscriber::fmt::layer().without_time().with_ansi(false).with_target(false);
        let log = log.with_writer(lines.clone()).with_filter(AlwaysAsked(Targets::new().with_default(Level::INFO)));
        tracing_subscriber::registry().with(Identity::new()).with(log)
    }

    /// What the log layer writes of a span made right after a bare check of something it leaves out.
    fn after_a_bare_check(subscriber: impl Subscriber + Send + Sync + 'static, lines: &Lines) -> String {
        tracing::subscriber::with_default(subscriber, || {
            // Leaves the log filter's "no" behind, as sqlx's checks after each query do.
            assert!(tracing::enabled!(Level::DEBUG), "the other layer wants everything");
            let span = tracing::info_span!("request", request_id = "req-1");
            span.in_scope(|| tracing::warn!("inside"));
        });
        lines.text()
    }

    #[test]
    fn beside_an_export_a_span_made_after_a_bare_check_is_in_the_logs() {
        let lines = Lines::default();
        let text = after_a_bare_check(beside_an_export(&lines), &lines);
        assert_eq!(text, " WARN request{request_id=\"req-1\"}: inside\n");
    }

    #[test]
    fn export_spans_stay_out_of_the_logs_at_any_level() {
        for spec in ["info", "trace", "hivegate=trace", "warn,hivegate::mcp=debug"] {
            let targets = without_export(static_filter(spec).expect("a static filter"));
            assert!(!targets.would_enable(EXPORT_TARGET, &Level::ERROR), "{spec}");
        }
        let targets = without_export(static_filter("hivegate=debug").expect("a static filter"));
        assert!(targets.would_enable("hivegate::http", &Level::DEBUG), "other targets keep their level");
    }

    #[test]
    fn targets_and_levels_make_a_static_filter_and_span_filters_do_not() {
        let level = |spec: &str| static_filter(spec).map(|targets| targets.default_level());
        assert_eq!(level("info"), Some(Some(LevelFilter::INFO)));
        assert_eq!(level("warn,hivegate=debug"), Some(Some(LevelFilter::WARN)));
        let targets = static_filter(" hivegate=debug , sqlx=warn ").expect("a static filter");
        assert!(targets.would_enable("hivegate::http", &Level::DEBUG));
        assert!(!targets.would_enable("sqlx::query", &Level::INFO));
        assert!(!targets.would_enable("tower", &Level::ERROR), "a target no directive names is off, as in EnvFilter");
        // Spans and field values need EnvFilter; so does anything Targets cannot read.
        assert!(static_filter("hivegate[request]=debug").is_none());
        assert!(static_filter("[{agent=bench}]=trace").is_none());
        assert!(static_filter("hivegate=loud").is_none());
    }
}
