//! The span of one MCP message, and the trace it belongs to.
//!
//! The MCP specification (2026-07-28, "OpenTelemetry trace context") reserves `traceparent` and `tracestate`
//! in a message's `params._meta`; the OpenTelemetry conventions for MCP make that context the parent of the
//! server's span of the message, linked to the transport's (HTTP) span, because one MCP request may travel in
//! several HTTP requests and one HTTP request may carry several messages. So the `request` span follows the
//! `traceparent` header ([`crate::http`]), and each message's `mcp` span follows its `_meta` when that holds
//! a well-formed `traceparent` — `_meta` wins — or else is a child of the request span. The message's
//! dispatch and store spans are children of its `mcp` span, and its audit record names the same trace.

use std::sync::OnceLock;

use tracing::callsite::Identifier;
use tracing::field::{Field, Value};
use tracing::span::{Id, Record};
use tracing::{Dispatch, Metadata, Span};

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

/// Names the agent on the current span (the request's), so that every later log line of the request does.
pub(super) fn record_agent(agent: &str) {
    on_current(|dispatch, id, metadata| {
        let fields = metadata.fields();
        if let Some(field) = fields.field("agent") {
            let values = [(&field, Some(&agent as &dyn Value))];
            dispatch.record(id, &Record::new(&fields.value_set(&values)));
        }
    });
}

/// Names the agent, the MCP method (its bounded label, or `batch`) and the era on the current span (the
/// request's), in one record: a POST's agent waits for its body, since nothing is logged in between.
pub(super) fn record_message(agent: &str, method: &'static str, era: &'static str) {
    on_current(|dispatch, id, metadata| {
        let fields = metadata.fields();
        if let Some([agent_field, method_field, era_field]) = message_fields(metadata) {
            let values = [
                (&agent_field, Some(&agent as &dyn Value)),
                (&method_field, Some(&method as &dyn Value)),
                (&era_field, Some(&era as &dyn Value)),
            ];
            dispatch.record(id, &Record::new(&fields.value_set(&values)));
        }
    });
}

/// The request span's `agent`, `mcp.method` and `mcp.era` fields in `fields`, looked up by name once for
/// the request span's callsite (there is one) rather than on every request.
fn message_fields(metadata: &Metadata<'static>) -> Option<[Field; 3]> {
    static FOUND: OnceLock<(Identifier, [Field; 3])> = OnceLock::new();
    if let Some((callsite, found)) = FOUND.get()
        && *callsite == metadata.callsite()
    {
        return Some(found.clone());
    }
    let fields = metadata.fields();
    let found = [fields.field("agent")?, fields.field("mcp.method")?, fields.field("mcp.era")?];
    let _ = FOUND.set((metadata.callsite(), found.clone()));
    Some(found)
}

/// Runs `record` with the current span's id and metadata, if there is a current span. Recording by id
/// spares the two lookups of the span that taking a handle on it (`Span::current()`) and letting it go
/// again cost.
fn on_current(mut record: impl FnMut(&Dispatch, &Id, &'static Metadata<'static>)) {
    tracing::dispatcher::get_default(|dispatch| {
        let current = dispatch.current_span();
        if let (Some(id), Some(metadata)) = (current.id(), current.metadata()) {
            record(dispatch, id, metadata);
        }
    });
}
