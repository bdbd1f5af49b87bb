//! Token budgets no client can dodge, on `envoy-config/llm-gateway.yaml` as
//! shipped (60 requests a minute and 100,000 tokens an hour per bearer
//! token; default 1,000, max 200,000): not by asking for compression, not
//! by hanging up (before the answer: `max`, as the shipped rule's
//! `hang_up` says), and no credential reaches the store.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use host_tests::llm_gateway::{LlmGateway, CHAT, TEST_TIMEOUT};
use host_tests::settle::settles_at;

/// Waits until the filter has charged `want` units in all and that has
/// held for a quiet period (a response charged again later shows), then
/// checks it made `charges` charges (one per response) and none failed.
fn wait_charged(gw: &LlmGateway, want: u64, charges: u64) {
    settles_at("charged_units", want, true, || gw.stat("charged_units"));
    assert_eq!(gw.stat("charges"), charges, "one charge per response");
    assert_eq!(gw.stat("charge_errors"), 0);
}

fn auth(token: &str) -> String {
    format!("Bearer {token}")
}

#[test]
fn a_client_asking_for_gzip_pays_the_usage_in_the_answer() {
    let gw = LlmGateway::start(&[TEST_TIMEOUT]);
    let key = auth("sk-gzip-client");
    let a = gw.chat(&[
        ("authorization", &key),
        ("accept-encoding", "gzip"),
        ("x-usage", "150000"),
        ("x-pad-bytes", "2000"),
    ]);
    assert_eq!(a.status, 200);
    // Envoy's compressor, before the filter, compresses for the client.
    assert_eq!(a.header("content-encoding"), Some("gzip"));
    wait_charged(&gw, 150_000, 1);
    assert_eq!((gw.stat("usage_missing"), gw.stat("usage_unreadable")), (0, 0));
    // 150,000 of 100,000 tokens an hour: in debt.
    let next = gw.chat(&[("authorization", &key), ("x-usage", "1")]);
    assert_eq!(next.status, 429);
}

#[test]
fn an_upstream_that_always_compresses_is_read_through_its_encoding() {
    let gw = LlmGateway::start(&[TEST_TIMEOUT]);
    let a = gw.chat(&[("authorization", &auth("sk-always-gzip")), ("x-usage", "1234"), ("x-compress", "gzip")]);
    assert_eq!(a.status, 200);
    wait_charged(&gw, 1234, 1);
    assert_eq!(gw.stat("usage_unreadable"), 0);
}

