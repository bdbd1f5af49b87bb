//! An upstream that speaks like an LLM API (OpenAI's JSON and Server-Sent
//! Events formats), told by request headers what to answer, so the tests
//! know exactly what usage each response reports:
//!
//! - `x-usage: <n>` the usage to report (`usage.total_tokens`), or
//!   `missing` (no usage object) or `garbled` (a body that is not JSON);
//! - `x-prompt: <n>` report `usage.prompt_tokens` n (else 1), and
//!   `x-cached: <n>` `usage.prompt_tokens_details.cached_tokens` n (else
//!   none); `usage.completion_tokens` and `usage.total_tokens` are x-usage;
//! - `x-usage-header: <n>` also send `x-usage-tokens: <n>`;
//! - `x-stream: <events>` answer `text/event-stream` with that many
//!   `data:` events (chunked), the usage in the last one, then `[DONE]`;
//! - `x-pad-bytes: <n>` each event (or the JSON body) carries `n` bytes of
//!   content;
//! - `x-delay-ms: <n>` wait before answering;
//! - `x-reset-after: <events>` close the connection after that many events;
//! - `x-reset-at-end: 1` close the connection after the last event (the one
//!   with the usage), before `[DONE]`;
//! - `x-hold-ms: <n>` wait that long after the last event before `[DONE]`;
//! - `x-gap-ms: <n>` (a stream as the API sends it) wait that long after
//!   each event;
//! - `x-reset-after-bytes: <n>` a JSON body: announce it whole, send its
//!   first `n` bytes, close the connection;
//! - `x-compress: gzip | br` compress the JSON body whatever the client
//!   accepts (`br` is only labelled so: the filter cannot read it either
//!   way); without it, the JSON body is gzip-compressed when the request's
//!   `accept-encoding` names gzip, as most servers do.
//!
//! A request whose JSON body says `"stream": true` is answered as the API
//! itself streams (`x-stream` events, 5 without it): chat completions
//! (`/v1/chat/completions`) report their usage only when the body asks
//! (`stream_options.include_usage`), in an extra last event whose
//! `choices` is empty, with `"usage":null` in every other; the Responses
//! API (`/v1/responses`) always reports it, as `response.usage` in
//! `response.completed`. Its JSON answers have its shape too.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use flate2::write::GzEncoder;
use flate2::Compression;

use crate::test_server::TestServer;

/// A running upstream; stops accepting when dropped.
pub struct LlmUpstream(TestServer);

impl std::ops::Deref for LlmUpstream {
    type Target = TestServer;
    fn deref(&self) -> &TestServer {
        &self.0
    }
}

impl LlmUpstream {
    /// Starts listening on a free loopback port.
    pub fn start() -> LlmUpstream {
        LlmUpstream(TestServer::start(serve))
    }
}

/// What a request asked for.
#[derive(Default)]
struct Ask {
    usage: Option<String>,
    prompt: Option<u64>,
    cached: Option<u64>,
    usage_header: Option<String>,
    events: Option<usize>,
    pad: usize,
    delay_ms: u64,
    reset_after: Option<usize>,
    reset_at_end: bool,
    hold_ms: u64,
    reset_after_bytes: Option<usize>,
    compress: Option<String>,
    accepts_gzip: bool,
    /// Between events of a stream as the API sends it.
    gap_ms: u64,
    /// The request's path.
    path: String,
    /// The body says `"stream": true`: answered as the API streams.
    api_stream: bool,
    /// The body asks for the usage of its stream.
    include_usage: bool,
}

