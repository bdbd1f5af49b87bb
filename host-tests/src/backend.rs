//! The example upstream: a small HTTP/1.1 server answering 200 "ok" to
//! everything, on threads of the test process.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A running backend; stops accepting when dropped.
pub struct Backend {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Requests served.
    pub served: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Backend {
    /// Starts listening on a free loopback port.
    pub fn start() -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (served.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::Relaxed) {
                    break;
                }
                if let Ok(conn) = conn {
                    let s = s.clone();
                    std::thread::spawn(move || serve(conn, &s));
                }
            }
        });
        Backend { port, served, stop }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // wake the accept loop
    }
}

/// Reads one HTTP/1.1 request (head and content-length body) from a
/// keep-alive connection; `None` when the connection ends. Header values
/// are bytes: a value that is not UTF-8 is passed on by Envoy as is.
pub fn read_request(reader: &mut impl BufRead) -> Option<()> {
    let mut length = 0usize;
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
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()
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
