//! JSON-RPC 2.0 envelopes: parsing a POST body into messages (with our own errors) and writing responses.
//!
//! A request's `id` is kept as the exact JSON text the client sent (`1`, `1.0`, `"1"` stay what they were),
//! so every answer carries it back unchanged; errors raised before an id could be read carry `null`.

use std::sync::Arc;

use axum::body::Bytes;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::error::McpError;
use super::methods::resources::Page;
use super::methods::{Answer, Items};

/// A request id as the client wrote it: a JSON string or number.
#[derive(Debug, Clone)]
pub struct RequestId(Box<RawValue>);

impl RequestId {
    /// `Some` when `raw` is a string or a number: the only ids MCP allows (never `null`).
    fn parse(raw: Box<RawValue>) -> Option<Self> {
        let text = raw.get();
        let is_valid = text.starts_with('"') || text.starts_with('-') || text.starts_with(|c: char| c.is_ascii_digit());
        is_valid.then_some(Self(raw))
    }

    /// The id's JSON text.
    pub fn as_raw(&self) -> &RawValue {
        &self.0
    }

    /// The id as a JSON value (for tests and tags; answers use the raw text).
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.0.get()).unwrap_or(Value::Null)
    }
}

/// One well-formed JSON-RPC message from the client.
#[derive(Debug)]
pub enum Message {
    /// A call that wants an answer.
    Request(Call),
    /// A call without an id: never answered.
    Notification(Call),
    /// The client answering a server request (legacy only; hivegate sends none).
    Response,
}

/// The method and params of a request or notification.
#[derive(Debug)]
pub struct Call {
    pub id: Option<RequestId>,
    pub method: String,
    /// An object or an array; `null` counts as absent.
    pub params: Option<Value>,
}

impl Message {
    /// The method of a request or notification.
    pub fn method(&self) -> Option<&str> {
        match self {
            Message::Request(call) | Message::Notification(call) => Some(&call.method),
            Message::Response => None,
        }
    }
}

impl Call {
    /// The params as an object, if they are one.
    pub fn params_object(&self) -> Option<&Map<String, Value>> {
        self.params.as_ref().and_then(Value::as_object)
    }
}

impl Message {
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            Message::Request(call) | Message::Notification(call) => call.id.as_ref(),
            Message::Response => None,
        }
    }

    pub fn call(&self) -> Option<&Call> {
        match self {
            Message::Request(call) | Message::Notification(call) => Some(call),
            Message::Response => None,
        }
    }
}

/// A message that is valid JSON but not a valid JSON-RPC message: -32600, with its id when readable.
#[derive(Debug)]
pub struct Malformed {
    pub id: Option<RequestId>,
    pub error: McpError,
}

/// A POST body: one message, or (2025-03-26 only) a batch.
#[derive(Debug)]
pub enum Body {
    Single(Result<Message, Malformed>),
    Batch(Vec<Result<Message, Malformed>>),
}

/// The members of a message object; every field is optional so that shape errors are ours to report.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    jsonrpc: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Box<RawValue>>,
    #[serde(default)]
    method: Option<Value>,
    #[serde(default)]
    params: Option<Value>,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
}

/// Keeps a present `id` even when it is `null` (plain `Option` would fold `null` into absent).
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(deserializer).map(Some)
}

/// Parses a POST body. Invalid JSON is -32700 (HTTP 400); an empty batch or a body that is neither an object
/// nor an array is -32600 (HTTP 400); each message's own shape errors are reported per message.
pub fn parse(body: &[u8]) -> Result<Body, McpError> {
    // A single message, as nearly every body is, is read into its envelope in one pass over the text. Only
    // a message that reads cleanly is taken from it: whatever fails is judged by the two passes below, as a
    // batch's member is (what reads into the envelope also passes the first of them, which only skips).
    if let Ok(text) = std::str::from_utf8(body)
        && text.trim_start().starts_with('{')
        && let Ok(envelope) = serde_json::from_str::<Envelope>(text)
    {
        return Ok(Body::Single(message_of(envelope)));
    }
    let raw: Box<RawValue> = serde_json::from_slice(body).map_err(|e| McpError::Parse(e.to_string()))?;
    let text = raw.get();
    if text.starts_with('[') {
        let items: Vec<Box<RawValue>> =
            serde_json::from_str(text).map_err(|e| McpError::InvalidRequest(e.to_string()))?;
        if items.is_empty() {
            return Err(McpError::InvalidRequest("an empty batch is not a request".to_owned()));
        }
        return Ok(Body::Batch(items.iter().map(|item| message(item)).collect()));
    }
    if text.starts_with('{') {
        return Ok(Body::Single(message(&raw)));
    }
    Err(McpError::InvalidRequest("the body must be a JSON-RPC message object".to_owned()))
}