#[test]
fn an_answer_in_an_encoding_the_filter_cannot_read_is_charged_max_and_logged() {
    let gw = LlmGateway::start(&[TEST_TIMEOUT]);
    let a = gw.chat(&[("authorization", &auth("sk-brotli")), ("x-usage", "10"), ("x-compress", "br")]);
    assert_eq!(a.status, 200);
    wait_charged(&gw, 200_000, 1);
    assert_eq!(gw.stat("usage_unreadable"), 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    let line = "the usage of 1 responses could not be read since the last such line (rule llm: content-encoding br cannot be decoded); they were charged 200000 units";
    while !gw.envoy.log().contains(line) {
        assert!(Instant::now() < deadline, "no log line: {}", gw.envoy.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_stream_reset_right_after_its_usage_event_is_charged_that_usage() {
    let gw = LlmGateway::start(&[TEST_TIMEOUT]);
    let key = auth("sk-reset-at-end");
    let raw = host_tests::raw_http::RawRequest::new("POST", b"/v1/chat/completions")
        .header("authorization", key.as_bytes())
        .header("x-usage", b"4321")
        .header("x-stream", b"20")
        .header("x-reset-at-end", b"1");
    // The client stays until Envoy closes the connection on the upstream's
    // reset (`RawRequest::send` would leave after the headers: a client
    // gone before the usage event pays what it was delivered instead).
    let mut conn = TcpStream::connect(("127.0.0.1", gw.envoy.port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    conn.write_all(&raw.bytes_with(CHAT.as_bytes())).unwrap();
    let _ = conn.read_to_end(&mut Vec::new());
    wait_charged(&gw, 4321, 1);
    assert_eq!(gw.stat("usage_missing"), 0);
}

#[test]
fn a_client_hanging_up_once_it_read_the_usage_pays_that_usage() {
    let gw = LlmGateway::start(&[TEST_TIMEOUT]);
    let mut conn = TcpStream::connect(("127.0.0.1", gw.envoy.port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let request = format!("POST /v1/chat/completions HTTP/1.1\r\nhost: llm\r\nauthorization: Bearer sk-hangs-up\r\nx-usage: 777\r\nx-stream: 5\r\nx-hold-ms: 3000\r\ncontent-length: {}\r\n\r\n{CHAT}", CHAT.len());
    conn.write_all(request.as_bytes()).unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    while !line.contains("\"total_tokens\":777") {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the usage event never came");
    }
    // Read what it wanted; gone before [DONE].
    conn.shutdown(std::net::Shutdown::Both).unwrap();
    drop(reader);
    wait_charged(&gw, 777, 1);
}

#[test]
fn a_client_hanging_up_before_the_response_headers_pays_max() {
    // The shipped rule's `"hang_up": "max"`: the upstream took the request
    // and works on it (and bills it); the client leaves before any answer.
    let gw = LlmGateway::start(&[TEST_TIMEOUT]);
    let mut conn = TcpStream::connect(("127.0.0.1", gw.envoy.port)).unwrap();
    let request = format!("POST /v1/chat/completions HTTP/1.1\r\nhost: llm\r\nauthorization: Bearer sk-leaves-early\r\nx-usage: 5\r\nx-delay-ms: 10000\r\ncontent-length: {}\r\n\r\n{CHAT}", CHAT.len());
    conn.write_all(request.as_bytes()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while gw.upstream.served.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        assert!(Instant::now() < deadline, "the request never reached the upstream");
        std::thread::sleep(Duration::from_millis(10));
    }
    conn.shutdown(std::net::Shutdown::Both).unwrap();
    drop(conn);
    wait_charged(&gw, 200_000, 1);
    assert_eq!(gw.stat("usage_missing"), 1);
}

#[test]
fn a_body_cut_before_its_usage_is_charged_what_it_delivered() {
    let gw = LlmGateway::start(&[TEST_TIMEOUT]);
    // 400,000 bytes of a 2 MB answer at 4 bytes a token: 100,000; and the
    // prompt, CHAT's 67 bytes: 17.
    let cut = |token: &str, bytes: &str| {
        let raw = host_tests::raw_http::RawRequest::new("POST", b"/v1/chat/completions")
            .header("authorization", auth(token).as_bytes())
            .header("x-usage", b"5")
            .header("x-pad-bytes", b"2000000")
            .header("x-reset-after-bytes", bytes.as_bytes());
        let _ = raw.send_body(gw.envoy.port, CHAT.as_bytes(), 0);
    };
    cut("sk-cut-400k", "400000");
    wait_charged(&gw, 100_017, 1);
    // After a megabyte: past the max, 200,000.
    cut("sk-cut-1m", "1000000");
    wait_charged(&gw, 300_017, 2);
    assert_eq!(gw.stat("usage_missing"), 2);
}

#[test]
fn no_redis_key_or_value_holds_the_bearer_token() {
    let gw = LlmGateway::start(&[TEST_TIMEOUT]);
    let token = "sk-proj-Zx8Qv3LmN0pRsTuVwXyZ1234567890abcdEFGH";
    let key = auth(token);
    for usage in ["100", "200000", "5"] {
        let a = gw.chat(&[("authorization", &key), ("x-usage", usage)]);
        for (name, value) in &a.headers {
            assert!(!value.contains(&token[..12]), "{name}: {value}");
        }
    }
    wait_charged(&gw, 100 + 200_000, 2);
    let dump = gw.redis_dump();
    assert!(!dump.is_empty());
    let runs: Vec<&str> = (0..=token.len() - 12).map(|i| &token[i..i + 12]).collect();
    for (k, v) in &dump {
        for run in &runs {
            assert!(!k.contains(run) && !v.contains(run), "{run} in {k} = {v}");
        }
    }
    let log = gw.envoy.log();
    for run in &runs {
        assert!(!log.contains(run), "{run} in Envoy's log");
    }
}
