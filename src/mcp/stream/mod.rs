//! Change notifications over server-sent events: the streams clients hold open, and how a committed change
//! reaches them.
//!
//! # The files
//!
//! - [`standalone`]: `GET` (a legacy session's stream, resumable with `Last-Event-ID`) and `DELETE` (end the
//!   session) on `/{agent_id}/mcp`.
//! - [`listen`]: `subscriptions/listen` (modern): its filter, its acknowledgement, its stream.
//! - [`hub`]: every stream open on this replica, its limits, and the bus messages that close streams or
//!   change what they want.
//! - [`fanout`]: one agent's streams here and their pump, which reads new event rows once per replica.
//! - [`body`]: one open stream as a response body: replay, live delivery, gaps, keep-alives, the end.
//! - [`sse`]: the one place server-sent events are spelled: frames, event ids, response headers,
//!   keep-alives.
//!
//! # The life of one notification
//!
//! An admin change commits with its event row → the bus ([`crate::events`]) applies `Change{agent, seq}` to
//! the [`hub`] on every replica, in commit order → the hub wakes the agent's pump ([`fanout`]), which reads
//! the new rows from the event table once and serialises their notifications once
//! ([`sse::EventFrames::build`]) → the pump offers the shared frames to each open stream of the agent through
//! the stream's bounded queue → the stream ([`body`]) keeps what its session's subscriptions or its listen
//! filter want ([`sse::Interest`]) and writes it. A stream that finds a gap, fell behind (`lagged`) or
//! starts from `Last-Event-ID` reads the missing events from the event table itself, so nothing is sent twice
//! or lost within the retention window; before it, the client gets a resync set instead.
//!
//! [`standalone`]: crate::mcp::stream::standalone
//! [`listen`]: crate::mcp::stream::listen
//! [`hub`]: crate::mcp::stream::hub
//! [`fanout`]: crate::mcp::stream::fanout
//! [`body`]: crate::mcp::stream::body
//! [`sse`]: crate::mcp::stream::sse
//! [`sse::EventFrames::build`]: crate::mcp::stream::sse::EventFrames::build
//! [`sse::Interest`]: crate::mcp::stream::sse::Interest

/// One open SSE stream: the response body of a `GET` or a listen.
pub mod body;
/// One agent's streams on this replica and their pump: committed events read once, fanned out to all.
pub mod fanout;
/// The stream hub: every SSE stream of this replica, and the bus messages applied to them.
pub mod hub;
/// `subscriptions/listen` (modern): the filter, its acknowledgement, the stream.
pub mod listen;
/// The one place SSE events are built: event ids, frames, response headers, keep-alives.
pub mod sse;
/// `GET` (the session's SSE stream) and `DELETE` (end the session) for legacy clients.
pub mod standalone;
