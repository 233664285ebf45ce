//! `TCP_NODELAY` on the connections to PostgreSQL.
//!
//! sqlx 0.9.0 opens its TCP connections to PostgreSQL without `TCP_NODELAY` (transact-rs/sqlx issue 4335,
//! fixed after that release). Nagle's algorithm then holds back the last part of a message that leaves in
//! more than one write (a statement of a few hundred kilobytes, such as a batch of audit records, or any
//! statement over TLS that spans records) until PostgreSQL has acknowledged what went before it, and
//! PostgreSQL, waiting for the rest of the message, acknowledges only when its delayed acknowledgement
//! fires, some 40 ms later. A statement that takes PostgreSQL a millisecond then takes 40.
//!
//! The driver gives no access to its socket, so each new connection (the pools' `after_connect`) sets the
//! option on the process's TCP sockets whose peer is the database's port: its own, and the other
//! connections to that port, which want it as much. Sockets to other ports are left as they are. A
//! connection over a Unix socket has no Nagle's algorithm and needs none of this.

/// Sets `TCP_NODELAY` on every TCP socket of this process connected to `port`; returns how many it set.
#[cfg(target_os = "linux")]
pub fn set_on_connections_to(port: u16) -> usize {
    use std::os::fd::{BorrowedFd, RawFd};
    use std::os::unix::ffi::OsStrExt as _;

    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else { return 0 };
    let mut set = 0;
    for entry in entries.flatten() {
        let Some(fd) = entry.file_name().to_str().and_then(|name| name.parse::<RawFd>().ok()) else { continue };
        // Only sockets: the link of any other descriptor (files, pipes, the event poll) names something else.
        if !std::fs::read_link(entry.path()).is_ok_and(|target| target.as_os_str().as_bytes().starts_with(b"socket:")) {
            continue;
        }
        // SAFETY: the descriptor was open when listed. Another thread may close it meanwhile, and the number
        // may be reused; then the calls below fail (EBADF, ENOTSOCK, ENOTCONN) or read a socket of this
        // process that the checks below judge as they would any: nothing but `TCP_NODELAY` is ever set, and
        // only on a connected TCP socket to `port`. The borrow ends with this iteration; nothing is closed.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = socket2::SockRef::from(&fd);
        if socket.r#type().ok() != Some(socket2::Type::STREAM) {
            continue;
        }
        let is_to_port =
            socket.peer_addr().ok().and_then(|peer| peer.as_socket()).is_some_and(|peer| peer.port() == port);
        if is_to_port && socket.set_tcp_nodelay(true).is_ok() {
            set += 1;
        }
    }
    set
}

/// Elsewhere the driver's sockets are left as they are.
#[cfg(not(target_os = "linux"))]
pub fn set_on_connections_to(_port: u16) -> usize {
    0
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::net::{TcpListener, TcpStream};

    use super::*;

    #[test]
    fn only_the_connections_to_the_port_are_set() -> std::io::Result<()> {
        let (database, other) = (TcpListener::bind("127.0.0.1:0")?, TcpListener::bind("127.0.0.1:0")?);
        let to_database = TcpStream::connect(database.local_addr()?)?;
        let to_other = TcpStream::connect(other.local_addr()?)?;
        let (accepted, _) = database.accept()?;
        assert!(!to_database.nodelay()?, "a new connection starts with Nagle's algorithm");
        assert!(set_on_connections_to(database.local_addr()?.port()) >= 1);
        assert!(to_database.nodelay()?, "the connection to the port is set");
        assert!(!to_other.nodelay()?, "a connection to another port is left as it is");
        assert!(!accepted.nodelay()?, "the listening side (its peer is the client's port) is left as it is");
        Ok(())
    }
}
