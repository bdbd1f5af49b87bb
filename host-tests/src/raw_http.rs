//! HTTP/1.1 requests written byte by byte: header values that are not
//! UTF-8, several field lines of one name, a lower-case method — what a
//! client library refuses to send and an attacker sends anyway.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::http::Answer;

/// A request: method, target and header lines, all raw bytes.
#[derive(Clone, Debug, Default)]
pub struct RawRequest {
    /// The method as sent (e.g. `post`).
    pub method: Vec<u8>,
    /// The request target (path and query).
    pub target: Vec<u8>,
    /// Header lines `name: value`, in order (a `host` line is added when none is given).
    pub lines: Vec<Vec<u8>>,
}

impl RawRequest {
    /// `method target` with no header lines yet.
    pub fn new(method: &str, target: &[u8]) -> RawRequest {
        RawRequest { method: method.as_bytes().to_vec(), target: target.to_vec(), lines: Vec::new() }
    }

    /// Adds a header line `name: value` (value as raw bytes).
    pub fn header(mut self, name: &str, value: &[u8]) -> RawRequest {
        let mut line = format!("{name}: ").into_bytes();
        line.extend_from_slice(value);
        self.lines.push(line);
        self
    }

    /// The bytes on the wire.
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = self.method.clone();
        out.push(b' ');
        out.extend_from_slice(&self.target);
        out.extend_from_slice(b" HTTP/1.1\r\n");
        if !self.lines.iter().any(|l| l.len() > 5 && l[..5].eq_ignore_ascii_case(b"host:")) {
            out.extend_from_slice(b"host: localhost\r\n");
        }
        for l in &self.lines {
            out.extend_from_slice(l);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"content-length: 0\r\nconnection: close\r\n\r\n");
        out
    }

    /// Its bytes with `body` after a `content-length`.
    pub fn bytes_with(&self, body: &[u8]) -> Vec<u8> {
        let mut head = self.bytes();
        head.truncate(head.len() - b"content-length: 0\r\nconnection: close\r\n\r\n".len());
        head.extend_from_slice(format!("content-length: {}\r\nconnection: close\r\n\r\n", body.len()).as_bytes());
        head.extend_from_slice(body);
        head
    }

    /// Sends it to 127.0.0.1:`port` on a fresh connection and reads the
    /// answer (its head, then a `content-length` body); `None` when the
    /// connection ended without a response.
    pub fn send(&self, port: u16) -> Option<Answer> {
        let mut conn = TcpStream::connect(("127.0.0.1", port)).ok()?;
        conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        conn.write_all(&self.bytes()).ok()?;
        read_answer(conn)
    }

    /// Sends it with `body` on a fresh connection: with a `content-length`
    /// in one write (`chunks` 0), or chunked in pieces of `chunks` bytes,
    /// each written on its own after a short pause (so the proxy reads
    /// them apart); the answer, as `send`.
    pub fn send_body(&self, port: u16, body: &[u8], chunks: usize) -> Option<Answer> {
        let mut conn = TcpStream::connect(("127.0.0.1", port)).ok()?;
        conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        conn.set_nodelay(true).ok()?;
        if chunks == 0 {
            conn.write_all(&self.bytes_with(body)).ok()?;
            return read_answer(conn);
        }
        let mut head = self.bytes();
        head.truncate(head.len() - b"content-length: 0\r\nconnection: close\r\n\r\n".len());
        head.extend_from_slice(b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n");
        conn.write_all(&head).ok()?;
        for piece in body.chunks(chunks) {
            std::thread::sleep(Duration::from_millis(5));
            conn.write_all(format!("{:x}\r\n", piece.len()).as_bytes()).ok()?;
            conn.write_all(piece).ok()?;
            conn.write_all(b"\r\n").ok()?;
        }
        conn.write_all(b"0\r\n\r\n").ok()?;
        read_answer(conn)
    }
}

/// Reads an answer (its head, then a `content-length` body) from `conn`;
/// `None` when the connection ended without one.
fn read_answer(conn: TcpStream) -> Option<Answer> {
    let mut reader = BufReader::new(conn);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).ok()?;
    let status = status_line.split(' ').nth(1)?.parse().ok()?;
    let mut headers = Vec::new();
    loop {
        let mut line = Vec::new();
        reader.read_until(b'\n', &mut line).ok()?;
        let line = String::from_utf8_lossy(&line).trim_end().to_string();
        if line.is_empty() {
            break;
        }
        if let Some((n, v)) = line.split_once(':') {
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let length: usize =
        headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Answer { status, headers, body: String::from_utf8_lossy(&body).into_owned() })
}

/// Sends `method target` over HTTP/2 without TLS (h2c, prior knowledge)
/// with `curl`, header values as raw bytes; the status, `None` when there
/// was no response. HTTP/2 carries a method as written (`post`), where
/// Envoy's HTTP/1.1 codec refuses it.
pub fn h2c_status(port: u16, method: &str, target: &str, headers: &[(&str, &[u8])]) -> Option<u16> {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--http2-prior-knowledge", "--max-time", "10"]);
    cmd.args(["-X", method]);
    for (name, value) in headers {
        let mut h = format!("{name}: ").into_bytes();
        h.extend_from_slice(value);
        cmd.arg("-H").arg(OsString::from_vec(h));
    }
    cmd.arg(format!("http://127.0.0.1:{port}{target}"));
    let out = cmd.output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok().filter(|s| *s != 0)
}
