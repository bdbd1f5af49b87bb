//! An upstream that keeps every request body it receives (sent with a
//! `content-length` or chunked), to check what reached it byte for byte;
//! it answers 200 "ok".

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::test_server::TestServer;

/// A running upstream; stops accepting when dropped.
pub struct BodyUpstream {
    /// The server (its port).
    pub server: TestServer,
    bodies: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl BodyUpstream {
    /// Starts listening on a free loopback port.
    pub fn start() -> BodyUpstream {
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let kept = bodies.clone();
        let server = TestServer::start(move |conn, served| serve(conn, served, &kept));
        BodyUpstream { server, bodies }
    }

    /// The bodies received so far, in order.
    pub fn bodies(&self) -> Vec<Vec<u8>> {
        self.bodies.lock().unwrap().clone()
    }
}

fn serve(conn: TcpStream, served: &AtomicU64, bodies: &Mutex<Vec<Vec<u8>>>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut writer = conn;
    while let Some(body) = read_body(&mut reader) {
        bodies.lock().unwrap().push(body);
        served.fetch_add(1, Ordering::Relaxed);
        if writer.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 3\r\n\r\nok\n").is_err() {
            return;
        }
    }
}

/// One request's body (its head skipped); `None` when the connection ends.
fn read_body(reader: &mut impl BufRead) -> Option<Vec<u8>> {
    let (mut length, mut chunked) = (0usize, false);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).ok()? == 0 {
            return None;
        }
        if line == b"\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix(b"content-length:") {
            length = String::from_utf8_lossy(v).trim().parse().unwrap_or(0);
        }
        if lower.starts_with(b"transfer-encoding:") && lower.ends_with(b"chunked\r\n") {
            chunked = true;
        }
    }
    if !chunked {
        let mut body = vec![0; length];
        reader.read_exact(&mut body).ok()?;
        return Some(body);
    }
    read_chunked(reader)
}

/// A chunked body (after its head), the chunks joined; `None` when the
/// connection ends first.
pub fn read_chunked(reader: &mut impl BufRead) -> Option<Vec<u8>> {
    let (mut body, mut line) = (Vec::new(), Vec::new());
    loop {
        line.clear();
        reader.read_until(b'\n', &mut line).ok()?;
        let size = usize::from_str_radix(String::from_utf8_lossy(&line).trim(), 16).ok()?;
        let mut chunk = vec![0; size + 2];
        reader.read_exact(&mut chunk).ok()?;
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(&chunk[..size]);
    }
}
