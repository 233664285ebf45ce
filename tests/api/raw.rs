//! A raw HTTP/1.1 client over TCP, for what a well-behaved client library will not do: stall a request head,
//! pipeline requests, repeat a header field, connect from a chosen loopback address.

use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::helpers::{DEADLINE, TestApp};

/// The address of `app`'s public listener.
pub fn address(app: &TestApp) -> SocketAddr {
    app.address.trim_start_matches("http://").parse().expect("a plain HTTP test application")
}

/// A connection to `app` from the loopback address `source` (any of 127.0.0.0/8).
pub async fn connect_from(app: &TestApp, source: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket.connect(address(app)).await.unwrap()
}

/// A connection to `app` from 127.0.0.1.
pub async fn connect(app: &TestApp) -> TcpStream {
    TcpStream::connect(address(app)).await.unwrap()
}

/// One answer: its status, header fields (names lowercased) and body.
#[derive(Debug)]
pub struct RawAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawAnswer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text()))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Reads answers from one connection, keeping what arrived beyond the last one.
pub struct Reader {
    pub stream: TcpStream,
    buffer: Vec<u8>,
}

impl Reader {
    pub fn new(stream: TcpStream) -> Self {
        Self { stream, buffer: Vec::new() }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// The next answer (with a `Content-Length` body); panics when the connection ends first.
    pub async fn answer(&mut self) -> RawAnswer {
        let head_end = loop {
            if let Some(end) = self.buffer.windows(4).position(|window| window == b"\r\n\r\n") {
                break end + 4;
            }
            self.fill().await;
        };
        let head = String::from_utf8(self.buffer[..head_end].to_vec()).unwrap();
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
            .collect();
        let length: usize =
            headers.iter().find(|(name, _)| name == "content-length").map_or(0, |(_, value)| value.parse().unwrap());
        while self.buffer.len() < head_end + length {
            self.fill().await;
        }
        let body = self.buffer[head_end..head_end + length].to_vec();
        self.buffer.drain(..head_end + length);
        RawAnswer { status, headers, body }
    }

    async fn fill(&mut self) {
        let mut chunk = [0u8; 8192];
        let read = tokio::time::timeout(DEADLINE, self.stream.read(&mut chunk)).await.expect("an answer in time");
        match read {
            Ok(0) | Err(_) => panic!("the connection ended; received {:?}", String::from_utf8_lossy(&self.buffer)),
            Ok(n) => self.buffer.extend_from_slice(&chunk[..n]),
        }
    }

    /// What arrives until the server closes the connection (see [`until_closed`]).
    pub async fn until_closed(mut self) -> Vec<u8> {
        let mut rest = until_closed(&mut self.stream).await;
        self.buffer.append(&mut rest);
        self.buffer
    }
}

/// What arrives on `read` until the server closes the connection (a reset counts as closed); panics when it
/// is still open after [`DEADLINE`].
pub async fn until_closed(mut read: impl AsyncRead + Unpin) -> Vec<u8> {
    let mut received = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let read = tokio::time::timeout(DEADLINE, read.read(&mut chunk)).await;
        match read.expect("the server closes the connection in time") {
            Ok(0) | Err(_) => return received,
            Ok(n) => received.extend_from_slice(&chunk[..n]),
        }
    }
}

/// `GET /healthz` as raw bytes.
pub const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n";

/// A POST of `body` to `path` with extra header lines (each ending in `\r\n`).
pub fn post(path: &str, extra: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
    .into_bytes()
}
