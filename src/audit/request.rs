//! One audit record per MCP request that passed authentication, and one per message of a batch: who asked
//! what, and how it went.
//!
//! The handlers know the agent, key, method and target; they hand them back with the response as a [`Trail`]
//! (and every JSON-RPC error attaches its [`ErrorCode`]); a batch's trail holds an [`Item`] per message, with
//! the message's own method, target, outcome, time, latency and bytes. [`record`], run around every handler
//! of the endpoint, knows the rest (time, latency, client address, user agent, request and trace ids, bytes
//! sent) and hands the finished records to the batching writer ([`super::writer`]).
//!
//! Refusals after the key and the agent are known are recorded too: a key of another agent (403, in the
//! path's agent's log, the key's own agent named in `target` as `agent:<id>`), a key without scope `mcp`
//! (403) and the rate limit (429). Requests refused before that (no or a bad key, an unknown agent, a refused
//! `Origin`) carry no trail: they belong to no agent's chain (they are counted in metrics and logs).
//!
//! [`Trail`]: crate::audit::request::Trail
//! [`ErrorCode`]: crate::audit::request::ErrorCode
//! [`Item`]: crate::audit::request::Item
//! [`record`]: crate::audit::request::record
//! [`super::writer`]: crate::audit::writer

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::HttpBody as _;
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse as _, Response};
use serde_json::Value;

use super::chain::{ChainFields, QueuedRecord};
use crate::domain::model::{Agent, AuditText, KeyRecord};
use crate::domain::time::Timestamp;
use crate::guard::Bucketed;
use crate::http::REQUEST_ID;
use crate::mcp::dispatch::Method;
use crate::mcp::error::McpError;
use crate::mcp::jsonrpc::Call;
use crate::mcp::session::SessionHeader;
use crate::mcp::transport::Admitted;
use crate::metrics::{Era, McpLabels, McpMethodLabels, Outcome};
use crate::state::AppState;
use crate::telemetry::TraceParent;
use crate::telemetry::context::TRACEPARENT_HEADER;

/// The longest target, user agent or method kept in a record; longer values are cut (on a char boundary).
const MAX_FIELD_CHARS: usize = 512;

/// What the handler knows of a request, handed back with its response ([`Answered`]).
#[derive(Clone)]
pub struct Trail {
    /// The agent and the key as the caches share them: their ids and prefix are written into the record
    /// from there, not copied first.
    agent: Arc<Bucketed<Agent>>,
    key: Arc<Bucketed<KeyRecord>>,
    /// The legacy session's digest (never the id the client holds), or `listen:<request id>`.
    session: Option<AuditText>,
    method: AuditText,
    target: AuditText,
    /// `legacy` or `modern`, for metrics.
    era: &'static str,
    /// The method as a bounded metric label.
    metric_method: &'static str,
    /// The trace of the message's `_meta` ([`crate::mcp::span`]), which wins over the `traceparent` header.
    trace_id: Option<String>,
    /// A batch's messages, a record each; empty for anything else (one record for the request).
    items: Vec<Item>,
}

impl Trail {
    /// A trail for a request of `admitted` to `method` on `target`.
    pub(crate) fn new(admitted: &Admitted, method: &str, target: &str) -> Self {
        Self::with(&admitted.agent, &admitted.key, &admitted.session, method, target)
    }

    /// A trail for a request of `key` to `agent`'s endpoint (the key may belong to another agent: a refusal).
    pub(crate) fn of(
        agent: &Arc<Bucketed<Agent>>,
        key: &Arc<Bucketed<KeyRecord>>,
        headers: &HeaderMap,
        method: &str,
        target: &str,
    ) -> Self {
        Self::with(agent, key, &SessionHeader::of(headers), method, target)
    }

    fn with(
        agent: &Arc<Bucketed<Agent>>,
        key: &Arc<Bucketed<KeyRecord>>,
        session: &SessionHeader,
        method: &str,
        target: &str,
    ) -> Self {
        let session = session.digest().map(|digest| AuditText::from(digest.as_str()));
        Self {
            agent: agent.clone(),
            key: key.clone(),
            session,
            method: cut(method),
            target: cut(target),
            era: Era::Legacy.as_str(),
            metric_method: match method {
                "GET" => "GET",
                "DELETE" => "DELETE",
                "batch" => "batch",
                name => Method::label(name),
            },
            trace_id: None,
            items: Vec::new(),
        }
    }

