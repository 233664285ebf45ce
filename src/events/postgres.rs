//! The PostgreSQL side of the bus: every replica LISTENs on [`CHANNEL`] and forwards what it hears to its
//! [`LocalBus`].
//!
//! Notifications are sent by [`crate::store::postgres::PgStore`] inside each change's transaction, so they
//! arrive exactly at commit, in commit order, at every replica including the writer's. They are not stored:
//! a notification sent while the listener is disconnected is lost. So when the connection drops, the
//! listener reconnects (backing off from 100 ms to 5 s), LISTENs again, and only then publishes
//! [`BusMessage::Resync`]: consumers drop their caches and catch up from the event table, which holds
//! everything that committed meanwhile, and from then on notifications flow again. Nothing is lost.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};

use super::{BusMessage, CHANNEL, LocalBus};
use crate::store::StoreError;
use crate::store::postgres::store_error;

/// How the listener's connection shows in `pg_stat_activity` (operators and tests can find it by this).
pub const LISTENER_APPLICATION_NAME: &str = "hivegate-listener";

/// The first wait before reconnecting; doubled after each failed attempt up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The running listener. Dropping it (or [`PgBus::shutdown`]) stops the forwarding loop.
///
/// The loop runs on a thread of its own with its own single-threaded runtime, not as a task among the
/// request handlers: a notification is applied (the bus's hooks drop stale cache entries) as soon as the
/// operating system wakes the thread, instead of waiting its turn behind busy request tasks. That keeps the
/// window in which another replica's change is known to PostgreSQL but not yet here as small as it can be.
pub struct PgBus {
    /// Sending (or dropping) it ends the loop, which closes the connection; the thread then exits.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl PgBus {
    /// Connects and LISTENs (failing if the database cannot be reached now), then forwards every
    /// notification to `bus` from the listener thread.
    pub async fn start(url: &str, bus: LocalBus) -> Result<PgBus, StoreError> {
        let options = PgConnectOptions::from_str(url).map_err(store_error)?.application_name(LISTENER_APPLICATION_NAME);
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<Result<(), StoreError>>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("hivegate-listener".to_owned())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ =
                            started_tx.send(Err(StoreError::Corrupt(format!("cannot start the listener: {error}"))));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let listener = match listen(&options).await {
                        Ok(listener) => listener,
                        Err(error) => {
                            let _ = started_tx.send(Err(store_error(error)));
                            return;
                        }
                    };
                    let _ = started_tx.send(Ok(()));
                    tokio::select! {
                        () = run(listener, options, bus) => {}
                        _ = stop_rx => {}
                    }
                });
            })
            .map_err(|error| StoreError::Corrupt(format!("cannot start the listener thread: {error}")))?;
        match started_rx.await {
            Ok(Ok(())) => Ok(PgBus { stop: Some(stop_tx) }),
            Ok(Err(error)) => Err(error),
            Err(_) => Err(StoreError::Corrupt("the listener thread ended before it started".to_owned())),
        }
    }

    /// Stops forwarding and closes the listener's connection.
    pub fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for PgBus {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A listener on its own single connection, subscribed to [`CHANNEL`].
async fn listen(options: &PgConnectOptions) -> Result<PgListener, sqlx::Error> {
    // A pool of one is how `PgListener` holds its connection; no idle or lifetime limits, the connection is
    // meant to live as long as it can.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .idle_timeout(None)
        .max_lifetime(None)
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect_with(options.clone())
        .await?;
    let mut listener = PgListener::connect_with(&pool).await?;
    listener.ignore_pool_close_event(true);
    // We reconnect ourselves, so that `Resync` is published only once the new connection LISTENs.
    listener.eager_reconnect(false);
    listener.listen(CHANNEL).await?;
    Ok(listener)
}

/// Forwards until the connection is lost, reconnects, announces `Resync`; forever (until aborted).
async fn run(mut listener: PgListener, options: PgConnectOptions, bus: LocalBus) {
    loop {
        forward(&mut listener, &bus).await;
        drop(listener);
        listener = reconnect(&options).await;
        tracing::info!("event listener reconnected; consumers resync from the event table");
        bus.publish(BusMessage::Resync);
    }
}

/// Publishes every notification on `bus` until the connection fails.
async fn forward(listener: &mut PgListener, bus: &LocalBus) {
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => match serde_json::from_str::<BusMessage>(notification.payload()) {
                Ok(message) => bus.publish(message),
                Err(error) => tracing::warn!(%error, "skipping an unparsable event notification"),
            },
            Ok(None) => {
                tracing::warn!("event listener lost its connection; reconnecting");
                return;
            }
            Err(error) => {
                tracing::warn!(%error, "event listener failed; reconnecting");
                return;
            }
        }
    }
}

/// Connects and LISTENs again, backing off while the database is unreachable.
async fn reconnect(options: &PgConnectOptions) -> PgListener {
    let mut backoff = FIRST_BACKOFF;
    loop {
        tokio::time::sleep(backoff).await;
        match listen(options).await {
            Ok(listener) => return listener,
            Err(error) => {
                tracing::warn!(%error, retry_in_ms = backoff.as_millis() as u64, "event listener cannot reconnect");
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}