/// Reads one request's head and body; `None` when the connection ends.
fn read_ask(reader: &mut impl BufRead) -> Option<Ask> {
    let mut ask = Ask::default();
    let (mut length, mut chunked) = (0usize, false);
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    ask.path = line.split_whitespace().nth(1).unwrap_or_default().to_string();
    loop {
        line.clear();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        let Some((name, value)) = line.split_once(':') else { continue };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim().to_string());
        match name.as_str() {
            "content-length" => length = value.parse().unwrap_or(0),
            // An HTTP/2 client's body without a length reaches us chunked.
            "transfer-encoding" if value.eq_ignore_ascii_case("chunked") => chunked = true,
            "x-usage" => ask.usage = Some(value),
            "x-prompt" => ask.prompt = value.parse().ok(),
            "x-cached" => ask.cached = value.parse().ok(),
            "x-usage-header" => ask.usage_header = Some(value),
            "x-stream" => ask.events = value.parse().ok(),
            "x-pad-bytes" => ask.pad = value.parse().unwrap_or(0),
            "x-delay-ms" => ask.delay_ms = value.parse().unwrap_or(0),
            "x-reset-after" => ask.reset_after = value.parse().ok(),
            "x-reset-at-end" => ask.reset_at_end = value == "1",
            "x-hold-ms" => ask.hold_ms = value.parse().unwrap_or(0),
            "x-gap-ms" => ask.gap_ms = value.parse().unwrap_or(0),
            "x-reset-after-bytes" => ask.reset_after_bytes = value.parse().ok(),
            "x-compress" => ask.compress = Some(value),
            "accept-encoding" => ask.accepts_gzip |= value.split(',').any(|c| c.trim().starts_with("gzip")),
            _ => {}
        }
    }
    let body = if chunked {
        crate::body_upstream::read_chunked(reader)?
    } else {
        let mut body = vec![0; length];
        reader.read_exact(&mut body).ok()?;
        body
    };
    if let Ok(json) = serde_json::from_slice::<serde_json::Value>(&body) {
        ask.api_stream = json["stream"] == serde_json::Value::Bool(true);
        ask.include_usage = json["stream_options"]["include_usage"] == serde_json::Value::Bool(true);
    }
    Some(ask)
}