    /// The records of a batch: one for each of `items`, instead of one for the request.
    pub(crate) fn with_items(mut self, items: Vec<Item>) -> Self {
        self.items = items;
        self
    }

    /// Records the trace of the message's `_meta`, when it carries one.
    pub(crate) fn traced(mut self, parent: Option<&TraceParent>) -> Self {
        self.trace_id = parent.map(TraceParent::trace_id_hex);
        self
    }

    /// Marks the request as one of the modern era (for metrics).
    pub fn modern(mut self, is_modern: bool) -> Self {
        if is_modern {
            self.era = Era::Modern.as_str();
        }
        self
    }

    /// The trail of a JSON-RPC call: its method and what it names (URI, prompt name, reference).
    pub(crate) fn of_call(admitted: &Admitted, call: &Call) -> Self {
        let mut trail = Self::new(admitted, &call.method, target_of(call));
        if call.method == "subscriptions/listen"
            && let Some(id) = &call.id
        {
            trail.session = Some(compact_str::format_compact!("listen:{}", cut(id.as_raw().get())));
        }
        trail
    }

    /// `response` with this trail: the answer [`record`] makes the record of.
    pub fn attach(self, response: Response) -> Answered {
        Answered { response, trail: Some(self) }
    }
}

/// An answer of the MCP endpoint and its [`Trail`], none for a request refused before its key and agent were
/// known. Handed back beside the answer rather than in its extensions, which would cost every request a map
/// and two allocations.
pub struct Answered {
    pub response: Response,
    pub trail: Option<Trail>,
}

impl From<Response> for Answered {
    fn from(response: Response) -> Self {
        Self { response, trail: None }
    }
}

/// The JSON-RPC error code a response answered with.
#[derive(Debug, Clone, Copy)]
pub struct ErrorCode(pub i32);

/// One message of a batch as its record shows it: its own method and target, when it was handled and how
/// long that took, its error code and the bytes of its answer.
#[derive(Debug, Clone)]
pub struct Item {
    method: AuditText,
    target: AuditText,
    trace_id: Option<String>,
    occurred_at: Timestamp,
    started: Instant,
    latency: Duration,
    error_code: Option<i32>,
    bytes_out: usize,
}

impl Item {
    /// A message about to be handled: `call` (none for a client's response or a malformed message, whose
    /// method is `-`), with the trace of its `_meta`.
    pub(crate) fn start(call: Option<&Call>, parent: Option<&TraceParent>) -> Self {
        Self {
            method: cut(call.map_or("-", |call| &call.method)),
            target: cut(call.map_or("", target_of)),
            trace_id: parent.map(TraceParent::trace_id_hex),
            occurred_at: Timestamp::now(),
            started: Instant::now(),
            latency: Duration::ZERO,
            error_code: None,
            bytes_out: 0,
        }
    }

    /// The message was handled: answered with `answer` (none for a notification), an error when
    /// `error_code` is set.
    pub(crate) fn finish(mut self, error_code: Option<i32>, answer: Option<&[u8]>) -> Self {
        self.latency = self.started.elapsed();
        self.error_code = error_code;
        self.bytes_out = answer.map_or(0, <[u8]>::len);
        self
    }
}

/// What a call names: `uri` (resources, subscriptions), `name` (prompts), the `ref` of a completion.
fn target_of(call: &Call) -> &str {
    let Some(params) = call.params_object() else { return "" };
    fn text(value: Option<&Value>) -> Option<&str> {
        value.and_then(Value::as_str)
    }
    text(params.get("uri"))
        .or_else(|| text(params.get("name")))
        .or_else(|| {
            let reference = params.get("ref")?;
            text(reference.get("uri")).or_else(|| text(reference.get("name")))
        })
        .unwrap_or_default()
}

/// `value` as a record field: at most [`MAX_FIELD_CHARS`] characters, and every NUL written as `\u0000`.
/// The client chooses these values (a JSON string may hold `\u0000`), and PostgreSQL's text refuses NUL:
/// one such record would fail its whole batch on every retry.
pub(crate) fn cut(value: &str) -> AuditText {
    kept(value).as_ref().into()
}

