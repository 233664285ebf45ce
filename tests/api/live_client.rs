//! Clients for the live-update stories: an SSE reader, a legacy client with a session and its `GET` stream,
//! and modern `subscriptions/listen` streams. They work with the in-process application and with child
//! processes alike (anything that is [`Api`]).

use std::pin::Pin;
use std::time::Duration;

use futures::{Stream, StreamExt};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{Api, DEADLINE};
use crate::mcp_client::{Answer, envelope};

/// How long a story waits to be sure that nothing (more) arrives.
pub const QUIET: Duration = Duration::from_millis(700);

/// One server-sent event.
#[derive(Debug, Clone)]
pub struct Event {
    pub id: Option<String>,
    pub data: String,
}

impl Event {
    /// The JSON-RPC message the event carries.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("event data is not JSON ({e}): {:?}", self.data))
    }

    pub fn method(&self) -> String {
        self.json()["method"].as_str().unwrap_or("").to_owned()
    }
}

/// What reading a stream gave.
#[derive(Debug)]
pub enum Next {
    Event(Event),
    End,
    Quiet,
}

/// An SSE response body, read event by event; comment lines are counted.
pub struct Sse {
    body: Pin<Box<dyn Stream<Item = reqwest::Result<axum::body::Bytes>> + Send>>,
    buffer: String,
    pub comments: usize,
    is_ended: bool,
}

impl Sse {
    pub fn new(response: reqwest::Response) -> Self {
        Self { body: Box::pin(response.bytes_stream()), buffer: String::new(), comments: 0, is_ended: false }
    }

    /// The next event within `wait`.
    pub async fn next_within(&mut self, wait: Duration) -> Next {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(event) = self.parse_one() {
                return Next::Event(event);
            }
            if self.is_ended {
                return Next::End;
            }
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Err(_) => return Next::Quiet,
                Ok(Some(Ok(chunk))) => self.buffer.push_str(&String::from_utf8_lossy(&chunk)),
                Ok(Some(Err(_)) | None) => self.is_ended = true,
            }
        }
    }

    /// The next event; fails the story when none comes within the deadline.
    pub async fn next(&mut self) -> Event {
        match self.next_within(DEADLINE).await {
            Next::Event(event) => event,
            other => panic!("expected an event, got {other:?}"),
        }
    }

    /// The next event that carries a message (priming events, with empty data, are skipped).
    pub async fn message(&mut self) -> Event {
        loop {
            let event = self.next().await;
            if !event.data.trim().is_empty() {
                return event;
            }
        }
    }

    /// Asserts that no message arrives for [`QUIET`] (priming events are allowed).
    pub async fn expect_quiet(&mut self) {
        loop {
            match self.next_within(QUIET).await {
                Next::Quiet => return,
                Next::Event(event) if event.data.trim().is_empty() => {}
                other => panic!("expected nothing, got {other:?}"),
            }
        }
    }

    /// Asserts that the stream ends (after any `remaining` messages), returning those messages.
    pub async fn expect_end(&mut self) -> Vec<Event> {
        let mut seen = Vec::new();
        loop {
            match self.next_within(DEADLINE).await {
                Next::End => return seen,
                Next::Event(event) => seen.push(event),
                Next::Quiet => panic!("the stream did not end; it sent {seen:?}"),
            }
        }
    }

    fn parse_one(&mut self) -> Option<Event> {
        loop {
            let normalised = self.buffer.replace("\r\n", "\n");
            self.buffer = normalised;
            let end = self.buffer.find("\n\n")?;
            let block: String = self.buffer.drain(..end + 2).collect();
            let (mut id, mut data, mut has_field) = (None, Vec::new(), false);
            for line in block.lines().filter(|line| !line.is_empty()) {
                if line.starts_with(':') {
                    self.comments += 1;
                    continue;
                }
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                has_field = true;
                match field {
                    "id" => id = Some(value.to_owned()),
                    "data" => data.push(value.to_owned()),
                    _ => {}
                }
            }
            if has_field {
                return Some(Event { id, data: data.join("\n") });
            }
        }
    }
}

/// Asserts a streaming answer: 200, `text/event-stream`, no proxy buffering.
pub fn check_stream_headers(response: &reqwest::Response) {
    assert_eq!(response.status(), StatusCode::OK, "a stream opens with 200");
    let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    assert!(header("content-type").starts_with("text/event-stream"), "content-type {}", header("content-type"));
    assert_eq!(header("x-accel-buffering"), "no");
}

