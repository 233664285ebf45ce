//! Span fields formatted only for the lines that show them.
//!
//! tracing-subscriber's fmt layer formats a span's fields (as text, or as JSON) when the span is created and
//! again each time a field is recorded, whether or not any line is ever written inside the span. Every
//! request has its `request` span and every MCP message its `mcp` span, so at the default level, where a
//! request that goes well writes no line, that formatting was work for nothing on every request.
//!
//! [`Deferred`] sits between the log filter and the fmt layer. It keeps a new span's values as they are
//! (strings copied into one buffer, numbers as numbers; only `%`/`?` values, which have no other form, as
//! their text) and records later values there too. When an event is about to be written, it first hands the
//! kept values of every span the event is in to the fmt layer, which formats them exactly as it would have
//! at the start; from then on that span's records go straight through. A span nothing is written in is
//! never formatted.

use std::fmt::{self, Write as _};

use smallvec::SmallVec;
use tracing::field::{Field, FieldSet, Value, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// The fmt layer (or any layer), fed a span's fields only once a line inside it is written.
pub struct Deferred<L> {
    inner: L,
}

impl<L> Deferred<L> {
    pub fn new(inner: L) -> Self {
        Self { inner }
    }
}

/// A span's values not yet handed to the inner layer, in the order they came. Held inline (a request span's
/// values fit), so that keeping them costs the span no allocation beyond the box its extensions put it in;
/// small, since it is moved into that box.
struct Pending {
    /// The text of every string value, one after the other (and the bytes of 128-bit numbers).
    text: Text,
    /// Each value with the index of its field in the span's field set.
    values: SmallVec<[(u32, Raw); PENDING_VALUES]>,
}

/// The text a span's values keep inline: a request's method, id (36 bytes when hivegate makes it), route,
/// MCP method and era, and an agent id of up to 16 bytes.
const PENDING_TEXT: usize = 96;
/// The values a span keeps inline: those the request span is given.
const PENDING_VALUES: usize = 8;

/// One kept value; text values are ranges of [`Pending::text`], and so are 128-bit numbers (their 16
/// little-endian bytes), which would double the size of every value.
enum Raw {
    Str(u32, u32),
    /// A `Debug` or `Display` value, as it showed itself.
    Shown(u32, u32),
    I64(i64),
    U64(u64),
    I128(u32),
    U128(u32),
    F64(f64),
    Bool(bool),
}

/// Bytes kept inline up to [`PENDING_TEXT`], then all of them on the heap. Appending is one copy (a
/// `SmallVec`'s `extend_from_slice` is an insert: two, and a reserve).
struct Text {
    inline: [u8; PENDING_TEXT],
    len: usize,
    /// Every byte, once the inline part would overflow.
    heap: Vec<u8>,
}

impl Text {
    fn new() -> Self {
        Self { inline: [0; PENDING_TEXT], len: 0, heap: Vec::new() }
    }

    fn push(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        match self.inline.get_mut(self.len..end) {
            Some(room) if self.heap.is_empty() => room.copy_from_slice(bytes),
            _ => {
                if self.heap.is_empty() {
                    self.heap.extend_from_slice(&self.inline[..self.len]);
                }
                self.heap.extend_from_slice(bytes);
            }
        }
        self.len = end;
    }

    fn bytes(&self) -> &[u8] {
        if self.heap.is_empty() { &self.inline[..self.len] } else { &self.heap }
    }
}

impl Pending {
    fn of(attributes: &Attributes<'_>) -> Self {
        let mut pending = Self { text: Text::new(), values: SmallVec::new() };
        attributes.record(&mut pending);
        pending
    }

    fn push(&mut self, field: &Field, raw: Raw) {
        // A field set has at most 32 fields.
        self.values.push((field.index() as u32, raw));
    }

    /// Where the next text starts.
    fn end(&self) -> u32 {
        self.text.len as u32
    }

    /// The text kept from `start` to `end`.
    fn text(&self, start: u32, end: u32) -> &str {
        let bytes = self.text.bytes().get(start as usize..end as usize);
        bytes.and_then(|bytes| std::str::from_utf8(bytes).ok()).unwrap_or_default()
    }

    /// The 16 bytes kept from `start`.
    fn bytes16(&self, start: u32) -> [u8; 16] {
        let start = start as usize;
        self.text.bytes().get(start..start + 16).and_then(|bytes| bytes.try_into().ok()).unwrap_or_default()
    }
}

/// `Debug`/`Display` output written into a span's kept text.
struct TextSink<'a>(&'a mut Text);

impl fmt::Write for TextSink<'_> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        self.0.push(text.as_bytes());
        Ok(())
    }
}

