//! The request span, made only when something is written in it.
//!
//! Every request runs in its `request` span: its method, route, id and, once known, status, agent, MCP
//! method and era are fields of every line written while it is served. At the default level a request
//! that goes well writes no line, yet a span made in the subscriber costs its creation (a slot in the
//! registry, the layers' bookkeeping), a record for each field learnt later, an entry and exit for each
//! poll of the request, and its close: about 2,200 instructions, 3 % of a cached read (bench/README.md).
//!
//! So unless spans are exported, a request's span is held as its values ([`RequestSpan`]), current on the
//! thread while the request is polled ([`RequestSpan::in_scope`]). The subscriber ([`OnDemand`]) makes it
//! the first time a line is written or a span is made inside the request, with every value recorded so
//! far, enters it around that line (or makes that span its child), and records later values on it: the
//! lines are those the span would have given from the start. A request nothing is written in never makes
//! it. When spans are exported, the span is made at once, since its timing and trace are the export.

use std::any::TypeId;
use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::num::NonZeroU64;

use axum::http::{HeaderValue, Method, Request};
use compact_str::CompactString;
use tracing::field::{Field, Value, ValueSet};
use tracing::level_filters::{LevelFilter, STATIC_MAX_LEVEL};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Level, Metadata, Span, Subscriber};
use tracing_core::callsite::DefaultCallsite;
use tracing_core::field::FieldSet;
use tracing_core::metadata::Kind;
use tracing_core::span::Current;
use tracing_subscriber::registry::LookupSpan;

scoped_tls::scoped_thread_local!(static CURRENT: RequestSpan);

/// The request span's fields, in the order of [`FIELD_NAMES`].
const OTEL_NAME: usize = 0;
const OTEL_KIND: usize = 1;
const OTEL_STATUS_CODE: usize = 2;
const METHOD: usize = 3;
const ROUTE: usize = 4;
const REQUEST_ID: usize = 5;
const AGENT: usize = 6;
const MCP_METHOD: usize = 7;
const MCP_ERA: usize = 8;
const STATUS: usize = 9;

/// The fields of the request span, in the order they are learnt (a span made late lists them as one made at
/// the start would have). `otel.*` are set only when spans are exported.
static FIELD_NAMES: [&str; 10] = [
    "otel.name",
    "otel.kind",
    "otel.status_code",
    "method",
    "route",
    "request_id",
    "agent",
    "mcp.method",
    "mcp.era",
    "status",
];

/// The request span's callsite: one, whether the span is made at once or on demand.
static CALLSITE: DefaultCallsite = DefaultCallsite::new(&META);

/// The request span's metadata, as `tracing::info_span!("request", …)` in `crate::http` would make it.
static META: Metadata<'static> = Metadata::new(
    "request",
    "hivegate::http",
    Level::INFO,
    Some(file!()),
    Some(line!()),
    Some(module_path!()),
    FieldSet::new(&FIELD_NAMES, tracing_core::identify_callsite!(&CALLSITE)),
    Kind::SPAN,
);

/// The field at `index` of [`FIELD_NAMES`].
fn field(index: usize) -> Field {
    META.fields().iter().nth(index).unwrap_or_else(|| unreachable!("the request span has {index} fields"))
}

/// Whether the request span is enabled at all: its level, and what the subscriber said of its callsite.
/// (With an export, the log filter is asked about every span, so the callsite is never "always" there and
/// `enabled` runs right before the span is made: `AlwaysAsked` in the parent module.)
fn is_enabled() -> bool {
    if Level::INFO > STATIC_MAX_LEVEL || Level::INFO > LevelFilter::current() {
        return false;
    }
    let interest = CALLSITE.interest();
    !interest.is_never()
        && (interest.is_always() || tracing::dispatcher::get_default(|dispatch| dispatch.enabled(&META)))
}

/// One request's span: its values, and the span once it is made.
pub struct RequestSpan {
    method: Method,
    route: Cow<'static, str>,
    request_id: HeaderValue,
    /// The values learnt while the request is served.
    late: RefCell<Late>,
    made: Made,
}

#[derive(Default)]
struct Late {
    status: Option<u16>,
    agent: Option<CompactString>,
    mcp_method: Option<&'static str>,
    era: Option<&'static str>,
}

