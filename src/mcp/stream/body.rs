//! One open SSE stream: the body of a legacy `GET` or of a `subscriptions/listen` response.
//!
//! The stream is a [`futures::Stream`] polled by the connection's own task whenever the socket can take
//! more (no task of its own): it writes what is pending, then waits for the next change from its queue or
//! the next keep-alive. It keeps its position (the last event sequence number it dealt with) in
//! [`StreamState::cursor`]: a change at or before it is a duplicate and
//! skipped; a change after a gap, a full queue (`lagged`), or a start from `Last-Event-ID` makes it read the
//! missing events from the event table itself. A position older than the retention window gets the resync
//! set ([`EventFrames::resync`]).
//!
//! It ends when the hub drops its queue's sender (shutdown, revoked key, deleted agent, ended or replaced
//! session, a legacy stream that fell behind) after delivering what is queued, when its key expires (a timer
//! of the stream's own, set from the key's `expiresAt`, so every replica ends its streams at that instant with
//! no message between them), or when the client goes away (the connection drops the body, and with it the
//! [`Registration`]). A modern stream the server ends gets the listen request's final result first.
//!
//! [`StreamState::cursor`]: crate::mcp::stream::hub::StreamState::cursor
//! [`EventFrames::resync`]: crate::mcp::stream::sse::EventFrames::resync
//! [`Registration`]: crate::mcp::stream::hub::Registration

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::{Body, Bytes};
use serde_json::value::RawValue;
use tokio::sync::mpsc::error::TryRecvError;
use tokio::time::{Interval, MissedTickBehavior, Sleep};

use super::hub::{EVENT_PAGE, Registration};
use super::sse::{self, EventFrames};
use crate::domain::AgentId;
use crate::domain::session::SessionDigest;
use crate::domain::time::Timestamp;
use crate::mcp::session::Sessions;
use crate::store::Store;

/// The era-specific part of a stream.
pub enum Flavor {
    /// A legacy session's stream: event ids, keep-alives keep the session alive.
    Legacy { session: SessionDigest, sessions: Arc<Sessions> },
    /// A listen stream: every message tagged with the listen request's id; a final result at the end.
    Modern { listen_id: Box<RawValue> },
}

/// Where a stream starts.
pub enum Start {
    /// Live from this position on (nothing to replay).
    At(i64),
    /// Replay the events after this position (a legacy `Last-Event-ID`): from notification `index` of
    /// event `seq` on when `partial` is set.
    Replay { after: i64, partial: Option<(i64, u32)> },
    /// The position cannot be replayed exactly: the resync set up to this head, then live.
    Resync(i64),
}

enum Phase {
    /// Read the events after the cursor from the table, then go live.
    CatchUp,
    Live,
    Done,
}

pub struct Stream {
    registration: Registration,
    store: Arc<dyn Store>,
    agent: AgentId,
    flavor: Flavor,
    pending: VecDeque<Bytes>,
    keep_alive: Interval,
    /// Fires when the key the stream was opened with expires (none for a key without `expiresAt`). Boxed:
    /// a `Sleep` must stay where it is once polled, and the stream moves into its body.
    expiry: Option<Pin<Box<Sleep>>>,
    phase: Phase,
    /// The first event to deliver only partly (from a `Last-Event-ID` naming one of its notifications).
    partial: Option<(i64, u32)>,
}

impl Stream {
    /// A stream for `registration`, starting at `start`, whose first frames are `first` (a priming event or
    /// a listen acknowledgement).
    pub fn new(
        registration: Registration,
        store: Arc<dyn Store>,
        agent: AgentId,
        flavor: Flavor,
        start: Start,
        first: Option<Bytes>,
        keep_alive: Duration,
    ) -> Self {
        let mut keep_alive = tokio::time::interval_at(tokio::time::Instant::now() + keep_alive, keep_alive);
        keep_alive.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut stream = Self {
            registration,
            store,
            agent,
            flavor,
            pending: first.into_iter().collect(),
            keep_alive,
            expiry: None,
            phase: Phase::Live,
            partial: None,
        };
        match start {
            Start::At(position) => stream.set_cursor(position),
            Start::Replay { after, partial } => {
                stream.set_cursor(after);
                stream.partial = partial;
                stream.phase = Phase::CatchUp;
            }
            Start::Resync(head) => stream.resync(head),
        }
        stream
    }

    /// Ends the stream at `expires_at` (the key's expiry), as revoking the key would; `None` never.
    pub fn until(mut self, expires_at: Option<Timestamp>) -> Self {
        self.expiry = expires_at.map(|at| {
            let left = at.as_micros().saturating_sub(Timestamp::now().as_micros()).max(0);
            Box::pin(tokio::time::sleep(Duration::from_micros(left.unsigned_abs())))
        });
        self
    }

    /// The response body.
    pub fn into_body(self) -> Body {
        Body::from_stream(futures::stream::unfold(self, |mut stream| async move {
            stream.next_frame().await.map(|frame| (Ok::<_, Infallible>(frame), stream))
        }))
    }

    fn cursor(&self) -> i64 {
        self.registration.shared.cursor.load(Ordering::Acquire)
    }

    fn set_cursor(&self, position: i64) {
        self.registration.shared.cursor.store(position, Ordering::Release);
    }

