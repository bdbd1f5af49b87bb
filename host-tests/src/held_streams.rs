//! Streams held open until the test ends them, for concurrency limits.
//!
//! The upstream answers every request with a Server-Sent Events stream
//! (one event at once, chunked) and keeps it open until the test completes
//! it (`complete`: `[DONE]` and the last chunk), cuts it (`cut`: the
//! upstream closes the connection mid-stream), or the proxy goes away
//! (the client hung up, the proxy died). A request whose path contains
//! `short` gets a complete stream at once. It counts, per client (the
//! `x-user` header), the streams open now and the most ever open at once;
//! each held stream is named by the request's `x-stream` header.
//!
//! The client side (`open`) sends one request on its own connection and
//! reads the response head: a 200 stream stays open in an `OpenStream`,
//! anything else is read whole.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::http::Answer;
use crate::test_server::TestServer;

/// One stream the upstream holds.
struct Held {
    user: String,
    tag: String,
    conn: TcpStream,
}

#[derive(Default)]
struct Counts {
    held: Vec<Held>,
    max: BTreeMap<String, usize>,
}

impl Counts {
    fn open(&self, user: &str) -> usize {
        self.held.iter().filter(|h| h.user == user).count()
    }

    fn take(&mut self, tag: &str) -> Option<Held> {
        let i = self.held.iter().position(|h| h.tag == tag)?;
        Some(self.held.swap_remove(i))
    }
}

/// The running upstream; stops accepting when dropped.
pub struct HeldStreams {
    server: TestServer,
    counts: Arc<Mutex<Counts>>,
}

impl HeldStreams {
    /// Starts listening on a free loopback port.
    pub fn start() -> HeldStreams {
        let counts = Arc::new(Mutex::new(Counts::default()));
        let c = counts.clone();
        let server = TestServer::start(move |conn, served| serve(conn, served, &c));
        HeldStreams { server, counts }
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.server.port
    }