/// A parsed body in which some object has `key` twice (found by [`crate::http::json_scan`]): a single
/// message becomes malformed (-32600 with its id, when it has one), a batch is refused as a whole (-32600,
/// id null).
pub fn refuse_duplicate_key(body: Body, key: &str) -> Result<Body, McpError> {
    let error = || McpError::InvalidRequest(format!("the key {key:?} appears twice in one object"));
    match body {
        Body::Single(Ok(message)) => Ok(Body::Single(Err(Malformed { id: message.id().cloned(), error: error() }))),
        Body::Single(Err(malformed)) => Ok(Body::Single(Err(malformed))),
        Body::Batch(_) => Err(error()),
    }
}

/// A message that is not a valid JSON-RPC message for `reason`.
fn malformed(id: Option<RequestId>, reason: &str) -> Malformed {
    Malformed { id, error: McpError::InvalidRequest(reason.to_owned()) }
}

/// One member of a batch.
fn message(raw: &RawValue) -> Result<Message, Malformed> {
    if !raw.get().starts_with('{') {
        return Err(malformed(None, "a JSON-RPC message must be an object"));
    }
    let envelope: Envelope = serde_json::from_str(raw.get()).map_err(|e| malformed(None, &e.to_string()))?;
    message_of(envelope)
}

/// The message a parsed envelope holds.
fn message_of(envelope: Envelope) -> Result<Message, Malformed> {
    let has_id = envelope.id.is_some();
    let id = envelope.id.and_then(RequestId::parse);
    if envelope.jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
        return Err(malformed(id, "\"jsonrpc\" must be \"2.0\""));
    }
    if has_id && id.is_none() {
        return Err(malformed(None, "\"id\" must be a string or a number"));
    }
    let Some(method) = envelope.method else {
        if id.is_some() && (envelope.result.is_some() || envelope.error.is_some()) {
            return Ok(Message::Response);
        }
        return Err(malformed(id, "\"method\" is required"));
    };
    let Value::String(method) = method else {
        return Err(malformed(id, "\"method\" must be a string"));
    };
    let params = match envelope.params {
        None | Some(Value::Null) => None,
        Some(params @ (Value::Object(_) | Value::Array(_))) => Some(params),
        Some(_) => return Err(malformed(id, "\"params\" must be an object")),
    };
    let call = Call { id, method, params };
    Ok(if call.id.is_some() { Message::Request(call) } else { Message::Notification(call) })
}

#[derive(Serialize)]
struct Failure<'a> {
    jsonrpc: &'static str,
    id: Option<&'a RawValue>,
    error: ErrorObject<'a>,
}

#[derive(Serialize)]
struct ErrorObject<'a> {
    code: i32,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a Value>,
}

/// `{"jsonrpc":"2.0","id":…,"result":…}`, as serde_json writes it: the id and the result copied as they are.
pub fn success(id: &RequestId, result: &Answer) -> Vec<u8> {
    let id = id.as_raw().get().as_bytes();
    // Sized once: a list's page or a read's contents are copied into the answer and nowhere else.
    let mut body = Vec::with_capacity(OPEN.len() + id.len() + RESULT.len() + result.json_len() + 1);
    body.extend_from_slice(OPEN);
    body.extend_from_slice(id);
    body.extend_from_slice(RESULT);
    result.write(&mut body);
    body.push(b'}');
    body
}