fn usage_json(ask: &Ask) -> String {
    let prompt = ask.prompt.unwrap_or(1);
    let cached = ask.cached.map(|c| format!(r#","prompt_tokens_details":{{"cached_tokens":{c}}}"#)).unwrap_or_default();
    match ask.usage.as_deref() {
        None | Some("missing") => String::new(),
        Some(n) => {
            format!(r#","usage":{{"prompt_tokens":{prompt},"completion_tokens":{n},"total_tokens":{n}{cached}}}"#)
        }
    }
}

fn serve(conn: TcpStream, served: &AtomicU64) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut w = conn;
    while let Some(ask) = read_ask(&mut reader) {
        served.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(ask.delay_ms));
        let extra = ask.usage_header.as_ref().map(|n| format!("x-usage-tokens: {n}\r\n")).unwrap_or_default();
        let pad = "x".repeat(ask.pad);
        let responses = ask.path.ends_with("/responses");
        let ok = match ask.events {
            _ if ask.api_stream => api_stream(&mut w, &ask, ask.events.unwrap_or(5), &extra, &pad, responses),
            None if responses => json(&mut w, &ask, &extra, response_object(&ask, &pad, "completed").into_bytes()),
            None => {
                let body = if ask.usage.as_deref() == Some("garbled") {
                    format!(r#"{{"id":"c1","choices":[{{"message":{{"content":"{pad}"#)
                } else {
                    format!(
                        r#"{{"id":"c1","object":"chat.completion","choices":[{{"index":0,"message":{{"role":"assistant","content":"{pad}"}}}}]{}}}"#,
                        usage_json(&ask)
                    )
                };
                json(&mut w, &ask, &extra, body.into_bytes())
            }
            Some(events) => stream(&mut w, &ask, events, &extra, &pad),
        };
        if !ok {
            return;
        }
    }
}

/// A JSON answer, compressed as asked, cut short if asked.
fn json(w: &mut TcpStream, ask: &Ask, extra: &str, body: Vec<u8>) -> bool {
    let coding = match ask.compress.as_deref() {
        Some(c) => Some(c),
        None if ask.accepts_gzip => Some("gzip"),
        None => None,
    };
    let body = match coding {
        Some(_) => {
            let mut e = GzEncoder::new(Vec::new(), Compression::default());
            e.write_all(&body).unwrap();
            e.finish().unwrap()
        }
        None => body,
    };
    let encoding = coding.map(|c| format!("content-encoding: {c}\r\n")).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{encoding}{extra}content-length: {}\r\n\r\n",
        body.len()
    );
    if w.write_all(head.as_bytes()).is_err() {
        return false;
    }
    match ask.reset_after_bytes {
        Some(n) => {
            let _ = w.write_all(&body[..n.min(body.len())]);
            let _ = w.flush();
            std::thread::sleep(Duration::from_millis(200));
            let _ = w.shutdown(std::net::Shutdown::Both);
            false
        }
        None => w.write_all(&body).is_ok(),
    }
}

fn chunk(w: &mut TcpStream, data: &str) -> bool {
    w.write_all(format!("{:x}\r\n{data}\r\n", data.len()).as_bytes()).is_ok()
}

/// An SSE answer: `events` content deltas, the last with the usage (OpenAI
/// `stream_options.include_usage`: `"usage":null` before), then `[DONE]`.
fn stream(w: &mut TcpStream, ask: &Ask, events: usize, extra: &str, pad: &str) -> bool {
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n{extra}transfer-encoding: chunked\r\n\r\n"
    );
    if w.write_all(head.as_bytes()).is_err() {
        return false;
    }
    for i in 0..events {
        if ask.reset_after == Some(i) {
            let _ = w.shutdown(std::net::Shutdown::Both);
            return false;
        }
        let usage = if i + 1 == events { usage_json(ask) } else { r#","usage":null"#.to_string() };
        let data = format!(
            "data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{pad}\"}}}}]{usage}}}\n\n"
        );
        if !chunk(w, &data) {
            return false;
        }
    }
    std::thread::sleep(Duration::from_millis(ask.hold_ms));
    if ask.reset_at_end {
        let _ = w.shutdown(std::net::Shutdown::Both);
        return false;
    }
    chunk(w, "data: [DONE]\n\n") && w.write_all(b"0\r\n\r\n").is_ok()
}

/// The Responses API's response object with `status` (its usage once completed).
fn response_object(ask: &Ask, pad: &str, status: &str) -> String {
    let (output, usage) = if status == "completed" {
        let total = ask.usage.as_deref().and_then(|u| u.parse::<u64>().ok()).unwrap_or(0);
        let prompt = ask.prompt.unwrap_or(1);
        (
            format!(
                r#"[{{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{{"type":"output_text","text":"{pad}","annotations":[]}}]}}]"#
            ),
            format!(
                r#"{{"input_tokens":{prompt},"input_tokens_details":{{"cached_tokens":0}},"output_tokens":{},"output_tokens_details":{{"reasoning_tokens":0}},"total_tokens":{total}}}"#,
                total.saturating_sub(prompt)
            ),
        )
    } else {
        ("[]".to_string(), "null".to_string())
    };
    format!(
        r#"{{"id":"resp_1","object":"response","created_at":1,"status":"{status}","model":"gpt-4o","output":{output},"usage":{usage}}}"#
    )
}

/// A stream as the API sends it: chat completion chunks (the usage only
/// when asked for), or the Responses API's events.
fn api_stream(w: &mut TcpStream, ask: &Ask, events: usize, extra: &str, pad: &str, responses: bool) -> bool {
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n{extra}transfer-encoding: chunked\r\n\r\n"
    );
    if w.write_all(head.as_bytes()).is_err() {
        return false;
    }
    let usage_null = if ask.include_usage { r#","usage":null"# } else { "" };
    let mut out: Vec<String> = Vec::new();
    if responses {
        let created = response_object(ask, pad, "in_progress");
        out.push(format!("event: response.created\ndata: {{\"type\":\"response.created\",\"sequence_number\":0,\"response\":{created}}}\n\n"));
    }
    for i in 0..events {
        out.push(if responses {
            format!("event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"sequence_number\":{},\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"{pad}\"}}\n\n", i + 1)
        } else {
            let finish = if i + 1 == events { r#""stop""# } else { "null" };
            format!("data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{pad}\"}},\"finish_reason\":{finish}}}]{usage_null}}}\n\n")
        });
    }
    if responses {
        let done = response_object(ask, pad, "completed");
        out.push(format!("event: response.completed\ndata: {{\"type\":\"response.completed\",\"sequence_number\":{},\"response\":{done}}}\n\n", events + 1));
    } else {
        if ask.include_usage {
            let total = ask.usage.as_deref().and_then(|u| u.parse::<u64>().ok()).unwrap_or(0);
            let prompt = ask.prompt.unwrap_or(1);
            out.push(format!("data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{},\"total_tokens\":{total}}}}}\n\n", total.saturating_sub(prompt)));
        }
        out.push("data: [DONE]\n\n".to_string());
    }
    for (i, event) in out.iter().enumerate() {
        if ask.reset_after == Some(i) {
            let _ = w.shutdown(std::net::Shutdown::Both);
            return false;
        }
        if !chunk(w, event) || w.flush().is_err() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(ask.gap_ms));
    }
    w.write_all(b"0\r\n\r\n").is_ok()
}
