//! One connection, served by hyper (HTTP/1.1 or HTTP/2, whichever the client speaks) with the listener's routes, and
//! watched for what hyper does not bound by itself:
//!
//! - **the request head** (`http.header_read_timeout_ms`): a connection's first request must arrive within
//!   it from the connection's start (for HTTP/2: the preface and the first request's header fields); each
//!   later HTTP/1 request head within it from its first byte. A connection that misses it is closed as it
//!   is (a slow-loris client gets no answer).
//! - **idleness** (`http.idle_timeout_ms`): a connection with no request in flight (none being read or
//!   answered, no stream open: an SSE stream is a request whose answer has not ended) is shut down
//!   gracefully once it has been idle that long (HTTP/2: `GOAWAY`).
//!
//! hyper's own HTTP/1 `header_read_timeout` is not used: its clock starts as soon as a response has been
//! written, so it would also be the idle timeout of every keep-alive connection, and it does not exist for
//! HTTP/2. Instead `Activity` follows the connection: the service counts the requests in flight (until
//! their answer's body is dropped), the I/O notes when bytes of a new head arrive, and the connection's task
//! checks the deadline these give. Nothing wakes the task when they change: a request would otherwise wake
//! its connection's task twice (its head arriving, its answer ending), and each such wake of a task by
//! itself makes the runtime rouse an idle worker thread. The task instead sleeps until the deadline it
//! computed, or for the shorter of the two timeouts if that comes first (`Activity::next_look`): any
//! change makes a deadline at least that far from the moment it happens, so the task always looks again
//! before the new deadline and then sleeps until exactly it.
//!
//! **Unread bodies** (HTTP/1): an answer given before the request's body was read (an early 401, 403, 413,
//! 429, ...) would otherwise leave hyper closing the connection after it without telling the client, which
//! then loses the next request it sent on it. `settle_unread_body` reads and discards the rest of such a
//! body when it is small ([`DRAIN_LIMIT`]) and arrives within `http.header_read_timeout_ms`, so the connection
//! stays usable; otherwise the answer carries `Connection: close`.
//!
//! [`DRAIN_LIMIT`]: crate::http::connection::DRAIN_LIMIT

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request, Response, Version, header};
use http_body::{Body as _, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::http::Routes;
use crate::metrics::{ConnectionTimeoutLabels, Metrics, UnreadBody, UnreadBodyLabels};

/// The most of an unread request body that is read and discarded to keep its connection usable.
pub const DRAIN_LIMIT: u64 = 64 * 1024;

/// What every connection of a listener shares.
pub struct Settings {
    pub routes: Routes,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub metrics: Arc<Metrics>,
    /// The listener's metric label.
    pub listener: &'static str,
    pub builder: auto::Builder<StreamExecutor>,
}

/// Where hyper runs each HTTP/2 stream of a connection: on the runtime [`Settings`] were made on (the
/// process's multi-threaded one), not on the connection's thread ([`crate::http::threads`]), so that the
/// streams of one busy HTTP/2 connection (a proxy multiplexing its clients over it) are served on every
/// core.
#[derive(Clone)]
pub struct StreamExecutor(tokio::runtime::Handle);

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        self.0.spawn(future);
    }
}

impl Settings {
    /// Called on the runtime that is to serve HTTP/2 streams ([`StreamExecutor`]).
    pub fn new(
        routes: Routes,
        header_read_timeout: Duration,
        idle_timeout: Duration,
        metrics: Arc<Metrics>,
        listener: &'static str,
    ) -> Self {
        let mut builder = auto::Builder::new(StreamExecutor(tokio::runtime::Handle::current()));
        // Timed here (see the module doc), not by hyper: without a timer hyper's own default would not run.
        builder.http1().header_read_timeout(None);
        Self { routes, header_read_timeout, idle_timeout, metrics, listener, builder }
    }
}

/// A timeout that closes a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timeout {
    HeaderRead,
    Idle,
}

impl Timeout {
    fn as_str(self) -> &'static str {
        match self {
            Timeout::HeaderRead => "header_read",
            Timeout::Idle => "idle",
        }
    }
}

/// No head is being read.
const NO_HEAD: u64 = u64::MAX;

