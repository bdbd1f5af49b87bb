//! The example upstream: a small HTTP/1.1 server answering 200 "ok" to
//! everything, on threads of the test process.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::test_server::TestServer;

/// A running backend; stops accepting when dropped.
pub struct Backend(TestServer);

impl std::ops::Deref for Backend {
    type Target = TestServer;
    fn deref(&self) -> &TestServer {
        &self.0
    }
}

impl Backend {
    /// Starts listening on a free loopback port.
    pub fn start() -> Backend {
        Backend(TestServer::start(serve))
    }
}

/// Reads one HTTP/1.1 request (head and content-length body) from a
/// keep-alive connection; `None` when the connection ends. Header values
/// are bytes: a value that is not UTF-8 is passed on by Envoy as is.
pub fn read_request(reader: &mut impl BufRead) -> Option<()> {
    read_request_target(reader).map(|_| ())
}

/// The same, returning the request target (the path and query of the
/// request line).
pub fn read_request_target(reader: &mut impl BufRead) -> Option<String> {
    let mut length = 0usize;
    let mut line = Vec::new();
    let mut target = None;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).ok()? == 0 {
            return None;
        }
        if line == b"\r\n" {
            break;
        }
        if target.is_none() {
            let text = String::from_utf8_lossy(&line);
            target = Some(text.split_whitespace().nth(1).unwrap_or_default().to_string());
            continue;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix(b"content-length:") {
            length = String::from_utf8_lossy(v).trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    target
}

fn serve(conn: TcpStream, served: &AtomicU64) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut writer = conn;
    while read_request(&mut reader).is_some() {
        served.fetch_add(1, Ordering::Relaxed);
        if writer.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 3\r\n\r\nok\n").is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_is_the_request_lines_second_word() {
        let mut wire: &[u8] =
            b"GET /v1/hold?x=1 HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\n\r\nhiGET / HTTP/1.1\r\n\r\n";
        assert_eq!(read_request_target(&mut wire).as_deref(), Some("/v1/hold?x=1"));
        assert_eq!(read_request_target(&mut wire).as_deref(), Some("/"));
        assert_eq!(read_request_target(&mut wire), None);
    }
}
