//! The PostgreSQL side of the bus: every replica LISTENs on [`CHANNEL`] and forwards what it hears to its
//! [`LocalBus`].
//!
//! Notifications are sent by [`crate::store::postgres::PgStore`] inside each change's transaction, so they
//! arrive exactly at commit, in commit order, at every replica including the writer's. They are not stored:
//! a notification sent while the listener is disconnected is lost. So when the connection drops, the
//! listener publishes [`BusMessage::Offline`] at once (caches stop caching), reconnects (backing off from
//! 100 ms to 5 s), LISTENs again, and only then publishes [`BusMessage::Resync`]: consumers catch up from the
//! event table, which holds everything that committed meanwhile, and from then on notifications flow again.
//! Nothing is lost.
//!
//! Each listener also keeps its replica's row in the `replica` table fresh, and answers every
//! [`BusMessage::Barrier`] it hears with a [`BusMessage::Ack`] once it has applied everything before it.
//! A writer waits for the acknowledgements of every fresh replica ([`LocalBus::settle`]), which is what
//! makes a revocation or a change visible on every replica by the time the write is answered. Freshness is
//! proven end to end: the replica sends a [`BusMessage::Beat`] every [`BEAT_INTERVAL`] and refreshes its
//! row only when its own listener hears it back, so a replica whose notifications stopped arriving stops
//! being waited for within [`REPLICA_TTL_SECS`].
//!
//! [`BEAT_INTERVAL`]: crate::events::postgres::BEAT_INTERVAL
//! [`REPLICA_TTL_SECS`]: crate::events::postgres::REPLICA_TTL_SECS

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener};

use super::{BusMessage, CHANNEL, LocalBus};
use crate::store::postgres::{PgStore, store_error};
use crate::store::{ReplicaStore, StoreError};

/// How the listener's connection shows in `pg_stat_activity` (operators and tests can find it by this).
pub const LISTENER_APPLICATION_NAME: &str = "hivegate-listener";
/// How often a replica sends its heartbeat.
pub const BEAT_INTERVAL: Duration = Duration::from_secs(2);
/// A replica whose listener has not heard its own heartbeat for this long is no longer waited for.
pub const REPLICA_TTL_SECS: u64 = 10;

/// The first wait before reconnecting; doubled after each failed attempt up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long stopping may take to remove this replica's row.
const DEREGISTER_TIMEOUT: Duration = Duration::from_secs(3);

/// The running listener. [`PgBus::stop`] (or, without waiting, dropping it) ends the forwarding loop and
/// removes the replica from the live ones.
///
/// The loop runs on a thread of its own with its own single-threaded runtime, not as a task among the
/// request handlers: a notification is applied (the bus's hooks drop stale cache entries) as soon as the
/// operating system wakes the thread, instead of waiting its turn behind busy request tasks. That keeps the
/// window in which another replica's change is known to PostgreSQL but not yet here as small as it can be.
pub struct PgBus {
    replica: String,
    /// Sending (or dropping) it ends the loop, which closes the connection; the thread then deregisters.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// Completes once the thread has deregistered the replica.
    stopped: Option<tokio::sync::oneshot::Receiver<()>>,
}

/// What the listener thread works with.
struct Listener {
    replica: String,
    bus: LocalBus,
    /// The listener connection's options.
    options: PgConnectOptions,
    /// Heartbeats and the replica's row go through a connection of their own, so they never interleave
    /// with a wait for notifications on the listener's.
    side: PgStore,
}

impl PgBus {
    /// Connects, LISTENs and registers this replica (failing if the database cannot be reached now), then
    /// forwards every notification to `bus` from the listener thread.
    pub async fn start(url: &str, bus: LocalBus) -> Result<PgBus, StoreError> {
        let plain = PgConnectOptions::from_str(url).map_err(store_error)?;
        let listener = Listener {
            replica: uuid::Uuid::new_v4().to_string(),
            bus,
            options: plain.clone().application_name(LISTENER_APPLICATION_NAME),
            side: PgStore::side(plain.application_name("hivegate"), CONNECT_TIMEOUT),
        };
        let replica = listener.replica.clone();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<Result<(), StoreError>>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (stopped_tx, stopped_rx) = tokio::sync::oneshot::channel::<()>();
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
                    let connection = match listener.listen().await {
                        Ok(connection) => connection,
                        Err(error) => {
                            let _ = started_tx.send(Err(error));
                            return;
                        }
                    };
                    let _ = started_tx.send(Ok(()));
                    tokio::select! {
                        () = listener.run(connection) => {}
                        () = beat(&listener.side, &listener.replica) => {}
                        _ = stop_rx => {}
                    }
                    deregister(&listener.side, &listener.replica).await;
                    let _ = stopped_tx.send(());
                });
            })
            .map_err(|error| StoreError::Corrupt(format!("cannot start the listener thread: {error}")))?;
        match started_rx.await {
            Ok(Ok(())) => Ok(PgBus { replica, stop: Some(stop_tx), stopped: Some(stopped_rx) }),
            Ok(Err(error)) => Err(error),
            Err(_) => Err(StoreError::Corrupt("the listener thread ended before it started".to_owned())),
        }
    }

    /// This replica's id in the `replica` table and in acknowledgements.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// Stops forwarding and waits (briefly) until the replica has left the live ones, so that other
    /// replicas' changes stop waiting for it at once.
    pub async fn stop(mut self) {
        self.shutdown();
        if let Some(stopped) = self.stopped.take() {
            let _ = tokio::time::timeout(DEREGISTER_TIMEOUT, stopped).await;
        }
    }

    /// Stops forwarding and closes the listener's connection, without waiting.
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

