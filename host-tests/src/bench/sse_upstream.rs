//! The token-stream bench's upstream: an OpenAI-style streaming chat
//! completion on every path, and on `/v1/hold` a stream that never ends, to
//! count what an open stream costs the proxy.

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::backend::read_request_target;
use crate::test_server::TestServer;

/// `data:` events of a completion, the usage in the last.
pub const EVENTS: usize = 100;
/// Time between two events (a model emitting tokens).
pub const GAP: Duration = Duration::from_micros(200);
/// The usage the last event reports (`usage.total_tokens`).
pub const TOTAL_TOKENS: u64 = 109;
/// Events `/v1/hold` sends before it waits for the client to go.
pub const HOLD_EVENTS: usize = 10;
/// The path of the streams that stay open.
pub const HOLD_PATH: &str = "/v1/hold";

/// A running upstream; stops accepting when dropped.
pub struct SseUpstream(TestServer);

impl std::ops::Deref for SseUpstream {
    type Target = TestServer;
    fn deref(&self) -> &TestServer {
        &self.0
    }
}

impl SseUpstream {
    /// Starts listening on a free loopback port.
    pub fn start() -> SseUpstream {
        SseUpstream(TestServer::start(serve))
    }
}

/// Event `i` of `n`, as OpenAI streams with `include_usage` (null before the last).
pub fn event(i: usize, n: usize) -> String {
    let usage = if i + 1 == n {
        format!(r#"{{"prompt_tokens":9,"completion_tokens":{},"total_tokens":{TOTAL_TOKENS}}}"#, TOTAL_TOKENS - 9)
    } else {
        "null".into()
    };
    format!(
        "data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"tok\"}}}}],\"usage\":{usage}}}\n\n"
    )
}

/// One chunk of the chunked encoding.
fn chunk(w: &mut TcpStream, data: &str) -> bool {
    w.write_all(format!("{:x}\r\n{data}\r\n", data.len()).as_bytes()).is_ok()
}

fn serve(conn: TcpStream, served: &AtomicU64) {
    let _ = conn.set_nodelay(true);
    let Ok(read_half) = conn.try_clone() else { return };
    let mut reader = BufReader::new(read_half);
    let mut w = conn;
    while let Some(target) = read_request_target(&mut reader) {
        served.fetch_add(1, Ordering::Relaxed);
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
                    transfer-encoding: chunked\r\n\r\n";
        if w.write_all(head.as_bytes()).is_err() {
            return;
        }
        if target == HOLD_PATH {
            for i in 0..HOLD_EVENTS {
                if !chunk(&mut w, &event(i, usize::MAX)) {
                    return;
                }
            }
            // Held until the client goes: the proxy then closes this side.
            let _ = read_request_target(&mut reader);
            return;
        }
        for i in 0..EVENTS {
            std::thread::sleep(GAP);
            if !chunk(&mut w, &event(i, EVENTS)) {
                return;
            }
        }
        if !(chunk(&mut w, "data: [DONE]\n\n") && w.write_all(b"0\r\n\r\n").is_ok()) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_last_event_reports_the_usage() {
        assert!(event(0, EVENTS).contains(r#""usage":null"#));
        let last: serde_json::Value =
            serde_json::from_str(event(EVENTS - 1, EVENTS).trim().strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(last["usage"]["total_tokens"], TOTAL_TOKENS);
    }
}