/// [`success`] in three pieces when `result` holds a list's page: the page's items go out as the registry
/// cache keeps them, shared rather than copied into the answer (a page is up to tens of KiB, the rest a few
/// dozen bytes), and the connection writes the pieces to the socket together. `None` for any other result.
pub fn success_in_pieces(id: &RequestId, result: &Answer) -> Option<[Bytes; 3]> {
    let Answer::Around { outline, items: Items::Page(page) } = result else { return None };
    let id = id.as_raw().get().as_bytes();
    let head = outline.head().as_bytes();
    let mut opening = Vec::with_capacity(OPEN.len() + id.len() + RESULT.len() + head.len());
    opening.extend_from_slice(OPEN);
    opening.extend_from_slice(id);
    opening.extend_from_slice(RESULT);
    opening.extend_from_slice(head);
    let mut closing = Vec::with_capacity(outline.tail().len() + 1);
    closing.extend_from_slice(outline.tail().as_bytes());
    closing.push(b'}');
    Some([Bytes::from(opening), Bytes::from_owner(PageItems(page.clone())), Bytes::from(closing)])
}

/// The start of every success answer, up to its id.
const OPEN: &[u8] = br#"{"jsonrpc":"2.0","id":"#;
/// Between a success answer's id and its result.
const RESULT: &[u8] = br#","result":"#;

/// A cached page's items as the bytes of an answer piece, kept alive by the piece.
struct PageItems(Arc<Page>);

impl AsRef<[u8]> for PageItems {
    fn as_ref(&self) -> &[u8] {
        self.0.items.get().as_bytes()
    }
}

