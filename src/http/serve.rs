//! The accept loop of a listener: each TCP connection is admitted against the caps ([`super::admission`]) or
//! refused at once, gets `TCP_NODELAY`, and is handed to the least busy connection thread
//! ([`super::threads`]), where it gets its TLS handshake when the listener serves TLS and is then served in a
//! task of its own ([`super::connection`]). On shutdown the loop stops accepting, every connection is shut down
//! gracefully, and [`serve`] returns once the last one has closed.
//!
//! [`super::admission`]: crate::http::admission
//! [`super::connection`]: crate::http::connection
//! [`super::threads`]: crate::http::threads

use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::admission::{Admission, Refusal};
use super::connection::{self, Settings};
use super::threads::ConnectionThreads;
use crate::metrics::ListenerLabels;
use crate::tls::TlsHandshake;

/// How long the loop waits before accepting again after the process ran out of file descriptors or memory:
/// long enough not to spin, short enough that little is lost once some are free again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The answer written, without reading anything, on a connection refused by a cap (plain HTTP only; a TLS
/// connection is closed before its handshake).
const REFUSED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-type: text/plain\r\n\
retry-after: 1\r\ncontent-length: 21\r\n\r\ntoo many connections\n";

/// One listener, ready to serve.
pub struct Listener {
    pub tcp: TcpListener,
    /// The TLS handshake of each connection, when the listener serves TLS.
    pub tls: Option<TlsHandshake>,
    pub admission: Arc<Admission>,
    pub settings: Arc<Settings>,
    /// Where its connections are served.
    pub threads: Arc<ConnectionThreads>,
}

/// Serves `listener` until `stopped` completes, then shuts every connection down gracefully and returns once
/// the last has closed. Never fails: an `accept` that fails is counted, logged and retried.
pub async fn serve(listener: Listener, stopped: impl Future<Output = ()> + Send) {
    let Listener { tcp, tls, admission, settings, threads } = listener;
    let tls = tls.map(Arc::new);
    let (stopping_tx, stopping) = watch::channel(false);
    // Every connection task holds a receiver: once all are gone, every connection has closed.
    let (open_tx, open) = watch::channel(());
    let mut stopped = pin!(stopped);
    let mut is_failing = false;
    loop {
        let (stream, peer) = tokio::select! {
            accepted = tcp.accept() => match accepted {
                Ok(accepted) => {
                    is_failing = false;
                    accepted
                }
                Err(error) => {
                    accept_failed(error, &mut is_failing, &settings).await;
                    continue;
                }
            },
            () = &mut stopped => break,
        };
        let permit = match admission.admit(peer.ip()) {
            Ok(permit) => permit,
            Err(refusal) => {
                refuse(&stream, peer, refusal, tls.is_none());
                continue;
            }
        };
        // Small answers go out at once instead of waiting on Nagle's algorithm for an ACK.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%peer, %error, "could not set TCP_NODELAY");
        }
        let (tls, settings, mut stopping, open) = (tls.clone(), settings.clone(), stopping.clone(), open.clone());
        threads.spawn(stream, move |stream| async move {
            let _counted = (permit, open);
            match tls {
                None => connection::serve(stream, peer, settings, stopping).await,
                Some(tls) => {
                    // A handshake still under way when the server stops is abandoned.
                    let handshake = tokio::select! {
                        handshake = tls.accept(stream) => handshake,
                        _ = stopping.wait_for(|stopping| *stopping) => return,
                    };
                    match handshake {
                        Ok(stream) => connection::serve(stream, peer, settings, stopping).await,
                        Err(error) => tracing::debug!(%peer, %error, "TLS handshake failed"),
                    }
                }
            }
        });
    }
    drop(tcp);
    let _ = stopping_tx.send(true);
    drop(open);
    open_tx.closed().await;
}

/// A connection over a cap: a plain one is told so in one write that never waits, then both are closed.
fn refuse(stream: &TcpStream, peer: SocketAddr, refusal: Refusal, is_plain: bool) {
    tracing::debug!(%peer, cap = refusal.as_str(), "connection refused");
    if is_plain {
        let _ = stream.try_write(REFUSED);
    }
}

/// A connection that failed before it was accepted is skipped; when the process is out of file descriptors
/// or memory, waits [`ACCEPT_BACKOFF`] before accepting again. Logged as an error once per run of failures.
async fn accept_failed(error: std::io::Error, is_failing: &mut bool, settings: &Settings) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(error.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset) {
        return;
    }
    settings.metrics.accept_errors.get_or_create(&ListenerLabels { listener: settings.listener }).inc();
    if !*is_failing {
        tracing::error!(listener = settings.listener, %error, "accepting a connection failed; retrying");
        *is_failing = true;
    }
    tokio::time::sleep(ACCEPT_BACKOFF).await;
}

/// Warns when the caps allow more connections than the process may open files: beyond the open-file limit,
/// `accept` fails (the listener keeps retrying) instead of refusing cleanly.
pub fn check_descriptor_limit(connections: u64) {
    #[cfg(target_os = "linux")]
    {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes the limit into the struct it is given, nothing else.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            return;
        }
        /// Descriptors kept for the database pool, the listeners, logs and files.
        const RESERVE: u64 = 256;
        let available = limit.rlim_cur.saturating_sub(RESERVE);
        if connections == 0 || connections > available {
            tracing::warn!(
                open_files = limit.rlim_cur,
                connections = if connections == 0 { "unlimited".to_owned() } else { connections.to_string() },
                "the connection caps (http.max_connections per listener) allow more connections than the open-file \
                 limit leaves room for: beyond it connections fail to be accepted instead of being refused; raise \
                 the limit (ulimit -n, LimitNOFILE) or lower http.max_connections"
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = connections;
}
