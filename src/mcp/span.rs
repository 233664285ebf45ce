//! The span of one MCP message, and the trace it belongs to.
//!
//! The MCP specification (2026-07-28, "OpenTelemetry trace context") reserves `traceparent` and `tracestate`
//! in a message's `params._meta`; the OpenTelemetry conventions for MCP make that context the parent of the
//! server's span of the message, linked to the transport's (HTTP) span, because one MCP request may travel in
//! several HTTP requests and one HTTP request may carry several messages. So the `request` span follows the
//! `traceparent` header ([`crate::http`]), and each message's `mcp` span follows its `_meta` when that holds
//! a well-formed `traceparent` — `_meta` wins — or else is a child of the request span. The message's
//! dispatch and store spans are children of its `mcp` span, and its audit record names the same trace.

use tracing::Span;

use super::dispatch::Method;
use super::jsonrpc::Call;
use crate::telemetry::{self, TraceParent};

/// The span of `call` in `era` (`legacy` or `modern`), and the trace context of its `_meta`, if any. Never
/// carries what the call names (URIs, prompt names, arguments): only its bounded method label. It is made
/// for trace export alone ([`telemetry::EXPORT_TARGET`]): log lines name the method and era through the
/// request span ([`record_message`]), so without an export it is not made at all.
pub(super) fn of_call(call: &Call, era: &'static str) -> (Span, Option<TraceParent>) {
    let parent = TraceParent::from_meta(call.params_object());
    let method = Method::label(&call.method);
    let span = tracing::info_span!(
        target: telemetry::EXPORT_TARGET,
        "mcp",
        otel.name = method,
        otel.kind = "server",
        mcp.method.name = method,
        mcp.era = era
    );
    telemetry::follow_message_parent(&span, parent.as_ref());
    (span, parent)
}

/// Names the agent on the request's span, so that every later log line of the request does.
pub(super) fn record_agent(agent: &str) {
    telemetry::request::record_agent(agent);
}

/// Names the agent, the MCP method (its bounded label, or `batch`) and the era on the request's span, in
/// one record: a POST's agent waits for its body, since nothing is logged in between.
pub(super) fn record_message(agent: &str, method: &'static str, era: &'static str) {
    telemetry::request::record_message(agent, method, era);
}
