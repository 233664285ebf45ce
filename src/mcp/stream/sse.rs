//! The one place server-sent events are built: the response headers, `message` events (a JSON-RPC answer
//! sent as an event stream, the notifications of a committed change, the acknowledgement and final result of
//! a listen stream), event ids, keep-alive comments.
//!
//! A committed change (an event row) becomes at most `2 + n` notifications, each with a fixed index:
//! 0 `notifications/resources/list_changed`, 1 `notifications/prompts/list_changed`, `2 + i`
//! `notifications/resources/updated` for the event's `i`-th URI. Indices do not depend on who listens, so
//! the legacy frames (whose event ids are the same on every stream of the agent) and the modern frames
//! (which differ only in the listen request's id) are serialised once per change on each replica, by
//! [`EventFrames::build`], and shared by every stream.
//!
//! Legacy event ids are opaque to clients: `{epoch:x}.{seq}.{index}` for a notification and
//! `{epoch:x}.{seq}` for "everything up to and including event `seq`". The epoch is the agent's, so an id
//! from a deleted and re-created agent never replays anything. Modern streams carry no event ids.
//!
//! [`EventFrames::build`]: crate::mcp::stream::sse::EventFrames::build

use std::collections::HashSet;

use axum::body::Bytes;
use axum::http::{HeaderName, HeaderValue, header};
use serde_json::value::RawValue;

use crate::domain::model::ChangeEvent;
use crate::mcp::types::meta;

/// The SSE comment idle streams send so that proxies and clients do not time them out.
pub const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// The headers of every SSE response: the type, no caching, and no buffering by nginx-like proxies.
pub fn headers() -> [(HeaderName, HeaderValue); 3] {
    [
        (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (HeaderName::from_static("x-accel-buffering"), HeaderValue::from_static("no")),
    ]
}

/// What starts a `message` event: its type, then its one data line (the JSON has no line breaks).
const MESSAGE: &str = "event: message\ndata: ";

/// One `message` event whose data is `json` (a JSON-RPC message on one line).
pub fn message(json: &[u8]) -> Bytes {
    let mut event = Vec::with_capacity(MESSAGE.len() + json.len() + 2);
    event.extend_from_slice(MESSAGE.as_bytes());
    event.extend_from_slice(json);
    event.extend_from_slice(b"\n\n");
    Bytes::from(event)
}

/// A position in an agent's notifications, as a legacy event id carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventId {
    pub epoch: i64,
    pub seq: i64,
    /// The notification of event `seq`; `None`: the whole event.
    pub index: Option<u32>,
}

impl EventId {
    pub fn encode(&self) -> String {
        match self.index {
            Some(index) => format!("{:x}.{}.{}", self.epoch, self.seq, index),
            None => format!("{:x}.{}", self.epoch, self.seq),
        }
    }

    /// A presented `Last-Event-ID`; `None` when it is not one of ours.
    pub fn parse(value: &str) -> Option<Self> {
        let mut parts = value.trim().split('.');
        let epoch = i64::from_str_radix(parts.next()?, 16).ok()?;
        let seq = parts.next()?.parse::<i64>().ok().filter(|seq| *seq >= 0)?;
        let index = match parts.next() {
            Some(index) => Some(index.parse::<u32>().ok()?),
            None => None,
        };
        parts.next().is_none().then_some(Self { epoch, seq, index })
    }
}

/// What a stream wants: list changes of either kind, and updates of these URIs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interest {
    pub resources_list: bool,
    pub prompts_list: bool,
    pub uris: HashSet<String>,
}

/// Which notification an entry of [`EventFrames`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Notification {
    ResourcesList,
    PromptsList,
    Updated(String),
}

impl Notification {
    fn is_wanted_by(&self, interest: &Interest) -> bool {
        match self {
            Notification::ResourcesList => interest.resources_list,
            Notification::PromptsList => interest.prompts_list,
            Notification::Updated(uri) => interest.uris.contains(uri),
        }
    }
}

/// One notification, serialised for both eras.
#[derive(Debug)]
struct Note {
    index: u32,
    kind: Notification,
    /// The whole legacy SSE event, with its event id (or without one, in a resync set).
    legacy: Bytes,
    /// The modern notification's JSON up to the value of `io.modelcontextprotocol/subscriptionId`, which
    /// each stream completes with its listen request's id and [`MODERN_SUFFIX`].
    modern_prefix: Bytes,
}

/// What follows the subscription id in a modern notification: closes `_meta`, `params` and the message.
const MODERN_SUFFIX: &[u8] = b"}}}\n\n";

/// The notifications of one committed change, serialised once.
#[derive(Debug)]
pub struct EventFrames {
    /// The event's sequence number (for a resync set: the head it brings the stream to).
    pub seq: i64,
    pub epoch: i64,
    notes: Vec<Note>,
    /// When the change committed (none for a resync set), for the fan-out lag metric.
    pub committed_at: Option<crate::domain::time::Timestamp>,
    /// A resync set ends with an empty event carrying the id `{epoch}.{seq}`, so a client resumes after it.
    trailer: Option<Bytes>,
}