/// What one connection is doing, shared by its task, its I/O, its requests (on HTTP/2 each runs in a task of
/// its own) and their bodies. Times are milliseconds since `started`, in atomics: they are written on every
/// request and read on every read from the socket.
struct Activity {
    started: Instant,
    /// Requests whose answer has not ended (or been dropped).
    in_flight: AtomicUsize,
    /// When the last request in flight ended.
    idle_since: AtomicU64,
    /// When the head being read started to arrive; [`NO_HEAD`] when none is. The connection's start for the
    /// first request.
    head_since: AtomicU64,
    /// Once the connection served an HTTP/2 request: its reads are frames of any kind (pings, window
    /// updates), not request heads, so only idleness is watched.
    is_http2: AtomicBool,
    /// HTTP/1: the unread rest of the body of the request being answered, left by its handler.
    leftover: Mutex<Option<Incoming>>,
}

impl Activity {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            head_since: AtomicU64::new(0),
            is_http2: AtomicBool::new(false),
            leftover: Mutex::new(None),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }

    /// A request's head has been read: it is in flight until the returned guard is dropped.
    fn begin(self: &Arc<Self>, is_http2: bool) -> InFlight {
        if is_http2 {
            self.is_http2.store(true, Ordering::Relaxed);
        }
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_since.store(NO_HEAD, Ordering::Release);
        InFlight(self.clone())
    }

    /// Bytes were read from the client: with nothing in flight on HTTP/1, a new head has started.
    fn on_read(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0
            && self.head_since.load(Ordering::Acquire) == NO_HEAD
            && !self.is_http2.load(Ordering::Relaxed)
        {
            self.head_since.store(self.now(), Ordering::Release);
        }
    }

    /// The deadline the connection is under now, if any: none while a request is in flight.
    fn deadline(&self, settings: &Settings) -> Option<(Instant, Timeout)> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let at = |since: u64, limit: Duration| self.started + Duration::from_millis(since) + limit;
        match self.head_since.load(Ordering::Acquire) {
            NO_HEAD => Some((at(self.idle_since.load(Ordering::Acquire), settings.idle_timeout), Timeout::Idle)),
            since => Some((at(since, settings.header_read_timeout), Timeout::HeaderRead)),
        }
    }

    /// When the connection's task looks at the connection next: at the deadline it is under, or after the
    /// shorter timeout from now if that comes first. A request that starts or ends later sets a deadline at
    /// least the shorter timeout after it does, so the look always comes before that deadline.
    fn next_look(&self, settings: &Settings) -> Instant {
        let look = Instant::now() + settings.header_read_timeout.min(settings.idle_timeout);
        self.deadline(settings).map_or(look, |(at, _)| at.min(look))
    }

    fn take_leftover(&self) -> Option<Incoming> {
        self.leftover.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take()
    }
}

/// One request in flight; dropped with its answer's body (or its handler, when the client went away).
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.0;
        if activity.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            activity.idle_since.store(activity.now(), Ordering::Release);
        }
    }
}

