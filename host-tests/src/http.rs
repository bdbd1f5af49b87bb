//! A plain HTTP client for the tests: every status is an answer, not an error.

use std::time::Duration;

/// An agent that reports 4xx/5xx as responses.
pub fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(timeout)).build().into()
}

/// One response, reduced to what tests look at.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// Headers, lower-case names.
    pub headers: Vec<(String, String)>,
    /// Body text.
    pub body: String,
}

impl Answer {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Sends `method url` with extra headers.
pub fn send(agent: &ureq::Agent, method: &str, url: &str, headers: &[(&str, &str)]) -> Answer {
    let mut req = ureq::http::Request::builder().method(method).uri(url);
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let req = req.body(()).unwrap();
    let mut resp = agent.run(req).unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let headers = resp
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_ascii_lowercase(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let body = resp.body_mut().read_to_string().unwrap_or_default();
    Answer { status: resp.status().as_u16(), headers, body }
}

/// Sends `GET path` over a fresh TCP connection with header lines given as
/// raw bytes (`name: value`, any bytes, e.g. a value that is not UTF-8,
/// which an HTTP client library refuses to send), and reads the answer:
/// its head up to the blank line and a `content-length` body.
pub fn raw_get(port: u16, path: &str, header_lines: &[&[u8]]) -> Answer {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\n").into_bytes();
    for line in header_lines {
        request.extend_from_slice(line);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"connection: close\r\n\r\n");
    conn.write_all(&request).unwrap();
    let mut reader = BufReader::new(conn);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).unwrap();
    let status = status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        panic!("not an HTTP status line: {status_line:?}");
    });
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
    let length: usize =
        headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    Answer { status, headers, body: String::from_utf8_lossy(&body).into_owned() }
}