/// [`cut`], borrowed from `value` when that is all of it: nearly always.
fn kept(value: &str) -> Cow<'_, str> {
    fn first_chars(value: &str) -> &str {
        // A value of at most that many bytes has at most that many chars: only a longer one is walked.
        if value.len() <= MAX_FIELD_CHARS {
            return value;
        }
        value.char_indices().nth(MAX_FIELD_CHARS).map_or(value, |(end, _)| &value[..end])
    }
    let kept = first_chars(value);
    if !kept.contains('\0') {
        return Cow::Borrowed(kept);
    }
    // Escaping only lengthens, so the escaped value's first chars all come from these.
    Cow::Owned(first_chars(&kept.replace('\0', "\\u0000")).to_owned())
}

/// A `User-Agent` as the record stores it: as sent when it is visible ASCII (the usual case); otherwise with
/// every byte outside printable ASCII written as `\xNN` and `\` as `\\`, so that a non-ASCII agent (which
/// HTTP allows as opaque bytes, and is usually UTF-8) is kept rather than lost. Cut like the other fields.
fn user_agent_text(value: &axum::http::HeaderValue) -> AuditText {
    if let Ok(text) = value.to_str() {
        return cut(text);
    }
    let mut escaped = String::with_capacity(value.len() * 2);
    for &byte in value.as_bytes() {
        match byte {
            b'\\' => escaped.push_str("\\\\"),
            0x20..=0x7e => escaped.push(char::from(byte)),
            _ => {
                use std::fmt::Write as _;
                let _ = write!(escaped, "\\x{byte:02x}");
            }
        }
    }
    cut(&escaped)
}

/// `address` as the record stores it. An IPv4 address is written octet by octet: `Ipv4Addr`'s `Display` goes
/// through `Formatter::pad`, about 1,300 instructions for every request's record. IPv6 keeps its own
/// `Display` (the shortest form, RFC 5952).
fn address_text(address: IpAddr) -> AuditText {
    let IpAddr::V4(v4) = address else { return compact_str::ToCompactString::to_compact_string(&address) };
    let mut text = AuditText::const_new("");
    let mut digits = itoa::Buffer::new();
    for (index, octet) in v4.octets().into_iter().enumerate() {
        if index > 0 {
            text.push('.');
        }
        text.push_str(digits.format(octet));
    }
    text
}

/// Around `/{agent_id}/mcp` ([`crate::mcp::transport::endpoint`]): turns the [`Trail`] `run` answers with into
/// an audit record.
pub async fn record<F, Fut>(state: &AppState, request: Request, run: F) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Answered>,
{
    // With `audit.on_overload = "reject"`, the record's place in the queue is taken before the request is
    // served: a full queue refuses it instead.
    let Ok(mut audit) = state.audit.reserve() else {
        return McpError::AuditOverloaded.into_response();
    };
    let started = Instant::now();
    let occurred_at = Timestamp::now();
    let headers = request.headers();
    // The client as the contract defines it: the socket peer, or what trusted proxies forwarded.
    let client_ip = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| state.guard.client_ip(peer.ip(), headers));
    // One walk over the fields for the three this needs (a lookup hashes a name that is not one of HTTP's
    // standard ones byte by byte).
    let (mut user_agent, mut request_id, mut is_traced) = (None, None, false);
    for (name, value) in headers {
        if name == header::USER_AGENT {
            user_agent = user_agent.or(Some(value));
        } else if name == REQUEST_ID {
            // Shared with the request's fields, not copied: the id is written into the record from there.
            request_id = request_id.or_else(|| Some(value.clone()));
        } else if name == TRACEPARENT_HEADER {
            is_traced = true;
        }
    }
    let user_agent = user_agent.map(user_agent_text);
    // The trace the request span joined; a message's `_meta` overrides it below.
    let trace_id = is_traced.then(|| TraceParent::from_headers(headers)).flatten().map(|parent| parent.trace_id_hex());
    let Answered { response, trail } = run(request).await;
    let Some(mut trail) = trail else { return response };
    let trace_id = trail.trace_id.take().or(trace_id);
    let error_code = response.extensions().get::<ErrorCode>().map(|code| code.0);
    let is_ok = error_code.is_none() && response.status().is_success();
    let elapsed = started.elapsed();
    let labels = McpMethodLabels { method: trail.metric_method, era: trail.era };
    state.metrics.mcp_duration.with(&labels, |histogram| histogram.observe(elapsed.as_secs_f64()));
    let outcome = if is_ok { Outcome::Ok } else { Outcome::Error };
    let labels = McpLabels { method: labels.method, era: labels.era, outcome: outcome.as_str() };
    state.metrics.mcp_requests.with(&labels, |counter| {
        counter.inc();
    });
    if !state.config.audit.mcp_requests {
        return response;
    }
    let common = Common {
        agent_id: trail.agent.id.as_str(),
        key_id: trail.key.id.as_str(),
        key_prefix: trail.key.prefix.as_str(),
        session: trail.session,
        request_id: request_id.as_ref().and_then(|id| id.to_str().ok()).map(kept),
        client_ip,
        user_agent,
    };
    if !trail.items.is_empty() {
        // A batch: a record per message (the answer's status is the batch's; each message has its own code).
        for item in trail.items {
            let entry = Entry {
                occurred_at: item.occurred_at,
                method: item.method,
                target: item.target,
                is_ok: item.error_code.is_none(),
                error_code: item.error_code,
                bytes_out: i64::try_from(item.bytes_out).ok(),
                latency: item.latency,
                trace_id: item.trace_id.or_else(|| trace_id.clone()),
            };
            audit.record(common.record(&entry));
        }
        return response;
    }
    // Streams (SSE) have no size yet when answered.
    let bytes_out = response.body().size_hint().exact().and_then(|bytes| i64::try_from(bytes).ok());
    let entry = Entry {
        occurred_at,
        method: trail.method,
        target: trail.target,
        is_ok,
        error_code,
        bytes_out,
        latency: elapsed,
        trace_id,
    };
    audit.record(common.record(&entry));
    response
}