/// `{"jsonrpc":"2.0","id":…|null,"error":{"code","message","data"?}}`.
pub fn failure(id: Option<&RequestId>, error: &McpError) -> Vec<u8> {
    let message = error.to_string();
    let data = error.data();
    let body = Failure {
        jsonrpc: "2.0",
        id: id.map(RequestId::as_raw),
        error: ErrorObject { code: error.code(), message: &message, data: data.as_ref() },
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn single(body: &str) -> Result<Message, Malformed> {
        match parse(body.as_bytes()).expect("parses") {
            Body::Single(message) => message,
            Body::Batch(_) => panic!("not a batch"),
        }
    }

    #[test]
    fn ids_are_kept_exactly() {
        for id in ["1", "1.0", "-7", "\"abc\"", "12345678901234567890123"] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            let Ok(Message::Request(call)) = single(&body) else { panic!("request expected for {id}") };
            let request_id = call.id.expect("id");
            assert_eq!(request_id.as_raw().get(), id);
            let empty = Answer::Whole(RawValue::from_string("{}".to_owned()).expect("raw"));
            let answer = String::from_utf8(success(&request_id, &empty)).expect("utf8");
            assert_eq!(answer, format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#));
        }
    }

    #[test]
    fn a_page_in_pieces_is_the_same_answer() {
        let items =
            RawValue::from_string(r#"[{"uri":"test://a","name":"a"},{"uri":"test://b","name":"b"}]"#.to_owned())
                .expect("raw");
        let page = Arc::new(Page { items, last: None });
        let list = crate::mcp::types::ListResult {
            key: "resources",
            items: &page.items,
            next_cursor: Some("next".to_owned()),
            result_type: None,
            cache: None,
            meta: None,
        };
        let answer = Answer::Around { outline: list.outline().expect("outline"), items: Items::Page(page) };
        let Ok(Message::Request(call)) = single(r#"{"jsonrpc":"2.0","id":"x-1","method":"resources/list"}"#) else {
            panic!("request")
        };
        let id = call.id.expect("id");
        let pieces = success_in_pieces(&id, &answer).expect("a page goes in pieces");
        assert_eq!(pieces.concat(), success(&id, &answer));
        let value: Value = serde_json::from_slice(&pieces.concat()).expect("json");
        assert_eq!(value["result"]["resources"][1]["uri"], "test://b");
        assert_eq!(value["result"]["nextCursor"], "next");
        let whole = Answer::Whole(RawValue::from_string("{}".to_owned()).expect("raw"));
        assert!(success_in_pieces(&id, &whole).is_none(), "only a page goes in pieces");
    }

    #[test]
    fn shapes() {
        assert!(matches!(
            single(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Ok(Message::Notification(_))
        ));
        assert!(matches!(single(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#), Ok(Message::Response)));
        let null_id = single(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#).expect_err("null id");
        assert!(null_id.id.is_none());
        let no_method = single(r#"{"jsonrpc":"2.0","id":"x"}"#).expect_err("no method");
        assert_eq!(no_method.id.expect("id kept").as_raw().get(), "\"x\"");
        assert!(single(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#).is_err());
        assert!(single(r#"{"jsonrpc":"2.0","id":1,"method":7}"#).is_err());
        assert!(single(r#"{"jsonrpc":"2.0","id":1,"method":"a","params":"x"}"#).is_err());
        assert!(single(r#"{"jsonrpc":"2.0","id":{},"method":"a"}"#).is_err());
        let Ok(Message::Request(call)) = single(r#"{"jsonrpc":"2.0","id":1,"method":"a","params":null}"#) else {
            panic!("request")
        };
        assert!(call.params.is_none());
    }

    #[test]
    fn body_level_errors() {
        assert!(matches!(parse(b"{nope"), Err(McpError::Parse(_))));
        assert!(matches!(parse(b"\xff"), Err(McpError::Parse(_))));
        assert!(matches!(parse(b"[]"), Err(McpError::InvalidRequest(_))));
        assert!(matches!(parse(b"42"), Err(McpError::InvalidRequest(_))));
        let Ok(Body::Batch(items)) = parse(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}, 5]"#) else {
            panic!("batch")
        };
        assert!(items[0].is_ok() && items[1].is_err());
    }

    /// A single message is read in one pass; what it finds must be what the batch path finds for the same
    /// object: invalid JSON anywhere is a parse error, even after a member given twice, and so are bytes that
    /// are not UTF-8 in a member the envelope skips.
    #[test]
    fn a_single_message_is_judged_as_a_batch_member_is() {
        let twice = single(r#" {"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#).expect_err("id twice");
        assert!(twice.id.is_none() && twice.error.to_string().contains("duplicate field"), "{}", twice.error);
        assert!(matches!(parse(br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping""#), Err(McpError::Parse(_))));
        assert!(matches!(
            parse(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"x\":\"\xff\"}"),
            Err(McpError::Parse(_))
        ));
        assert!(matches!(parse(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"\xff\"}"), Err(McpError::Parse(_))));
        assert!(matches!(parse(br#"{"jsonrpc":"2.0","id":1,"method":"ping"} x"#), Err(McpError::Parse(_))));
        let bodies = [
            r#"{"jsonrpc":"2.0","id":"a","method":"ping","params":{"k":[1,{"v":null}]},"extra":{"deep":[true]}}"#,
            r#"{"jsonrpc":"2.0","id":5,"error":{"code":1}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"m","params":[1]}"#,
            r#"{"jsonrpc":"2.0","method":"n"}"#,
            r#"{"jsonrpc":"2.0","id":1.5e3,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":[1e400]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"\udc00"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":1e400}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":"\udc00"}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","x":"\udc00","y":1e400}"#,
        ];
        for body in bodies {
            let alone = single(&format!("\n\t {body} \n"));
            let Ok(Body::Batch(mut items)) = parse(format!("[{body}]").as_bytes()) else { panic!("batch") };
            let member = items.remove(0);
            assert_eq!(format!("{alone:?}"), format!("{member:?}"), "{body}");
        }
    }

    #[test]
    fn failures_carry_null_or_the_id() {
        let body = String::from_utf8(failure(None, &McpError::Parse("x".into()))).expect("utf8");
        let value: Value = serde_json::from_str(&body).expect("json");
        assert_eq!(value["id"], Value::Null);
        assert_eq!(value["error"]["code"], -32700);
    }
}