enum Made {
    /// Made at once (spans are exported).
    Exported(Span),
    /// Made by [`OnDemand`] when something is written in it: its id then.
    OnDemand(Cell<Option<NonZeroU64>>),
}

impl RequestSpan {
    /// The span of `request`, matched to `route` (a route template, or `unmatched`) and known by
    /// `request_id`; `None` when the log filter leaves request spans out and nothing exports them. When
    /// spans are exported it is made at once and joins the trace of the request's `traceparent` header.
    pub fn new(request: &Request<axum::body::Body>, route: Cow<'static, str>, request_id: HeaderValue) -> Option<Self> {
        if !is_enabled() {
            return None;
        }
        let made = if super::is_exporting() {
            Made::Exported(Self::exported(request, &route, &request_id))
        } else {
            Made::OnDemand(Cell::new(None))
        };
        let method = request.method().clone();
        Some(Self { method, route, request_id, late: RefCell::new(Late::default()), made })
    }

    /// The span made at once, with the fields only an export uses.
    fn exported(request: &Request<axum::body::Body>, route: &str, request_id: &HeaderValue) -> Span {
        let method = request.method().as_str();
        let request_id = request_id.to_str().unwrap_or("");
        let fields = [field(METHOD), field(ROUTE), field(REQUEST_ID)];
        let values = [
            (&fields[0], Some(&method as &dyn Value)),
            (&fields[1], Some(&route as &dyn Value)),
            (&fields[2], Some(&request_id as &dyn Value)),
        ];
        let span = Span::new(&META, &META.fields().value_set(&values));
        span.record(FIELD_NAMES[OTEL_NAME], format_args!("{method} {route}"));
        span.record(FIELD_NAMES[OTEL_KIND], "server");
        let parent = super::TraceParent::from_headers(request.headers());
        super::set_remote_parent(&span, parent.as_ref());
        span
    }

    /// Runs `work` with this span the request's: lines written and spans made in it are inside it, and
    /// [`record_agent`] and [`record_message`] record on it.
    pub fn in_scope<T>(&self, work: impl FnOnce() -> T) -> T {
        CURRENT.set(self, || match &self.made {
            Made::Exported(span) => span.in_scope(work),
            Made::OnDemand(_) => work(),
        })
    }

    /// Records the answer's status: a field of every line from here on, and of the exported span (which a
    /// 5xx, `failed`, also marks as failed).
    pub fn record_status(&self, status: u16, failed: bool) {
        if self.keep(|late| late.status = Some(status)) {
            let status_field = field(STATUS);
            let values = [(&status_field, Some(&status as &dyn Value))];
            self.record_made(&META.fields().value_set(&values));
        }
        if failed && let Made::Exported(span) = &self.made {
            span.record(FIELD_NAMES[OTEL_STATUS_CODE], "error");
        }
    }

    fn record_agent(&self, agent: &str) {
        if self.keep(|late| late.agent = Some(CompactString::from(agent))) {
            let agent_field = field(AGENT);
            let values = [(&agent_field, Some(&agent as &dyn Value))];
            self.record_made(&META.fields().value_set(&values));
        }
    }

    fn record_message(&self, agent: &str, method: &'static str, era: &'static str) {
        let kept = self.keep(|late| {
            late.agent = Some(CompactString::from(agent));
            late.mcp_method = Some(method);
            late.era = Some(era);
        });
        if kept {
            let fields = [field(AGENT), field(MCP_METHOD), field(MCP_ERA)];
            let values = [
                (&fields[0], Some(&agent as &dyn Value)),
                (&fields[1], Some(&method as &dyn Value)),
                (&fields[2], Some(&era as &dyn Value)),
            ];
            self.record_made(&META.fields().value_set(&values));
        }
    }

    /// Keeps values for a span made on demand, with `update`; whether the span is made, so that they are to
    /// be recorded on it too.
    fn keep(&self, update: impl FnOnce(&mut Late)) -> bool {
        match &self.made {
            Made::Exported(_) => true,
            Made::OnDemand(made) => {
                if let Ok(mut late) = self.late.try_borrow_mut() {
                    update(&mut late);
                }
                made.get().is_some()
            }
        }
    }