/// Serves one connection (after its TLS handshake, if any) until it closes, the client or a timeout closes
/// it, or `stopping` turns true: then it is shut down gracefully (requests in flight finish, HTTP/2 gets
/// `GOAWAY`).
pub async fn serve<S>(io: S, peer: SocketAddr, settings: Arc<Settings>, mut stopping: watch::Receiver<bool>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new());
    let service = Service { settings: settings.clone(), peer, activity: activity.clone() };
    let io = TokioIo::new(Watched { io, activity: activity.clone() });
    let mut connection = pin!(settings.builder.serve_connection(io, service));
    let mut is_stopping = false;
    // After a graceful shutdown for idleness, the client gets this long to let the connection end.
    let mut closing_by: Option<Instant> = None;
    loop {
        let at = closing_by.unwrap_or_else(|| activity.next_look(&settings));
        tokio::select! {
            outcome = connection.as_mut() => {
                if let Err(error) = outcome {
                    tracing::debug!(%peer, %error, "connection ended with an error");
                }
                return;
            }
            () = tokio::time::sleep_until(at) => {
                if closing_by.is_some() {
                    return;
                }
                let Some((at, timeout)) = activity.deadline(&settings) else { continue };
                if at > Instant::now() {
                    continue;
                }
                let labels = ConnectionTimeoutLabels { listener: settings.listener, timeout: timeout.as_str() };
                settings.metrics.connections_timed_out.get_or_create(&labels).inc();
                tracing::debug!(%peer, timeout = timeout.as_str(), "closing a connection");
                match timeout {
                    Timeout::HeaderRead => return,
                    Timeout::Idle => {
                        connection.as_mut().graceful_shutdown();
                        closing_by = Some(Instant::now() + settings.header_read_timeout);
                    }
                }
            }
            _ = stopping.changed(), if !is_stopping => {
                is_stopping = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
}

/// The connection's I/O, noting reads in its [`Activity`].
struct Watched<S> {
    io: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let outcome = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.on_read();
        }
        outcome
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// The routes as hyper calls them for one connection: each request carries the peer address as
/// `ConnectInfo<SocketAddr>` and is in flight until its answer's body is dropped.
#[derive(Clone)]
struct Service {
    settings: Arc<Settings>,
    peer: SocketAddr,
    activity: Arc<Activity>,
}

type Answering = Pin<Box<dyn Future<Output = Result<Response<Answer>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for Service {
    type Response = Response<Answer>;
    type Error = Infallible;
    type Future = Answering;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        let is_http1 = request.version() < Version::HTTP_2;
        let in_flight = self.activity.begin(!is_http1);
        request.extensions_mut().insert(ConnectInfo(self.peer));
        let expects_continue = request.headers().get(header::EXPECT).is_some_and(|value| value == "100-continue");
        let request = if is_http1 {
            // What an earlier request's body left after its answer was settled is not this request's.
            drop(self.activity.take_leftover());
            let activity = self.activity.clone();
            request.map(|body| Body::new(RequestBody { body: Some(body), activity }))
        } else {
            request.map(Body::new)
        };
        let (settings, activity) = (self.settings.clone(), self.activity.clone());
        Box::pin(async move {
            let mut response = settings.routes.serve(request).await;
            if is_http1 && let Some(body) = activity.take_leftover() {
                settle_unread_body(body, expects_continue, &settings, &mut response).await;
            }
            Ok(response.map(|body| Answer { body, _in_flight: in_flight }))
        })
    }
}

/// The rest of a request's body its handler did not read: read and discarded when it is at most
/// [`DRAIN_LIMIT`] bytes and arrives within `http.header_read_timeout_ms`, so the connection can serve the
/// client's next request; else (or when the client waits for `100 Continue`, which it should not be sent
/// now) the answer closes the connection with `Connection: close`.
async fn settle_unread_body(
    mut body: Incoming,
    expects_continue: bool,
    settings: &Settings,
    response: &mut Response<Body>,
) {
    let is_small = body.size_hint().lower() <= DRAIN_LIMIT;
    let drained = !expects_continue
        && is_small
        && tokio::time::timeout(settings.header_read_timeout, drain(&mut body)).await.unwrap_or(false);
    let outcome = if drained { UnreadBody::Drained } else { UnreadBody::Closed };
    settings.metrics.unread_bodies.get_or_create(&UnreadBodyLabels { outcome: outcome.as_str() }).inc();
    if !drained {
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
}

/// Reads `body` to its end; false when it holds more than [`DRAIN_LIMIT`] bytes or fails.
async fn drain(body: &mut Incoming) -> bool {
    let mut read = 0u64;
    loop {
        match std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await {
            None => return true,
            Some(Err(_)) => return false,
            Some(Ok(frame)) => {
                read += frame.data_ref().map_or(0, |data| data.len() as u64);
                if read > DRAIN_LIMIT {
                    return false;
                }
            }
        }
    }
}

/// An HTTP/1 request's body as its handler reads it; what the handler leaves unread goes back to the
/// connection ([`Activity::leftover`]) when it is dropped.
struct RequestBody {
    /// `None` once read to its end.
    body: Option<Incoming>,
    activity: Arc<Activity>,
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let Some(body) = this.body.as_mut() else { return Poll::Ready(None) };
        let frame = Pin::new(body).poll_frame(cx);
        if matches!(frame, Poll::Ready(None)) {
            this.body = None;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(Incoming::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.body.as_ref().map_or_else(|| SizeHint::with_exact(0), Incoming::size_hint)
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        if let Some(body) = self.body.take()
            && !body.is_end_stream()
        {
            *self.activity.leftover.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(body);
        }
    }
}

/// An answer's body, which keeps its request in flight until it is dropped.
pub struct Answer {
    body: Body,
    _in_flight: InFlight,
}

impl http_body::Body for Answer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