impl Listener {
    /// A listener on its own single connection, subscribed to [`CHANNEL`], with this replica registered as
    /// live.
    async fn listen(&self) -> Result<PgListener, StoreError> {
        // A pool of one is how `PgListener` holds its connection; no idle or lifetime limits, the connection
        // is meant to live as long as it can.
        let pool = crate::store::postgres::pool_options(&self.options)
            .max_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .acquire_timeout(CONNECT_TIMEOUT)
            .connect_with(self.options.clone())
            .await
            .map_err(store_error)?;
        let mut listener = PgListener::connect_with(&pool).await.map_err(store_error)?;
        listener.ignore_pool_close_event(true);
        // We reconnect ourselves, so that `Resync` is published only once the new connection LISTENs.
        listener.eager_reconnect(false);
        listener.listen(CHANNEL).await.map_err(store_error)?;
        PgStore::register_replica_on(&mut listener, &self.replica).await?;
        Ok(listener)
    }

    /// Forwards until the connection is lost, reconnects, announces `Resync`; forever (until dropped).
    async fn run(&self, mut connection: PgListener) {
        loop {
            if let Err(error) = self.forward(&mut connection).await {
                tracing::warn!(%error, "event listener failed; reconnecting");
            } else {
                tracing::warn!("event listener lost its connection; reconnecting");
            }
            self.bus.publish(BusMessage::Offline);
            drop(connection);
            connection = self.reconnect().await;
            tracing::info!("event listener reconnected; consumers resync from the event table");
            self.bus.publish(BusMessage::Resync);
        }
    }

    /// Publishes every notification on the bus, refreshes this replica's row on its own heartbeat and
    /// acknowledges barriers, until the connection fails (`Ok` when it was simply closed).
    async fn forward(&self, connection: &mut PgListener) -> Result<(), StoreError> {
        while let Some(notification) = connection.try_recv().await.map_err(store_error)? {
            let message = match serde_json::from_str::<BusMessage>(notification.payload()) {
                Ok(message) => message,
                Err(error) => {
                    tracing::warn!(%error, "skipping an unparsable event notification");
                    continue;
                }
            };
            match message {
                BusMessage::Beat { replica } => {
                    if replica == self.replica {
                        PgStore::refresh_replica_on(connection, &self.replica).await?;
                    }
                }
                BusMessage::Barrier { id } => {
                    // The hooks have applied every message before the barrier: acknowledge it.
                    self.bus.publish(BusMessage::Barrier { id: id.clone() });
                    let ack = payload(&BusMessage::Ack { barrier: id, replica: self.replica.clone() });
                    sqlx::query("select pg_notify($1, $2)")
                        .bind(CHANNEL)
                        .bind(ack)
                        .execute(&mut *connection)
                        .await
                        .map_err(store_error)?;
                }
                message => self.bus.publish(message),
            }
        }
        Ok(())
    }

    /// Connects and LISTENs again, backing off while the database is unreachable.
    async fn reconnect(&self) -> PgListener {
        let mut backoff = FIRST_BACKOFF;
        loop {
            tokio::time::sleep(backoff).await;
            match self.listen().await {
                Ok(listener) => return listener,
                Err(error) => {
                    tracing::warn!(%error, retry_in_ms = backoff.as_millis() as u64, "event listener cannot reconnect");
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }
}

/// Sends this replica's heartbeat every [`BEAT_INTERVAL`], forever; its listener refreshes the replica's
/// row when it hears it.
async fn beat(side: &PgStore, replica: &str) {
    let payload = payload(&BusMessage::Beat { replica: replica.to_owned() });
    let mut interval = tokio::time::interval(BEAT_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        if let Err(error) = side.notify(&payload).await {
            tracing::debug!(%error, "could not send the listener heartbeat");
        }
    }
}

/// Removes the replica from the live ones, so that no change waits for it any more.
async fn deregister(side: &PgStore, replica: &str) {
    match tokio::time::timeout(DEREGISTER_TIMEOUT, side.deregister_replica(replica)).await {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => tracing::warn!(%error, "could not deregister this replica; others stop waiting for it soon"),
        Err(_) => tracing::warn!("deregistering this replica timed out; others stop waiting for it soon"),
    }
    side.close().await;
}

/// A bus message as a NOTIFY payload.
fn payload(message: &BusMessage) -> String {
    serde_json::to_string(message).unwrap_or_default()
}
