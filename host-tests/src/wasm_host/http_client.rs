//! A minimal HTTP/1.1 client over `std::net`, enough to carry the module's
//! `proxy_http_call` to a real webdis: one request per connection
//! (`Connection: close`), Content-Length or chunked bodies. A refused
//! connection is Envoy's 503; a reply that does not come within the bound
//! fails the test (a hung server is a broken setup, not a fault to model).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::calls::Reply;
use super::header_map::HeaderMap;

/// How long a real server may take before the test gives up on it.
const IO_BOUND: Duration = Duration::from_secs(10);

/// Envoy's local reply when the upstream connection fails.
pub fn connect_failure() -> Reply {
    local_reply(503, "upstream connect error or disconnect/reset before headers. reset reason: connection failure")
}

/// Envoy's local reply when the call's timeout fires.
pub fn timeout() -> Reply {
    local_reply(504, "upstream request timeout")
}

fn local_reply(status: u32, body: &str) -> Reply {
    let headers = HeaderMap::from_text(&[
        (":status", &status.to_string()),
        ("content-length", &body.len().to_string()),
        ("content-type", "text/plain"),
    ]);
    Reply::Http { headers, body: body.as_bytes().to_vec() }
}

/// Sends the request the module described to 127.0.0.1:`port`. The
/// connection is kept alive from the server's view (webdis 0.1.9 never
/// answers a PUT with a body under `Connection: close`), so the response is
/// read by its framing and the connection dropped after it.
pub fn send(port: u16, headers: &HeaderMap, body: &[u8]) -> Reply {
    // Printed with a failing test's output: why the module saw a failed call.
    let mut stream = match TcpStream::connect(("127.0.0.1", port)) {
        Ok(stream) => stream,
        Err(e) => {
            eprintln!("http call to port {port}: connecting failed: {e}");
            return connect_failure();
        }
    };
    stream.set_read_timeout(Some(IO_BOUND)).unwrap();
    stream.set_write_timeout(Some(IO_BOUND)).unwrap();
    let get = |name: &str| headers.first(name).unwrap_or_default();
    let mut head = Vec::with_capacity(256);
    for part in [get(":method"), b" ", get(":path"), b" HTTP/1.1\r\nhost: ", get(":authority"), b"\r\n"] {
        head.extend_from_slice(part);
    }
    for (name, value) in headers.lines().iter().filter(|(n, _)| !n.starts_with(b":") && n != b"content-length") {
        for part in [name.as_slice(), b": ", value, b"\r\n"] {
            head.extend_from_slice(part);
        }
    }
    head.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
    if let Err(e) = stream.write_all(&head).and_then(|()| stream.write_all(body)) {
        eprintln!("http call to port {port}: writing the request failed: {e}");
        return connect_failure();
    }
    let mut raw = Vec::new();
    loop {
        if let Some(reply) = parse_response(&raw) {
            return reply;
        }
        let mut chunk = [0u8; 16 * 1024];
        match stream.read(&mut chunk) {
            Ok(0) => return parse_response_at_close(&raw),
            Ok(n) => raw.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                panic!("the server at 127.0.0.1:{port} did not answer within {IO_BOUND:?}")
            }
            // A signal is no reason to give up on the response (as the Redis link).
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                eprintln!("http call to port {port}: reading the response failed: {e}");
                return Reply::HttpReset;
            }
        }
    }
}

/// A response whose connection closed: complete if its body runs to the
/// close, else the stream was reset.
fn parse_response_at_close(raw: &[u8]) -> Reply {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else { return Reply::HttpReset };
    let mut with_length = raw[..end].to_vec();
    with_length.extend_from_slice(format!("\r\ncontent-length: {}\r\n\r\n", raw.len() - end - 4).as_bytes());
    with_length.extend_from_slice(&raw[end + 4..]);
    parse_response(&with_length).unwrap_or(Reply::HttpReset)
}

/// Parses an HTTP/1.1 response framed by Content-Length or chunked
/// encoding; `None` until all of it is there.
pub fn parse_response(raw: &[u8]) -> Option<Reply> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status: u32 = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let mut headers = HeaderMap::new();
    headers.push(":status", status.to_string());
    for line in lines {
        let (name, value) = line.split_once(':')?;
        headers.push(name.trim().to_ascii_lowercase(), value.trim());
    }
    let rest = &raw[end + 4..];
    let header = |name: &str| headers.first(name).map(|v| String::from_utf8_lossy(v).into_owned());
    let body = if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        dechunk(rest)?
    } else {
        let len = header("content-length").and_then(|v| v.parse::<usize>().ok())?;
        rest.get(..len)?.to_vec()
    };
    Some(Reply::Http { headers, body })
}

fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_length_and_chunked_bodies_once_complete() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: b\r\n\r\nhiXX").unwrap();
        let Reply::Http { headers, body } = r else { panic!() };
        assert_eq!(headers.lines()[0], (b":status".to_vec(), b"200".to_vec()));
        assert_eq!(headers.lines()[2], (b"x-a".to_vec(), b"b".to_vec()));
        assert_eq!(body, b"hi");
        let r = parse_response(b"HTTP/1.1 404 NF\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n1\r\nd\r\n0\r\n\r\n");
        let Some(Reply::Http { body, .. }) = r else { panic!() };
        assert_eq!(body, b"abcd");
        assert_eq!(parse_response(b"HTTP/1.1 200"), None);
        assert_eq!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nhi"), None);
        let Reply::Http { body, .. } = parse_response_at_close(b"HTTP/1.1 200 OK\r\n\r\nto the end") else { panic!() };
        assert_eq!(body, b"to the end");
    }
}