/// A legacy client holding a session.
pub struct Legacy<'a, A: Api> {
    pub api: &'a A,
    pub agent: String,
    pub key: String,
    pub session: String,
    pub version: String,
}

impl<'a, A: Api> Legacy<'a, A> {
    /// `initialize` at `version`; panics unless a session is issued.
    pub async fn initialize(api: &'a A, agent: &str, key: &str, version: &str) -> Self {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": version,
            "capabilities": {}, "clientInfo": {"name": "live-tests", "version": "1"}}});
        let response = api
            .with_key(Method::POST, &format!("/{agent}/mcp"), key)
            .header("accept", "application/json, text/event-stream")
            .json(&body)
            .send()
            .await
            .unwrap();
        let session = response.headers().get("mcp-session-id").map(|v| v.to_str().unwrap().to_owned());
        let answer = Answer::of(response).await;
        assert_eq!(answer.result()["protocolVersion"], version);
        let session = session.expect("initialize issues an Mcp-Session-Id");
        Self { api, agent: agent.to_owned(), key: key.to_owned(), session, version: version.to_owned() }
    }

    /// A request of the session with `method` to the endpoint.
    pub fn request(&self, method: Method) -> RequestBuilder {
        self.api
            .with_key(method, &format!("/{}/mcp", self.agent), &self.key)
            .header("mcp-session-id", &self.session)
            .header("mcp-protocol-version", &self.version)
    }

    pub async fn call(&self, method: &str, params: Value) -> Answer {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let request = self.request(Method::POST).header("accept", "application/json, text/event-stream");
        Answer::of(request.json(&body).send().await.unwrap()).await
    }

    pub async fn subscribe(&self, uri: &str) {
        assert_eq!(*self.call("resources/subscribe", json!({"uri": uri})).await.result(), json!({}));
    }

    pub async fn unsubscribe(&self, uri: &str) {
        assert_eq!(*self.call("resources/unsubscribe", json!({"uri": uri})).await.result(), json!({}));
    }

    /// `GET`: the session's stream (resuming after `last_event_id` when given).
    pub async fn open(&self, last_event_id: Option<&str>) -> Sse {
        let mut request = self.request(Method::GET).header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await.unwrap();
        if response.status() != StatusCode::OK {
            panic!("GET stream: {} {}", response.status(), response.text().await.unwrap_or_default());
        }
        check_stream_headers(&response);
        Sse::new(response)
    }

    /// `GET` answered as it comes (for error cases).
    pub async fn open_answer(&self) -> Answer {
        Answer::of(self.request(Method::GET).header("accept", "text/event-stream").send().await.unwrap()).await
    }
}

/// `subscriptions/listen` with request id `id` and `notifications` filter; panics unless a stream opens.
pub async fn listen(api: &impl Api, agent: &str, key: &str, id: Value, filter: Value) -> Sse {
    let response = listen_request(api, agent, key, id, filter).send().await.unwrap();
    if response.status() != StatusCode::OK {
        panic!("listen: {} {}", response.status(), response.text().await.unwrap_or_default());
    }
    check_stream_headers(&response);
    Sse::new(response)
}

/// The listen request as an official modern client sends it.
pub fn listen_request(api: &impl Api, agent: &str, key: &str, id: Value, filter: Value) -> RequestBuilder {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
        "params": {"_meta": envelope(), "notifications": filter}});
    api.with_key(Method::POST, &format!("/{agent}/mcp"), key)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .json(&body)
}

/// The `method` and `params.uri` of a notification, for compact comparisons.
pub fn summary(event: &Event) -> (String, Option<String>) {
    let message = event.json();
    (event.method(), message["params"]["uri"].as_str().map(str::to_owned))
}

pub fn updated(uri: &str) -> (String, Option<String>) {
    ("notifications/resources/updated".to_owned(), Some(uri.to_owned()))
}

pub fn resources_changed() -> (String, Option<String>) {
    ("notifications/resources/list_changed".to_owned(), None)
}

pub fn prompts_changed() -> (String, Option<String>) {
    ("notifications/prompts/list_changed".to_owned(), None)
}
