//! The threads that serve connections: each runs a single-threaded tokio runtime of its own, and every
//! connection a listener accepts is served, for its whole life, on the thread with the fewest open
//! connections ([`ConnectionThreads::spawn`]).
//!
//! On the multi-threaded runtime a connection's task wakes on whichever worker polled its socket's
//! readiness, an idle worker is roused to steal from a busy one, and the task's memory moves between cores
//! with it: a cached read took 12.4 µs of CPU on two workers against 10.8 on one (bench/README.md). A
//! thread of its own per group of connections gives each thread its own readiness queue (epoll) and
//! timers, and no task moves. What is not a connection stays on the process's multi-threaded runtime: the
//! audit writer and the sweeps (the event listener has a thread of its own). A task a request spawns to
//! outlive it (a session's last-seen write, a stream's fan-out) runs on its connection's thread.
//!
//! HTTP/2 streams are the exception: hyper runs each as a task of its own, and those go to the multi-threaded
//! runtime ([`crate::http::connection::StreamExecutor`]), so that one HTTP/2 connection carrying many
//! clients' requests (from a proxy) is served on every core.
//!
//! A database connection the pool opens while a request runs is registered with that request's thread:
//! whichever task uses it later learns that it is ready through that thread, which looks between tasks and
//! whenever it is idle. Nothing on a connection's thread holds it long (a render over its quick budget, a
//! compile, an audit listing's large rows go to the blocking pool), so the wait is a task's length at most.
//!
//! The threads stop when their [`ConnectionThreads`] is dropped, once the application has stopped serving
//! and written its last audit records: what a connection's thread registered with its runtime (a pooled
//! database connection opened during a request) stays usable until then.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// One thread serving connections: its runtime's handle and the connections it serves.
struct Thread {
    handle: Handle,
    open: Arc<AtomicUsize>,
    /// Dropped to stop the thread: its runtime ends, and with it the tasks still on it.
    _stop: oneshot::Sender<()>,
}

/// The connection threads of a running application ([module docs](self)).
pub struct ConnectionThreads {
    threads: Vec<Thread>,
    /// Where the search for the least busy thread starts, turning, so that threads tied on connections take
    /// turns.
    next: AtomicUsize,
}

impl ConnectionThreads {
    /// `count` threads (0: one per CPU the process may use, as the system reports it, cgroup quotas
    /// included), named `hivegate-http-{n}`. A thread the system refuses to start is logged and left out;
    /// with none, connections are served as tasks on the calling runtime.
    pub fn start(count: usize) -> Self {
        let count = match count {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            count => count,
        };
        let threads = (0..count).filter_map(Thread::start).collect::<Vec<_>>();
        if threads.len() < count {
            tracing::warn!(started = threads.len(), wanted = count, "not every connection thread started");
        }
        Self { threads, next: AtomicUsize::new(0) }
    }

    /// How many threads serve connections.
    pub fn len(&self) -> usize {
        self.threads.len()
    }

    /// Whether no thread started (connections are then served on the calling runtime).
    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }

    /// Serves one connection: `serve` is called on the thread with the fewest open connections, with the
    /// socket registered with that thread's runtime, and its future runs there to its end.
    pub fn spawn<F, Fut>(&self, stream: tokio::net::TcpStream, serve: F)
    where
        F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Some(thread) = self.least_busy() else {
            tokio::spawn(serve(stream));
            return;
        };
        // The socket leaves this runtime's readiness queue for the thread's.
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%error, "a connection could not be handed to its thread");
                return;
            }
        };
        let open = OpenConnection::new(&thread.open);
        let task = async move {
            let _open = open;
            match tokio::net::TcpStream::from_std(stream) {
                Ok(stream) => serve(stream).await,
                Err(error) => tracing::debug!(%error, "a connection could not be registered on its thread"),
            }
        };
        thread.handle.spawn(task);
    }

    /// The thread with the fewest open connections, searched from a turning start.
    fn least_busy(&self) -> Option<&Thread> {
        let n = self.threads.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n).map(|i| &self.threads[(start + i) % n]).min_by_key(|thread| thread.open.load(Ordering::Relaxed))
    }
}

impl Thread {
    fn start(index: usize) -> Option<Self> {
        let (handle_tx, handle_rx) = std::sync::mpsc::sync_channel(1);
        let (stop, stopped) = oneshot::channel::<()>();
        let started = std::thread::Builder::new().name(format!("hivegate-http-{index}")).spawn(move || {
            // A shard of the request metrics of its own (src/metrics/shards.rs).
            crate::metrics::claim_shard(index);
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(error) => {
                    let _ = handle_tx.send(Err(error));
                    return;
                }
            };
            let _ = handle_tx.send(Ok(runtime.handle().clone()));
            runtime.block_on(async {
                let _ = stopped.await;
            });
        });
        let handle = match started.map_err(|error| error.to_string()).and_then(|_| match handle_rx.recv() {
            Ok(Ok(handle)) => Ok(handle),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err("the thread ended before its runtime started".to_owned()),
        }) {
            Ok(handle) => handle,
            Err(error) => {
                tracing::warn!(thread = index, %error, "a connection thread did not start");
                return None;
            }
        };
        Some(Self { handle, open: Arc::new(AtomicUsize::new(0)), _stop: stop })
    }
}