impl EventFrames {
    /// The notifications of `event`.
    pub fn build(event: &ChangeEvent, epoch: i64) -> Self {
        let mut notes = Vec::with_capacity(2 + event.updated_uris.len());
        if event.resources_list_changed {
            notes.push(note(0, Notification::ResourcesList, Some((epoch, event.seq))));
        }
        if event.prompts_list_changed {
            notes.push(note(1, Notification::PromptsList, Some((epoch, event.seq))));
        }
        for (i, uri) in event.updated_uris.iter().enumerate() {
            let index = u32::try_from(i).unwrap_or(u32::MAX - 2) + 2;
            notes.push(note(index, Notification::Updated(uri.clone()), Some((epoch, event.seq))));
        }
        Self { seq: event.seq, epoch, notes, committed_at: Some(event.created_at), trailer: None }
    }

    /// What a stream gets when it cannot be told exactly what it missed (its position is older than the
    /// retention window, or from another epoch): both list changes and an update of every URI it
    /// subscribed to, then (legacy) an empty event whose id is the head `seq`.
    pub fn resync(epoch: i64, seq: i64, uris: &HashSet<String>) -> Self {
        let mut uris: Vec<&String> = uris.iter().collect();
        uris.sort();
        let mut notes = vec![note(0, Notification::ResourcesList, None), note(1, Notification::PromptsList, None)];
        notes.extend(uris.into_iter().map(|uri| note(2, Notification::Updated(uri.clone()), None)));
        let trailer = priming(&EventId { epoch, seq, index: None });
        Self { seq, epoch, notes, committed_at: None, trailer: Some(trailer) }
    }

    /// The legacy frames `interest` wants of the notifications after `after` (an index of this event;
    /// `None`: all of them).
    pub fn legacy<'a>(&'a self, interest: &'a Interest, after: Option<u32>) -> impl Iterator<Item = Bytes> + 'a {
        let wanted = self.notes.iter().filter(move |n| after.is_none_or(|after| n.index > after));
        let wanted = wanted.filter(|n| n.kind.is_wanted_by(interest)).map(|n| n.legacy.clone());
        wanted.chain(self.trailer.clone())
    }

    /// The modern frames `interest` wants, tagged with `subscription` (the listen request's id).
    pub fn modern<'a>(
        &'a self,
        interest: &'a Interest,
        subscription: &'a RawValue,
    ) -> impl Iterator<Item = Bytes> + 'a {
        self.notes.iter().filter(|n| n.kind.is_wanted_by(interest)).map(move |n| {
            let id = subscription.get().as_bytes();
            let mut frame = Vec::with_capacity(n.modern_prefix.len() + id.len() + MODERN_SUFFIX.len());
            frame.extend_from_slice(&n.modern_prefix);
            frame.extend_from_slice(id);
            frame.extend_from_slice(MODERN_SUFFIX);
            Bytes::from(frame)
        })
    }
}

fn note(index: u32, kind: Notification, id_of: Option<(i64, i64)>) -> Note {
    let (method, uri) = match &kind {
        Notification::ResourcesList => ("notifications/resources/list_changed", None),
        Notification::PromptsList => ("notifications/prompts/list_changed", None),
        Notification::Updated(uri) => ("notifications/resources/updated", Some(json_string(uri))),
    };
    let legacy_json = match &uri {
        Some(uri) => format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{{"uri":{uri}}}}}"#),
        None => format!(r#"{{"jsonrpc":"2.0","method":"{method}"}}"#),
    };
    let id_line = id_of
        .map(|(epoch, seq)| format!("id: {}\n", EventId { epoch, seq, index: Some(index) }.encode()))
        .unwrap_or_default();
    let legacy = [id_line.as_bytes(), &message(legacy_json.as_bytes())].concat();
    let uri_member = uri.map(|uri| format!(r#""uri":{uri},"#)).unwrap_or_default();
    let modern_prefix = format!(
        r#"{MESSAGE}{{"jsonrpc":"2.0","method":"{method}","params":{{{uri_member}"_meta":{{"{}":"#,
        meta::SUBSCRIPTION_ID
    );
    Note { index, kind, legacy: Bytes::from(legacy), modern_prefix: Bytes::from(modern_prefix) }
}

fn json_string(value: &str) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "\"\"".to_owned())
}

/// An event with an id and empty data: primes a legacy client's `Last-Event-ID` without a notification.
pub fn priming(id: &EventId) -> Bytes {
    Bytes::from(format!("id: {}\ndata: \n\n", id.encode()))
}

/// The first message of a listen stream: `notifications/subscriptions/acknowledged` with the honoured
/// filter (a JSON object).
pub fn acknowledgement(subscription: &RawValue, honoured: &serde_json::Value) -> Bytes {
    message(
        format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/acknowledged\",\
             \"params\":{{\"_meta\":{{\"{}\":{}}},\"notifications\":{}}}}}",
            meta::SUBSCRIPTION_ID,
            subscription.get(),
            honoured
        )
        .as_bytes(),
    )
}

/// The last message of a listen stream the server ends: the listen request's (successful) response.
pub fn final_result(subscription: &RawValue) -> Bytes {
    let id = subscription.get();
    message(
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"resultType\":\"complete\",\
             \"_meta\":{{\"{}\":{id}}}}}}}",
            meta::SUBSCRIPTION_ID
        )
        .as_bytes(),
    )
}

#[cfg(test)]
#[path = "sse_tests.rs"]
mod tests;
