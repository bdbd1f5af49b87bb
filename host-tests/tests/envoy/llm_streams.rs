//! Streams through the shipped `llm-gateway.yaml` that report no usage
//! unless asked: the gateway asks on the client's behalf and hands the
//! client the stream it asked for; a stream that ends without a usage
//! report pays its prompt and what it was delivered.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use host_tests::llm_gateway::{LlmGateway, TEST_TIMEOUT};

/// Waits until rule `llm` has made `charges` charges (each stream is
/// charged once, when it ends), then checks how many units they came to.
fn charged(gw: &LlmGateway, charges: u64, units: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while gw.stat("charges") < charges {
        assert!(Instant::now() < deadline, "{} charges of {charges}", gw.stat("charges"));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!((gw.stat("charges"), gw.stat("charged_units")), (charges, units));
    assert_eq!(gw.stat("charge_errors"), 0);
}

fn stream_body(prompt: &str) -> String {
    format!(r#"{{"model":"gpt-4o","stream":true,"messages":[{{"role":"user","content":"{prompt}"}}]}}"#)
}

#[test]
fn a_stream_that_did_not_ask_for_its_usage_is_charged_it_and_never_sees_it() {
    let gw = LlmGateway::start(&[TEST_TIMEOUT]);
    let headers = [("authorization", "Bearer sk-quiet"), ("x-usage", "321"), ("x-stream", "3")];
    let a = gw.chat_body(&headers, &stream_body("hi"));
    assert_eq!(a.status, 200);
    assert_eq!(a.header("content-type"), Some("text/event-stream"));
    let events: Vec<&str> = a.body.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.len(), 4, "three chunks and [DONE], as the API sends a client that did not ask: {}", a.body);
    assert!(!a.body.contains("usage"), "no usage event, no usage member: {}", a.body);
    assert_eq!(events[3], "data: [DONE]");
    charged(&gw, 1, 321);
    // A client that asks gets its usage, and is charged it once.
    let asked = r#"{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[]}"#;
    let b = gw.chat_body(&headers, asked);
    assert!(
        b.body.contains(r#""choices":[],"usage":{"prompt_tokens":1,"completion_tokens":320,"total_tokens":321}"#),
        "{}",
        b.body
    );
    charged(&gw, 2, 642);
}

#[test]
fn a_client_gone_after_the_first_event_pays_its_prompt_and_that_event() {
    let gw = LlmGateway::start(&[TEST_TIMEOUT]);
    // 40,000 bytes of prompt: 10,000 tokens at the rule's 4 bytes a token.
    let body = stream_body(&"x".repeat(40_000 - stream_body("").len()));
    assert_eq!(body.len(), 40_000);
    let mut conn = TcpStream::connect(("127.0.0.1", gw.envoy.port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer sk-gone\r\ncontent-type: application/json\r\n\
         x-usage: 5000\r\nx-stream: 10\r\nx-gap-ms: 10000\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).unwrap();
    conn.write_all(body.as_bytes()).unwrap();
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    while !line.starts_with("data: ") {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the stream ended before its first event");
    }
    drop(reader);
    charged(&gw, 1, 10_000 + 1);
    assert_eq!(gw.stat("usage_missing"), 1);
}