/// What every record of one HTTP request shares.
struct Common<'a> {
    agent_id: &'a str,
    key_id: &'a str,
    key_prefix: &'a str,
    session: Option<AuditText>,
    request_id: Option<Cow<'a, str>>,
    client_ip: Option<IpAddr>,
    user_agent: Option<AuditText>,
}

/// What one record says of its request or batch message.
struct Entry {
    occurred_at: Timestamp,
    method: AuditText,
    target: AuditText,
    is_ok: bool,
    error_code: Option<i32>,
    bytes_out: Option<i64>,
    latency: Duration,
    trace_id: Option<String>,
}

impl Common<'_> {
    /// The record of `entry`, written straight into the one buffer the writer takes.
    fn record(&self, entry: &Entry) -> QueuedRecord {
        let mut id = uuid::Uuid::encode_buffer();
        let id = uuid::Uuid::now_v7().hyphenated().encode_lower(&mut id);
        let client_ip = self.client_ip.map(address_text);
        QueuedRecord::new(&ChainFields {
            id,
            agent_id: self.agent_id,
            occurred_at: entry.occurred_at.as_micros(),
            kind: "mcp",
            actor: ["key:", self.key_id],
            action: &entry.method,
            target: &entry.target,
            before_digest: None,
            after_digest: None,
            request_id: self.request_id.as_deref(),
            key_id: Some(self.key_id),
            key_prefix: Some(self.key_prefix),
            session_id: self.session.as_deref(),
            method: Some(&entry.method),
            outcome: Some(if entry.is_ok { "ok" } else { "error" }),
            error_code: entry.error_code.map(i64::from),
            bytes_out: entry.bytes_out,
            latency_us: Some(i64::try_from(entry.latency.as_micros()).unwrap_or(i64::MAX)),
            client_ip: client_ip.as_deref(),
            user_agent: self.user_agent.as_deref(),
            trace_id: entry.trace_id.as_deref(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::model::AuditRecord;

    #[test]
    fn addresses_are_written_as_display_writes_them() {
        for address in ["127.0.0.1", "0.0.0.0", "255.255.255.255", "10.20.3.4", "::1", "2001:db8::8a2e:370:7334"] {
            let ip: IpAddr = address.parse().expect("an address");
            assert_eq!(address_text(ip), ip.to_string());
            assert_eq!(address_text(ip), address);
        }
    }

    /// A request's record is written straight into the writer's buffer: its bytes are those of the record
    /// as an `AuditRecord` would be hashed and stored, the actor joined from its parts included.
    #[test]
    fn a_requests_record_is_written_as_its_audit_record_is() {
        for (key_id, client_ip, error_code) in [
            ("01a2189b-3f68-74d3-9740-08cf3cd84518", Some("127.0.0.1"), None),
            ("k\"ey\\ \u{1} é", Some("2001:db8::1"), Some(-32602)),
            ("", None, None),
        ] {
            let common = Common {
                agent_id: "bot",
                key_id,
                key_prefix: "bak_abc",
                session: Some("digest".into()),
                request_id: Some(Cow::Borrowed("req \"1\"")),
                client_ip: client_ip.map(|ip| ip.parse().expect("an address")),
                user_agent: None,
            };
            let entry = Entry {
                occurred_at: Timestamp::from_micros(1_700_000_000_123_456),
                method: "resources/read".into(),
                target: "file:///a\nb".into(),
                is_ok: error_code.is_none(),
                error_code,
                bytes_out: Some(1132),
                latency: Duration::from_micros(17),
                trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".to_owned()),
            };
            let queued = common.record(&entry);
            let fields: Vec<Value> = serde_json::from_str(&queued.text()).expect("a JSON array");
            let id = fields[0].as_str().expect("an id");
            let expected = AuditRecord {
                id: id.into(),
                agent_id: "bot".into(),
                occurred_at: entry.occurred_at,
                kind: "mcp".into(),
                actor: compact_str::format_compact!("key:{key_id}"),
                action: "resources/read".into(),
                target: entry.target.clone(),
                request_id: common.request_id.as_deref().map(Into::into),
                key_id: Some(key_id.into()),
                key_prefix: Some("bak_abc".into()),
                session_id: Some("digest".into()),
                method: Some("resources/read".into()),
                outcome: Some(if error_code.is_none() { "ok" } else { "error" }.into()),
                error_code,
                bytes_out: Some(1132),
                latency_us: Some(17),
                client_ip: client_ip.map(Into::into),
                trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
                ..AuditRecord::default()
            };
            assert_eq!(queued.text(), QueuedRecord::from(&expected).text(), "key id {key_id:?}");
        }
    }

    #[test]
    fn long_fields_are_cut_on_a_char_boundary() {
        let long = "é".repeat(MAX_FIELD_CHARS + 10);
        assert_eq!(cut(&long).chars().count(), MAX_FIELD_CHARS);
        assert_eq!(cut("short"), "short");
    }

    #[test]
    fn nul_is_written_as_its_json_escape() {
        assert_eq!(cut("a\0b\0"), "a\\u0000b\\u0000");
        let call = Call {
            id: None,
            method: "resources/read\0".to_owned(),
            params: Some(serde_json::json!({"uri": "x\u{0}"})),
        };
        assert_eq!(cut(target_of(&call)), "x\\u0000");
        assert_eq!(cut(&call.method), "resources/read\\u0000");
        let escaped = cut(&"\0".repeat(MAX_FIELD_CHARS));
        assert_eq!(escaped.chars().count(), MAX_FIELD_CHARS, "the limit holds after escaping");
    }

    #[test]
    fn user_agents_that_are_not_visible_ascii_are_escaped() {
        let agent = |bytes: &[u8]| user_agent_text(&axum::http::HeaderValue::from_bytes(bytes).expect("a value"));
        assert_eq!(agent(b"curl/8.5.0 (x\\y)"), "curl/8.5.0 (x\\y)", "visible ASCII is kept as sent");
        assert_eq!(agent("Ünï\\bot".as_bytes()), "\\xc3\\x9cn\\xc3\\xaf\\\\bot");
        assert_eq!(agent(b"a\tb\xff"), "a\\x09b\\xff");
        let long = agent(&[0xe9; MAX_FIELD_CHARS]);
        assert_eq!(long.chars().count(), MAX_FIELD_CHARS, "cut like the other fields");
        assert!(long.starts_with("\\xe9\\xe9"));
    }

    #[test]
    fn targets_name_what_the_call_is_about() {
        let call = |method: &str, params: Value| Call { id: None, method: method.to_owned(), params: Some(params) };
        let read = call("resources/read", serde_json::json!({"uri": "test://a"}));
        assert_eq!(target_of(&read), "test://a");
        assert_eq!(target_of(&call("prompts/get", serde_json::json!({"name": "p"}))), "p");
        let complete = call("completion/complete", serde_json::json!({"ref": {"type": "ref/prompt", "name": "q"}}));
        assert_eq!(target_of(&complete), "q");
        assert_eq!(target_of(&call("resources/list", serde_json::json!({}))), "");
    }
}