    /// Records `values` on the span, if it is made; a span not yet made takes them when it is.
    fn record_made(&self, values: &ValueSet<'_>) {
        match &self.made {
            Made::Exported(span) => {
                span.record_all(values);
            }
            Made::OnDemand(id) => {
                if let Some(id) = id.get() {
                    let id = Id::from_non_zero_u64(id);
                    tracing::dispatcher::get_default(|dispatch| dispatch.record(&id, &Record::new(values)));
                }
            }
        }
    }

    /// The span made on demand in `subscriber`, made now if it is not yet; `None` for a span made at once
    /// (entered whenever the request is polled) or one the subscriber does not enable.
    fn made_in<S: Subscriber>(&self, subscriber: &S) -> Option<Id> {
        let Made::OnDemand(made) = &self.made else { return None };
        if let Some(id) = made.get() {
            return Some(Id::from_non_zero_u64(id));
        }
        if !subscriber.enabled(&META) {
            return None;
        }
        let late = self.late.try_borrow().ok()?;
        let method = self.method.as_str();
        let route = self.route.as_ref();
        let request_id = self.request_id.to_str().unwrap_or("");
        let fields = [
            field(METHOD),
            field(ROUTE),
            field(REQUEST_ID),
            field(AGENT),
            field(MCP_METHOD),
            field(MCP_ERA),
            field(STATUS),
        ];
        let agent = late.agent.as_deref();
        let values = [
            (&fields[0], Some(&method as &dyn Value)),
            (&fields[1], Some(&route as &dyn Value)),
            (&fields[2], Some(&request_id as &dyn Value)),
            (&fields[3], agent.as_ref().map(|agent| agent as &dyn Value)),
            (&fields[4], late.mcp_method.as_ref().map(|method| method as &dyn Value)),
            (&fields[5], late.era.as_ref().map(|era| era as &dyn Value)),
            (&fields[6], late.status.as_ref().map(|status| status as &dyn Value)),
        ];
        let id = subscriber.new_span(&Attributes::new(&META, &META.fields().value_set(&values)));
        made.set(Some(id.into_non_zero_u64()));
        Some(id)
    }
}

impl Drop for RequestSpan {
    fn drop(&mut self) {
        if let Made::OnDemand(made) = &self.made
            && let Some(id) = made.get()
        {
            tracing::dispatcher::get_default(|dispatch| dispatch.try_close(Id::from_non_zero_u64(id)));
        }
    }
}

/// Runs `work` in `span`'s scope, if there is a span.
pub fn in_scope<T>(span: Option<&RequestSpan>, work: impl FnOnce() -> T) -> T {
    match span {
        Some(span) => span.in_scope(work),
        None => work(),
    }
}

/// Names the agent on the current request's span, so that every later line of the request does.
pub fn record_agent(agent: &str) {
    if CURRENT.is_set() {
        CURRENT.with(|span| span.record_agent(agent));
    }
}

/// Names the agent, the MCP method (its bounded label, or `batch`) and the era on the current request's
/// span, in one record.
pub fn record_message(agent: &str, method: &'static str, era: &'static str) {
    if CURRENT.is_set() {
        CURRENT.with(|span| span.record_message(agent, method, era));
    }
}

/// A subscriber that makes the current request's span on demand ([`RequestSpan`]) and otherwise is `inner`.
pub struct OnDemand<S> {
    inner: S,
}

impl<S> OnDemand<S> {
    pub fn new(inner: S) -> Self {
        Self { inner }
    }
}

impl<S> OnDemand<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    /// Runs `work` (writing a line or making a span, in the current context) inside the current request's
    /// span, making it if it is not yet: entered around `work` unless the current span is already inside
    /// it (a span made in the request, say).
    fn inside<T>(&self, work: impl FnOnce() -> T) -> T {
        let id = CURRENT.with(|request| request.made_in(&self.inner));
        match id {
            Some(id) if !self.is_inside(&id) => {
                self.inner.enter(&id);
                let _exit = Exit { subscriber: &self.inner, id: &id };
                work()
            }
            _ => work(),
        }
    }

    /// Whether the current span is `id` or a span inside it.
    fn is_inside(&self, id: &Id) -> bool {
        let current = self.inner.current_span();
        let Some(current) = current.id() else { return false };
        current == id || self.inner.span(current).is_some_and(|span| span.scope().any(|span| span.id() == *id))
    }
}

