//! The OpenTelemetry pipeline of the `otel` feature: a tracer provider exporting OTLP/HTTP protobuf in
//! batches (on the SDK's own thread, with a blocking reqwest client), sampled parent-based with
//! `telemetry.sample_ratio` for new traces, bridged from `tracing` by `tracing-opentelemetry`.

use std::str::FromStr as _;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState};
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::{Level, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::{Layer, Registry};

use super::TraceParent;
use crate::config::{LogConfig, TelemetryConfig};

/// The OTLP/HTTP path of traces under the collector's base URL.
const TRACES_PATH: &str = "/v1/traces";

/// The provider exporting to `telemetry.otlp_endpoint`; `None` when it is unset.
pub(super) fn provider(config: &TelemetryConfig) -> anyhow::Result<Option<SdkTracerProvider>> {
    let Some(endpoint) = &config.otlp_endpoint else { return Ok(None) };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces_url(endpoint))
        .build()
        .map_err(|error| anyhow::anyhow!("cannot build the OTLP exporter for {endpoint}: {error}"))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(config.sample_ratio))))
        .with_resource(Resource::builder().with_service_name(config.service_name.clone()).build())
        .build();
    Ok(Some(provider))
}

/// `<endpoint>/v1/traces`, unless the endpoint already names that path.
fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with(TRACES_PATH) { base.to_owned() } else { format!("{base}{TRACES_PATH}") }
}

/// The layer turning hivegate's spans (`info` and above; dependencies' spans are left out) into
/// OpenTelemetry spans of `provider`.
pub(super) fn layer(provider: &SdkTracerProvider) -> impl Layer<Registry> + Send + Sync + use<> {
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("hivegate"))
        .with_filter(Targets::new().with_target("hivegate", Level::INFO))
}

/// Installs the global subscriber as [`super::init`] does, exporting through `provider` instead of the
/// configured endpoint (the integration tests use an in-memory exporter). Returns whether it was installed:
/// `false` when a global subscriber already exists.
pub fn install_with_provider(log: &LogConfig, provider: &SdkTracerProvider) -> bool {
    super::install(log, Some(layer(provider)))
}

pub(super) fn set_remote_parent(span: &Span, parent: &TraceParent) {
    let state = parent.state().and_then(|state| TraceState::from_str(state).ok()).unwrap_or_default();
    let flags = if parent.is_sampled() { TraceFlags::SAMPLED } else { TraceFlags::default() };
    let context = SpanContext::new(
        TraceId::from_bytes(parent.trace_id()),
        SpanId::from_bytes(parent.span_id()),
        flags,
        true,
        state,
    );
    // Only fails when the span is disabled or already started, when there is nothing to join.
    let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(context));
}

/// Links `span` to the current span.
pub(super) fn link_current(span: &Span) {
    let current = Span::current().context();
    span.add_link(current.span().span_context().clone());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_go_to_the_otlp_traces_path() {
        for (endpoint, traces) in [
            ("http://collector:4318", "http://collector:4318/v1/traces"),
            ("http://collector:4318/", "http://collector:4318/v1/traces"),
            ("https://otel.example/tenant/a", "https://otel.example/tenant/a/v1/traces"),
            ("http://collector:4318/v1/traces", "http://collector:4318/v1/traces"),
        ] {
            assert_eq!(traces_url(endpoint), traces);
        }
    }
}