    /// Requests it received.
    pub fn served(&self) -> u64 {
        self.server.served.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Streams of `user` open now.
    pub fn open(&self, user: &str) -> usize {
        self.lock().open(user)
    }

    /// The most streams of `user` ever open at once.
    pub fn max_open(&self, user: &str) -> usize {
        self.lock().max.get(user).copied().unwrap_or(0)
    }

    /// Ends stream `tag` normally (`[DONE]`, then the last chunk); false if
    /// it is not open.
    pub fn complete(&self, tag: &str) -> bool {
        let Some(mut held) = self.lock().take(tag) else { return false };
        chunk(&mut held.conn, "data: [DONE]\n\n") && held.conn.write_all(b"0\r\n\r\n").is_ok()
    }

    /// Closes stream `tag`'s connection mid-stream; false if it is not open.
    pub fn cut(&self, tag: &str) -> bool {
        let Some(held) = self.lock().take(tag) else { return false };
        held.conn.shutdown(Shutdown::Both).is_ok()
    }

    /// Waits until `user` has `n` streams open; false after `timeout`.
    pub fn wait_open(&self, user: &str, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.open(user) != n {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }
}

/// One chunk of the chunked encoding.
fn chunk(w: &mut TcpStream, data: &str) -> bool {
    w.write_all(format!("{:x}\r\n{data}\r\n", data.len()).as_bytes()).is_ok()
}

/// A request's target, `x-user` and `x-stream` (empty when absent).
struct Head {
    target: String,
    user: String,
    tag: String,
}

/// Reads one request (head, and a content-length body); `None` when the
/// connection ends.
fn read_head(reader: &mut impl BufRead) -> Option<Head> {
    let mut head = Head { target: String::new(), user: String::new(), tag: String::new() };
    let mut length = 0usize;
    let mut first = true;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        if std::mem::take(&mut first) {
            head.target = line.split_whitespace().nth(1).unwrap_or_default().to_string();
            continue;
        }
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim().to_string();
        match name.trim().to_ascii_lowercase().as_str() {
            "x-user" => head.user = value,
            "x-stream" => head.tag = value,
            "content-length" => length = value.parse().unwrap_or(0),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(head)
}

const EVENT: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"tok\"}}]}\n\n";

fn serve(conn: TcpStream, served: &AtomicU64, counts: &Mutex<Counts>) {
    let _ = conn.set_nodelay(true);
    let Ok(read_half) = conn.try_clone() else { return };
    let mut reader = BufReader::new(read_half);
    let mut w = conn;
    while let Some(head) = read_head(&mut reader) {
        served.fetch_add(1, Ordering::Relaxed);
        let start = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
                     transfer-encoding: chunked\r\n\r\n";
        let held = !head.target.contains("short");
        // Open before its client can see its first byte: a test that reads
        // the 200 then counts open streams must count it.
        if held {
            let Ok(conn) = w.try_clone() else { return };
            let mut c = counts.lock().unwrap_or_else(|e| e.into_inner());
            c.held.push(Held { user: head.user.clone(), tag: head.tag.clone(), conn });
            let open = c.open(&head.user);
            let max = c.max.entry(head.user.clone()).or_default();
            *max = (*max).max(open);
        }
        if w.write_all(start.as_bytes()).is_err() || !chunk(&mut w, EVENT) {
            counts.lock().unwrap_or_else(|e| e.into_inner()).take(&head.tag);
            return;
        }
        if !held {
            if !(chunk(&mut w, "data: [DONE]\n\n") && w.write_all(b"0\r\n\r\n").is_ok()) {
                return;
            }
            continue;
        }
        // Blocks until the proxy closes the connection, or (the stream
        // completed by the test) sends the next request on it.
        let gone = !matches!(reader.fill_buf(), Ok(b) if !b.is_empty());
        counts.lock().unwrap_or_else(|e| e.into_inner()).take(&head.tag);
        if gone {
            return;
        }
    }
}

/// What a request got.
pub enum Opened {
    /// A 200 stream, still open.
    Streaming(OpenStream),
    /// Any other answer, read whole.
    Answered(Answer),
}

impl Opened {
    /// The open stream; panics with the answer otherwise.
    pub fn stream(self) -> OpenStream {
        match self {
            Opened::Streaming(s) => s,
            Opened::Answered(a) => panic!("expected a stream, got {a:?}"),
        }
    }

    /// The answer; panics if it is a stream.
    pub fn answer(self) -> Answer {
        match self {
            Opened::Answered(a) => a,
            Opened::Streaming(s) => panic!("expected a refusal, got stream {} admitted", s.tag),
        }
    }
}

/// A stream the client holds open.
pub struct OpenStream {
    /// Its `x-stream` tag.
    pub tag: String,
    reader: BufReader<TcpStream>,
}

impl OpenStream {
    /// Reads the rest of the stream until the proxy closes the connection.
    pub fn read_rest(mut self) -> String {
        let mut rest = Vec::new();
        let _ = self.reader.read_to_end(&mut rest);
        String::from_utf8_lossy(&rest).into_owned()
    }

    /// Hangs up mid-stream.
    pub fn hang_up(self) {
        let _ = self.reader.get_ref().shutdown(Shutdown::Both);
    }
}

/// `GET path` through 127.0.0.1:`port` as `user`, stream `tag`, with
/// these extra headers, on a connection of its own (closed after the
/// response).
pub fn open(port: u16, path: &str, user: &str, tag: &str, extra: &[(&str, &str)]) -> Opened {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nx-user: {user}\r\nx-stream: {tag}\r\n");
    for (n, v) in extra {
        request.push_str(&format!("{n}: {v}\r\n"));
    }
    request.push_str("connection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).unwrap();
    let mut reader = BufReader::new(conn);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).unwrap();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {status_line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((n, v)) = line.split_once(':') {
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    if status == 200 {
        return Opened::Streaming(OpenStream { tag: tag.to_string(), reader });
    }
    let mut body = String::new();
    reader.read_to_string(&mut body).unwrap();
    Opened::Answered(Answer { status, headers, body })
}