impl Visit for Pending {
    fn record_str(&mut self, field: &Field, value: &str) {
        let start = self.end();
        self.text.push(value.as_bytes());
        self.push(field, Raw::Str(start, self.end()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let start = self.end();
        let _ = write!(TextSink(&mut self.text), "{value:?}");
        self.push(field, Raw::Shown(start, self.end()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, Raw::I64(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, Raw::U64(value));
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        let start = self.end();
        self.text.push(&value.to_le_bytes());
        self.push(field, Raw::I128(start));
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        let start = self.end();
        self.text.push(&value.to_le_bytes());
        self.push(field, Raw::U128(start));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field, Raw::F64(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, Raw::Bool(value));
    }
}

impl<L> Deferred<L> {
    /// Hands `id`'s kept values, if any, to the inner layer: one record each, in their order (the first one,
    /// or an empty record when there is none, makes the inner layer's formatted fields).
    fn flush<S>(&self, id: &Id, ctx: &Context<'_, S>)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
        L: Layer<S>,
    {
        let Some(span) = ctx.span(id) else { return };
        let Some(pending) = span.extensions_mut().remove::<Pending>() else { return };
        let fields = span.metadata().fields();
        if pending.values.is_empty() {
            let none: [(&Field, Option<&dyn Value>); 0] = [];
            self.inner.on_record(id, &Record::new(&fields.value_set(&none)), ctx.clone());
        }
        for (index, raw) in &pending.values {
            let Some(field) = fields.iter().nth(*index as usize) else { continue };
            let field = &field;
            let text = |start: u32, end: u32| pending.text(start, end);
            match *raw {
                Raw::Str(start, end) => self.record_one(id, fields, field, &text(start, end), ctx),
                Raw::Shown(start, end) => {
                    self.record_one(id, fields, field, &tracing::field::display(text(start, end)), ctx);
                }
                Raw::I64(value) => self.record_one(id, fields, field, &value, ctx),
                Raw::U64(value) => self.record_one(id, fields, field, &value, ctx),
                Raw::I128(start) => {
                    self.record_one(id, fields, field, &i128::from_le_bytes(pending.bytes16(start)), ctx);
                }
                Raw::U128(start) => {
                    self.record_one(id, fields, field, &u128::from_le_bytes(pending.bytes16(start)), ctx);
                }
                Raw::F64(value) => self.record_one(id, fields, field, &value, ctx),
                Raw::Bool(value) => self.record_one(id, fields, field, &value, ctx),
            }
        }
    }

    fn record_one<S>(&self, id: &Id, fields: &FieldSet, field: &Field, value: &dyn Value, ctx: &Context<'_, S>)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
        L: Layer<S>,
    {
        let one = [(field, Some(value))];
        self.inner.on_record(id, &Record::new(&fields.value_set(&one)), ctx.clone());
    }
}

impl<S, L> Layer<S> for Deferred<L>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    L: Layer<S>,
{
    fn on_register_dispatch(&self, subscriber: &tracing::Dispatch) {
        self.inner.on_register_dispatch(subscriber);
    }

    fn on_layer(&mut self, subscriber: &mut S) {
        self.inner.on_layer(subscriber);
    }

    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        self.inner.register_callsite(metadata)
    }

    fn enabled(&self, metadata: &Metadata<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.enabled(metadata, ctx)
    }

    fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Pending::of(attributes));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(pending) = span.extensions_mut().get_mut::<Pending>()
        {
            values.record(pending);
            return;
        }
        self.inner.on_record(id, values, ctx);
    }

    fn on_follows_from(&self, span: &Id, follows: &Id, ctx: Context<'_, S>) {
        self.inner.on_follows_from(span, follows, ctx);
    }

    fn event_enabled(&self, event: &Event<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.event_enabled(event, ctx)
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                self.flush(&span.id(), &ctx);
            }
        }
        self.inner.on_event(event, ctx);
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        self.inner.on_enter(id, ctx);
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        self.inner.on_exit(id, ctx);
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        self.inner.on_close(id, ctx);
    }

    fn on_id_change(&self, old: &Id, new: &Id, ctx: Context<'_, S>) {
        self.inner.on_id_change(old, new, ctx);
    }

    unsafe fn downcast_raw(&self, id: std::any::TypeId) -> Option<*const ()> {
        if id == std::any::TypeId::of::<Self>() {
            return Some(std::ptr::from_ref(self).cast());
        }
        // SAFETY: the inner layer's own answer, for a type it is or holds.
        unsafe { self.inner.downcast_raw(id) }
    }
}

#[cfg(test)]
mod tests {
    use tracing::{Level, Subscriber};
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::Targets;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::Deferred;
    use crate::telemetry::lines::Lines;