/// Exits the span when dropped.
struct Exit<'a, S: Subscriber> {
    subscriber: &'a S,
    id: &'a Id,
}

impl<S: Subscriber> Drop for Exit<'_, S> {
    fn drop(&mut self) {
        self.subscriber.exit(self.id);
    }
}

impl<S> Subscriber for OnDemand<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        self.inner.on_register_dispatch(subscriber);
    }

    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        self.inner.register_callsite(metadata)
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.inner.enabled(metadata)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.inner.max_level_hint()
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        if span.is_contextual() && CURRENT.is_set() {
            self.inside(|| self.inner.new_span(span))
        } else {
            self.inner.new_span(span)
        }
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        self.inner.record(span, values);
    }

    fn record_follows_from(&self, span: &Id, follows: &Id) {
        self.inner.record_follows_from(span, follows);
    }

    fn event_enabled(&self, event: &Event<'_>) -> bool {
        self.inner.event_enabled(event)
    }

    fn event(&self, event: &Event<'_>) {
        if event.is_contextual() && CURRENT.is_set() {
            self.inside(|| self.inner.event(event));
        } else {
            self.inner.event(event);
        }
    }

    fn enter(&self, span: &Id) {
        self.inner.enter(span);
    }

    fn exit(&self, span: &Id) {
        self.inner.exit(span);
    }

    fn clone_span(&self, id: &Id) -> Id {
        self.inner.clone_span(id)
    }

    fn try_close(&self, id: Id) -> bool {
        self.inner.try_close(id)
    }

    fn current_span(&self) -> Current {
        self.inner.current_span()
    }

    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            return Some(std::ptr::from_ref(self).cast());
        }
        // SAFETY: the inner subscriber's answer for a type that is not ours, as its contract requires.
        unsafe { self.inner.downcast_raw(id) }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::http::{HeaderValue, Request};
    use tracing::span::{Attributes, Id};
    use tracing::{Level, Subscriber};
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::layer::{Context, SubscriberExt as _};
    use tracing_subscriber::registry::LookupSpan;

    use super::{OnDemand, RequestSpan, record_message};
    use crate::telemetry::deferred::Deferred;
    use crate::telemetry::lines::Lines;

    /// Counts the `request` spans made and closed.
    #[derive(Clone, Default)]
    struct Made {
        made: Arc<AtomicUsize>,
        closed: Arc<AtomicUsize>,
    }

    impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Made {
        fn on_new_span(&self, attributes: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
            if attributes.metadata().name() == "request" {
                self.made.fetch_add(1, Ordering::SeqCst);
            }
        }

        fn on_close(&self, id: Id, context: Context<'_, S>) {
            if context.span(&id).is_some_and(|span| span.name() == "request") {
                self.closed.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    fn request() -> Request<axum::body::Body> {
        Request::builder().method("POST").uri("/bot/mcp").body(axum::body::Body::empty()).unwrap_or_default()
    }

    /// A request as the server serves one, with the span made on demand: polls that record the message and
    /// write lines (one in a span made inside the request), the answer's status, a line after it.
    fn on_demand() {
        let span = RequestSpan::new(&request(), "/{agent_id}/mcp".into(), HeaderValue::from_static("req-1"));
        let span = span.as_ref();
        super::in_scope(span, || tracing::debug!("below the level: makes nothing"));
        super::in_scope(span, || record_message("bot", "resources/read", "legacy"));
        super::in_scope(span, || tracing::warn!(answer = 42, "first line"));
        super::in_scope(span, || {
            let store = tracing::info_span!("store", key = "k");
            store.in_scope(|| tracing::info!("in a span inside the request"));
        });
        if let Some(span) = span {
            span.record_status(500, true);
        }
        super::in_scope(span, || tracing::error!("after the answer"));
    }

    /// The same request with its span made at the start, as a `tracing` span.
    fn made_at_once() {
        let span = tracing::info_span!(
            "request",
            method = "POST",
            route = "/{agent_id}/mcp",
            request_id = "req-1",
            agent = tracing::field::Empty,
            mcp.method = tracing::field::Empty,
            mcp.era = tracing::field::Empty,
            status = tracing::field::Empty,
        );
        span.in_scope(|| tracing::debug!("below the level: makes nothing"));
        span.record("agent", "bot").record("mcp.method", "resources/read").record("mcp.era", "legacy");
        span.in_scope(|| tracing::warn!(answer = 42, "first line"));
        span.in_scope(|| {
            let store = tracing::info_span!("store", key = "k");
            store.in_scope(|| tracing::info!("in a span inside the request"));
        });
        span.record("status", 500u16);
        span.in_scope(|| tracing::error!("after the answer"));
    }

    /// The registry under its filter, as the server installs it without an export.
    type Filtered = tracing_subscriber::layer::Layered<Targets, tracing_subscriber::Registry>;

    fn written<L>(layer: L, lines: &Lines, made: &Made, lazy: bool) -> String
    where
        L: Layer<Filtered> + Send + Sync + 'static,
    {
        let subscriber = tracing_subscriber::registry()
            .with(Targets::new().with_default(Level::INFO))
            .with(layer)
            .with(made.clone());
        if lazy {
            tracing::subscriber::with_default(OnDemand::new(subscriber), on_demand);
        } else {
            tracing::subscriber::with_default(subscriber, made_at_once);
        }
        lines.text()
    }

    #[test]
    fn a_span_made_on_demand_writes_the_lines_of_one_made_at_once() {
        let plain = |lines: &Lines| {
            tracing_subscriber::fmt::layer()
                .without_time()
                .with_ansi(false)
                .with_target(false)
                .with_writer(lines.clone())
        };
        let (eager, lazy, made) = (Lines::default(), Lines::default(), Made::default());
        let expected = written(Deferred::new(plain(&eager).compact()), &eager, &Made::default(), false);
        let actual = written(Deferred::new(plain(&lazy).compact()), &lazy, &made, true);
        assert_eq!(actual.lines().count(), 3, "{actual}");
        let fields = r#"method="POST" route="/{agent_id}/mcp" request_id="req-1" agent="bot" mcp.method="resources/read" mcp.era="legacy""#;
        assert!(actual.contains(&format!("WARN request: first line answer=42 {fields}\n")), "{actual}");
        assert!(actual.contains(&format!("request:store: in a span inside the request {fields} key=\"k\"\n")));
        assert!(actual.contains(&format!("request: after the answer {fields} status=500\n")), "{actual}");
        assert_eq!(actual, expected);
        assert_eq!((made.made.load(Ordering::SeqCst), made.closed.load(Ordering::SeqCst)), (1, 1));

        let json = |lines: &Lines| plain(lines).json().flatten_event(true).with_current_span(true);
        let (eager, lazy) = (Lines::default(), Lines::default());
        let expected = written(Deferred::new(json(&eager)), &eager, &Made::default(), false);
        let actual = written(Deferred::new(json(&lazy)), &lazy, &Made::default(), true);
        assert_eq!(actual, expected);
    }

    #[test]
    fn a_request_nothing_is_written_in_makes_no_span() {
        let (lines, made) = (Lines::default(), Made::default());
        let layer = Deferred::new(tracing_subscriber::fmt::layer().with_writer(lines.clone()));
        let subscriber = tracing_subscriber::registry()
            .with(Targets::new().with_default(Level::INFO))
            .with(layer)
            .with(made.clone());
        tracing::subscriber::with_default(OnDemand::new(subscriber), || {
            let span = RequestSpan::new(&request(), "/{agent_id}/mcp".into(), HeaderValue::from_static("req-2"));
            assert!(span.is_some(), "the request span is enabled at info");
            let span = span.as_ref();
            super::in_scope(span, || record_message("bot", "resources/list", "modern"));
            super::in_scope(span, || tracing::debug!("below the level"));
            if let Some(span) = span {
                span.record_status(200, false);
            }
            // Outside the request's polls a line is not in it.
            tracing::warn!("not in the request");
        });
        assert_eq!(made.made.load(Ordering::SeqCst), 0);
        let text = lines.text();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!text.contains("request{"), "{text}");
    }

    #[test]
    fn a_filter_without_request_spans_gives_none() {
        let subscriber = tracing_subscriber::registry().with(Targets::new().with_default(Level::WARN));
        tracing::subscriber::with_default(OnDemand::new(subscriber), || {
            let span = RequestSpan::new(&request(), "/{agent_id}/mcp".into(), HeaderValue::from_static("req-3"));
            assert!(span.is_none());
        });
    }
}