    async fn next_frame(&mut self) -> Option<Bytes> {
        loop {
            if let Some(frame) = self.pending.pop_front() {
                return Some(frame);
            }
            match self.phase {
                Phase::Done => return None,
                Phase::CatchUp => {
                    self.phase = Phase::Live;
                    self.catch_up().await;
                    continue;
                }
                Phase::Live => {}
            }
            match self.registration.queue.try_recv() {
                Ok(frames) => {
                    self.accept(&frames).await;
                    continue;
                }
                Err(TryRecvError::Disconnected) => {
                    self.finish(true);
                    continue;
                }
                Err(TryRecvError::Empty) => {
                    if self.registration.shared.lagged.swap(false, Ordering::AcqRel) {
                        self.phase = Phase::CatchUp;
                        continue;
                    }
                }
            }
            tokio::select! {
                received = self.registration.queue.recv() => match received {
                    Some(frames) => self.accept(&frames).await,
                    None => self.finish(true),
                },
                _ = self.keep_alive.tick() => {
                    self.pending.push_back(Bytes::from_static(sse::KEEP_ALIVE));
                    if let Flavor::Legacy { session, sessions } = &self.flavor {
                        sessions.touch(session);
                    }
                }
                () = expired(&mut self.expiry) => self.finish(true),
            }
        }
    }

    /// A change from the pump: skipped when already dealt with, preceded by the events of a gap.
    async fn accept(&mut self, frames: &EventFrames) {
        if frames.seq <= self.cursor() {
            return;
        }
        if frames.seq > self.cursor() + 1 {
            self.catch_up().await;
            if frames.seq <= self.cursor() {
                return;
            }
        }
        self.deliver(frames);
    }

    /// Delivers every event after the cursor from the event table (a gap, a lag or a replay). An event
    /// missing at the start of what is read means the position is older than the retention window.
    async fn catch_up(&mut self) {
        loop {
            let after = self.cursor();
            let events = match self.store.events_after(&self.agent, after, EVENT_PAGE).await {
                Ok(events) => events,
                Err(error) => {
                    tracing::warn!(%error, agent = %self.agent, "a stream cannot read its events; closing it");
                    return self.finish(false);
                }
            };
            match events.first() {
                Some(first) if first.seq > after + 1 => self.resync(first.seq - 1),
                Some(_) => {}
                None => {
                    // Nothing after the position: fine, unless the agent's head is past it (all pruned).
                    match self.store.event_head(&self.agent).await {
                        Ok(Some((_, head))) if head > after => self.resync(head),
                        Ok(_) => {}
                        Err(error) => {
                            tracing::warn!(%error, agent = %self.agent, "a stream cannot read its head; closing it");
                            self.finish(false);
                        }
                    }
                    return;
                }
            }
            for event in &events {
                let mut frames = EventFrames::build(event, self.registration.epoch());
                // Read back from the event table: how old it is says nothing about the fan-out.
                frames.committed_at = None;
                self.deliver(&frames);
            }
            if events.len() < EVENT_PAGE as usize {
                return;
            }
        }
    }

    fn deliver(&mut self, frames: &EventFrames) {
        let partial = self.partial.take_if(|(seq, _)| *seq == frames.seq).map(|(_, index)| index);
        let interest = self.registration.shared.interest();
        let before = self.pending.len();
        match &self.flavor {
            Flavor::Legacy { .. } => self.pending.extend(frames.legacy(&interest, partial)),
            Flavor::Modern { listen_id } => self.pending.extend(frames.modern(&interest, listen_id)),
        }
        drop(interest);
        let sent = (self.pending.len() - before) as u64;
        if sent > 0 {
            let metrics = self.registration.metrics();
            metrics.notifications_sent.inc_by(sent);
            // Deliveries from the hub only: a replay's age is the client's, not the fan-out's.
            if let Some(committed) = frames.committed_at {
                let lag = Timestamp::now().as_micros().saturating_sub(committed.as_micros()).max(0);
                metrics.notification_lag.observe(lag as f64 / 1_000_000.0);
            }
        }
        self.set_cursor(frames.seq);
    }

    /// Everything may have changed up to `head`: say so, then continue after it.
    fn resync(&mut self, head: i64) {
        let uris = self.registration.shared.interest().uris.clone();
        self.deliver(&EventFrames::resync(self.registration.epoch(), head, &uris));
    }

    /// Ends the stream after what is pending. A modern stream the server ends gracefully gets its final
    /// result; one that fails simply ends, which its client takes as an unexpected disconnect; one the
    /// client cancelled gets nothing more at all.
    fn finish(&mut self, is_graceful: bool) {
        let is_cancelled = self.registration.shared.is_cancelled.load(Ordering::Acquire);
        if is_cancelled {
            self.pending.clear();
        }
        if let (Flavor::Modern { listen_id }, true, false) = (&self.flavor, is_graceful, is_cancelled) {
            self.pending.push_back(sse::final_result(listen_id));
        }
        self.phase = Phase::Done;
    }
}

/// Completes when `expiry` fires; never without one.
async fn expired(expiry: &mut Option<Pin<Box<Sleep>>>) {
    match expiry {
        Some(sleep) => sleep.as_mut().await,
        None => std::future::pending().await,
    }
}