/// One open connection counted on its thread, until dropped.
struct OpenConnection(Arc<AtomicUsize>);

impl OpenConnection {
    fn new(open: &Arc<AtomicUsize>) -> Self {
        open.fetch_add(1, Ordering::Relaxed);
        Self(open.clone())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// Accepts `count` connections from clients of its own and hands each to `threads` with `serve`; returns
    /// the clients, kept open.
    async fn connect<F, Fut>(threads: &ConnectionThreads, count: usize, serve: F) -> Vec<TcpStream>
    where
        F: Fn(TcpStream) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let mut clients = Vec::new();
        for _ in 0..count {
            clients.push(TcpStream::connect(address).await.expect("connect"));
            let (accepted, _) = listener.accept().await.expect("accept");
            threads.spawn(accepted, serve.clone());
        }
        clients
    }

    /// Serves a connection by writing the name of the thread it is served on, then holding it until the client
    /// closes.
    async fn tell_thread(mut stream: TcpStream) {
        let name = std::thread::current().name().unwrap_or("unnamed").to_owned();
        let _ = stream.write_all(format!("{name}\n").as_bytes()).await;
        let _ = stream.read(&mut [0; 1]).await;
    }

    /// The thread each client's connection is served on, as the connection told it (within 10 s: a connection
    /// that is never served fails the test rather than hanging it).
    async fn threads_of(clients: &mut [TcpStream]) -> Vec<String> {
        let read = async {
            let mut names = Vec::new();
            for client in clients {
                let mut name = Vec::new();
                let mut byte = [0; 1];
                while client.read_exact(&mut byte).await.is_ok() && byte[0] != b'\n' {
                    name.push(byte[0]);
                }
                names.push(String::from_utf8(name).expect("a thread name"));
            }
            names
        };
        tokio::time::timeout(Duration::from_secs(10), read).await.expect("every connection tells its thread")
    }

    fn open(threads: &ConnectionThreads) -> Vec<usize> {
        threads.threads.iter().map(|thread| thread.open.load(Ordering::Relaxed)).collect()
    }

    /// Each connection is served on the thread with the fewest open connections when it came: kept open, they
    /// spread evenly; once a thread's connections end, the next ones go to it, not in turn.
    #[tokio::test]
    async fn connections_are_served_on_the_least_busy_thread_until_they_end() {
        let threads = ConnectionThreads::start(2);
        assert_eq!(threads.len(), 2);
        let mut clients = connect(&threads, 4, tell_thread).await;
        let names = threads_of(&mut clients).await;
        let on_first = names.iter().filter(|name| *name == "hivegate-http-0").count();
        let on_second = names.iter().filter(|name| *name == "hivegate-http-1").count();
        assert_eq!((on_first, on_second), (2, 2), "{names:?}");
        assert_eq!(open(&threads), [2, 2]);
        // The first thread's two clients close; its count goes back to 0.
        let kept: Vec<TcpStream> =
            clients.into_iter().zip(&names).filter(|(_, name)| *name == "hivegate-http-1").map(|(c, _)| c).collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while open(&threads) != [0, 2] {
            assert!(tokio::time::Instant::now() < deadline, "closed connections still counted: {:?}", open(&threads));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut more = connect(&threads, 2, tell_thread).await;
        assert_eq!(threads_of(&mut more).await, ["hivegate-http-0", "hivegate-http-0"]);
        assert_eq!(open(&threads), [2, 2]);
        drop((kept, more));
    }

    /// Dropping the threads stops them: a connection still served is dropped with its thread's runtime.
    #[tokio::test]
    async fn dropped_threads_end_the_connections_they_still_serve() {
        struct Ended(Option<oneshot::Sender<String>>);
        impl Drop for Ended {
            fn drop(&mut self) {
                let name = std::thread::current().name().unwrap_or("unnamed").to_owned();
                if let Some(tx) = self.0.take() {
                    let _ = tx.send(name);
                }
            }
        }
        let threads = ConnectionThreads::start(1);
        let (ended_tx, ended_rx) = oneshot::channel();
        let ended = Arc::new(Mutex::new(Some(Ended(Some(ended_tx)))));
        let _clients = connect(&threads, 1, move |_stream: TcpStream| {
            let ended = ended.lock().expect("lock").take();
            async move {
                let _ended = ended;
                std::future::pending::<()>().await;
            }
        })
        .await;
        drop(threads);
        let thread = tokio::time::timeout(Duration::from_secs(10), ended_rx)
            .await
            .expect("the connection ends once its thread is stopped")
            .expect("its task dropped, not forgotten");
        assert_eq!(thread, "hivegate-http-0");
    }
}
