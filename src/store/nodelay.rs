//! `TCP_NODELAY` on the connections to PostgreSQL.
//!
//! sqlx 0.9.0 opens its TCP connections to PostgreSQL without `TCP_NODELAY` (transact-rs/sqlx issue 4335,
//! fixed after that release). Nagle's algorithm then holds back the last part of a message that leaves in
//! more than one write (a statement of a few hundred kilobytes, such as a batch of audit records, or any
//! statement over TLS that spans records) until PostgreSQL has acknowledged what went before it, and
//! PostgreSQL, waiting for the rest of the message, acknowledges only when its delayed acknowledgement
//! fires, some 40 ms later. A statement that takes PostgreSQL a millisecond then takes 40.
//!
//! The driver gives no access to its socket, so each new pooled connection (the pools' `after_connect`)
//! sets the option on the process's TCP sockets whose peer is the database's port: its own, and the other
//! connections to that port, which want it as much. Sockets to other ports are left as they are. A
//! connection over a Unix socket has no Nagle's algorithm and needs none of this; nor does the one
//! connection that applies the migrations at start-up, which sends a few statements and closes.

/// Sets `TCP_NODELAY` on every TCP socket of this process connected to `port`; returns how many it set.
///
/// The descriptors are numbers read from /proc/self/fd, used only as numbers: another thread may close one
/// meanwhile (the calls then fail with `EBADF`), or close it and open another under the same number, which
/// is then judged as any other. Either way nothing is set but `TCP_NODELAY`, only on a socket that was, a
/// moment before, a connection to `port`, and nothing is ever closed.
#[cfg(target_os = "linux")]
pub fn set_on_connections_to(port: u16) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else { return 0 };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<libc::c_int>().ok())
        .filter(|&fd| is_stream_to(fd, port) && set_no_delay(fd))
        .count()
}

/// Whether descriptor `fd` is a stream socket connected to `port` over IPv4 or IPv6 (anything else, a file
/// or a Unix socket, is not).
#[cfg(target_os = "linux")]
fn is_stream_to(fd: libc::c_int, port: u16) -> bool {
    let mut kind: libc::c_int = 0;
    let mut length = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `kind` and `length` are valid for writes of the sizes `length` gives; the call reads nothing
    // else and fails on a descriptor that is not an open socket.
    let got = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE, (&raw mut kind).cast(), &mut length) };
    if got != 0 || kind != libc::SOCK_STREAM {
        return false;
    }
    // SAFETY: `sockaddr_storage` is a C struct of integers, for which all zeroes is a valid value.
    let mut peer: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut length = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `peer` is valid for writes of `length` bytes, the most any address takes.
    if unsafe { libc::getpeername(fd, (&raw mut peer).cast(), &mut length) } != 0 {
        return false;
    }
    let peer_port = match libc::c_int::from(peer.ss_family) {
        // SAFETY: the family says which address the storage holds; `sockaddr_storage` is aligned for both.
        libc::AF_INET => unsafe { (*(&raw const peer).cast::<libc::sockaddr_in>()).sin_port },
        // SAFETY: as above.
        libc::AF_INET6 => unsafe { (*(&raw const peer).cast::<libc::sockaddr_in6>()).sin6_port },
        _ => return false,
    };
    u16::from_be(peer_port) == port
}

/// Sets `TCP_NODELAY` on `fd`; false when it could not.
#[cfg(target_os = "linux")]
fn set_no_delay(fd: libc::c_int) -> bool {
    let on: libc::c_int = 1;
    let length = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `on` is valid for reads of `length` bytes; the call reads nothing else.
    unsafe { libc::setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, (&raw const on).cast(), length) == 0 }
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