    /// What the server's spans and events look like: a request span with values at its start and later, an
    /// MCP span in it, a span that only has empty fields, events at and below the level, and a span in which
    /// nothing is written.
    fn script() {
        let request = tracing::info_span!(
            "request",
            otel.name = %format_args!("{} {}", "POST", "/{agent_id}/mcp"),
            method = "POST",
            request_id = "0b5c1f4e",
            count = 3u64,
            delta = -2i64,
            ratio = 0.5f64,
            ok = true,
            status = tracing::field::Empty,
            agent = tracing::field::Empty,
        );
        let _request = request.enter();
        request.record("agent", "bench \"quoted\"");
        tracing::info!(answer = 42, "first line");
        let mcp = tracing::info_span!("mcp", mcp.method.name = "resources/read", detail = ?Some("x"));
        let _mcp = mcp.enter();
        tracing::debug!("below the level: never written");
        tracing::warn!("second line");
        request.record("status", 200u16);
        tracing::error!("third line");
        drop(_mcp);
        let empty = tracing::info_span!("empty", later = tracing::field::Empty);
        empty.in_scope(|| tracing::info!("in a span with no values"));
        empty.record("later", "after the line");
        empty.in_scope(|| tracing::info!("and after its value"));
        let silent = tracing::info_span!("silent", value = "never formatted");
        silent.in_scope(|| tracing::debug!("below the level"));
        // More values and more text than a span keeps inline.
        let long = "é".repeat(200);
        let wide = tracing::info_span!(
            "wide", a = 1u64, b = 2u64, c = 3u64, d = 4u64, e = 5u64, f = 6u64, g = 7u64, h = 8u64, i = 9u64,
            j = 10u64, k = 11u64, l = 12u64, m = long.as_str(), n = ?long.len(), o = -(1i128 << 100),
            p = u128::MAX
        );
        wide.in_scope(|| tracing::info!("in a wide span"));
    }

    fn written<L>(layer: L, lines: &Lines) -> String
    where
        L: Layer<tracing_subscriber::Registry> + Send + Sync + 'static,
    {
        let subscriber =
            tracing_subscriber::registry().with(layer.with_filter(Targets::new().with_default(Level::INFO)));
        run(subscriber);
        lines.text()
    }

    fn run(subscriber: impl Subscriber + Send + Sync + 'static) {
        tracing::subscriber::with_default(subscriber, script);
    }

    #[test]
    fn lines_are_written_as_without_it_in_both_formats() {
        let plain =
            |lines: &Lines| tracing_subscriber::fmt::layer().without_time().with_ansi(false).with_writer(lines.clone());
        let (eager, deferred) = (Lines::default(), Lines::default());
        let expected = written(plain(&eager).compact(), &eager);
        let actual = written(Deferred::new(plain(&deferred).compact()), &deferred);
        assert_eq!(actual.lines().count(), 6, "{actual}");
        assert!(actual.contains(r#"agent="bench \"quoted\"""#) && actual.contains("status=200"), "{actual}");
        assert!(actual.contains("o=-1267650600228229401496703205376 p=340282366920938463463374607431768211455"));
        assert_eq!(actual, expected);

        let json = |lines: &Lines| plain(lines).json().flatten_event(true).with_current_span(true);
        let (eager, deferred) = (Lines::default(), Lines::default());
        let expected = written(json(&eager), &eager);
        let actual = written(Deferred::new(json(&deferred)), &deferred);
        assert_eq!(actual.lines().count(), 6, "{actual}");
        assert!(actual.contains(r#""request_id":"0b5c1f4e""#) && actual.contains(r#""status":200"#), "{actual}");
        assert_eq!(actual, expected);
    }

    #[test]
    fn a_span_nothing_is_written_in_is_never_formatted() {
        use tracing_subscriber::registry::{LookupSpan as _, SpanData as _};

        let lines = Lines::default();
        let layer = Deferred::new(tracing_subscriber::fmt::layer().without_time().with_writer(lines.clone()));
        let subscriber =
            tracing_subscriber::registry().with(layer.with_filter(Targets::new().with_default(Level::INFO)));
        let dispatch = tracing::Dispatch::new(subscriber);
        tracing::dispatcher::with_default(&dispatch, || {
            let span = tracing::info_span!("request", route = "/{agent_id}/mcp", status = tracing::field::Empty);
            span.record("status", 200u16);
            let registry = dispatch.downcast_ref::<tracing_subscriber::Registry>();
            let formatted = span.id().and_then(|id| {
                let data = registry?.span_data(&id)?;
                let extensions = data.extensions();
                Some(extensions.get::<tracing_subscriber::fmt::FormattedFields<tracing_subscriber::fmt::format::DefaultFields>>().is_some())
            });
            assert_eq!(formatted, Some(false), "the span's fields were formatted with no line to show them");
        });
        assert_eq!(lines.text(), "");
    }
}
