//! Keys and match conditions read from the JSON request body, on real
//! Envoy: a limit per API key per model, the body passed on byte for byte,
//! and every way a client might dodge it (escapes, duplicate keys, huge or
//! broken bodies, many chunks, no body, a body that never comes).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use host_tests::body_upstream::BodyUpstream;
use host_tests::envoy::Edit;
use host_tests::http::Answer;
use host_tests::raw_http::RawRequest;
use host_tests::stack::Stack;

use crate::plugin_config;

/// 3 requests an hour per API key per model; bodies read up to 1024 bytes
/// and for 1 s.
const PER_MODEL: &str = r#"{"name":"llm","match":{"path_prefix":"/v1/","methods":["POST"]},
    "key":["header:authorization","body:model"],"request_body":{"max_bytes":1024,"timeout":"1s"},
    "limits":[{"algorithm":"sliding_log","limit":3,"window":"1h"}]}"#;

/// Lets the body reach the filter while the headers wait (Envoy 1.40:
/// without it a paused filter sees no body until it resumes).
pub const STOP_ITERATION: Edit<'static> = Edit {
    from: "failure_policy: FAIL_RELOAD",
    to: "failure_policy: FAIL_RELOAD\n                allow_on_headers_stop_iteration: true",
};

fn start(edits: &[Edit<'_>]) -> (Stack, BodyUpstream) {
    start_rules(PER_MODEL, edits)
}

fn start_rules(rules: &str, edits: &[Edit<'_>]) -> (Stack, BodyUpstream) {
    let upstream = BodyUpstream::start();
    let stack = Stack::start_edited_to(&plugin_config(rules), 2, Some(upstream.server.port), edits, &[])
        .unwrap_or_else(|e| panic!("{}", e.log));
    (stack, upstream)
}

fn chat(stack: &Stack, key: &str, body: &[u8], chunks: usize) -> Answer {
    RawRequest::new("POST", b"/v1/chat/completions")
        .header("authorization", format!("Bearer {key}").as_bytes())
        .header("content-type", b"application/json")
        .send_body(stack.envoy.port, body, chunks)
        .expect("an answer")
}

fn body(model: &str) -> Vec<u8> {
    format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}]}}"#).into_bytes()
}

fn refusal(status: u16, error: &str, detail: &str) -> (u16, String) {
    (status, format!(r#"{{"error":"{error}","rule":"llm","detail":"{detail}"}}"#))
}

#[test]
fn each_model_has_its_own_three_requests_per_key_and_bodies_pass_unchanged() {
    let (stack, upstream) = start(&[STOP_ITERATION]);
    let mut admitted = Vec::new();
    for model in ["gpt-4o", "gpt-4o-mini"] {
        let statuses: Vec<u16> = (0..4)
            .map(|_| {
                let a = chat(&stack, "k1", &body(model), 0);
                if a.status == 200 {
                    admitted.push(body(model));
                }
                a.status
            })
            .collect();
        assert_eq!(statuses, [200, 200, 200, 429], "{model}");
    }
    let denied = chat(&stack, "k1", &body("gpt-4o"), 0);
    assert_eq!(denied.status, 429);
    assert!(denied.body.starts_with(r#"{"error":"rate_limited","rule":"llm","retry_after":"#), "{}", denied.body);
    // The escaped spelling is the same model, the same spent budget.
    let escaped = br#"{"model":"gpt\u002d4o","messages":[]}"#;
    assert_eq!(chat(&stack, "k1", escaped, 0).status, 429);
    // Another key has its own budget, spent the escaped way.
    for _ in 0..3 {
        assert_eq!(chat(&stack, "k2", escaped, 0).status, 200);
        admitted.push(escaped.to_vec());
    }
    assert_eq!(chat(&stack, "k2", &body("gpt-4o"), 0).status, 429, "gpt\\u002d4o spent gpt-4o's");
    assert_eq!(upstream.bodies(), admitted, "every admitted body, byte for byte; no refused one");
}

#[test]
fn a_body_in_many_chunks_is_read_whole_and_passes_whole() {
    let (stack, upstream) = start(&[STOP_ITERATION]);
    let long = format!(r#"{{"messages":[{{"role":"user","content":"{}"}}],"model":"gpt-4o"}}"#, "x".repeat(300));
    for _ in 0..3 {
        assert_eq!(chat(&stack, "k1", long.as_bytes(), 7).status, 200, "the model comes in the last chunks");
    }
    assert_eq!(chat(&stack, "k1", long.as_bytes(), 7).status, 429);
    assert_eq!(chat(&stack, "k1", &body("gpt-4o"), 0).status, 429, "chunked or not, one model");
    assert_eq!(upstream.bodies(), vec![long.into_bytes(); 3]);
}

#[test]
fn bodies_the_rule_cannot_read_are_refused_and_never_reach_the_upstream() {
    let (stack, upstream) = start(&[STOP_ITERATION]);
    let huge = format!(r#"{{"model":"gpt-4o","pad":"{}"}}"#, "x".repeat(2000));
    let cases: [(&[u8], usize, (u16, String)); 6] = [
        (huge.as_bytes(), 0, refusal(413, "request_body_too_large", "the request body is larger than 1024 bytes")),
        (huge.as_bytes(), 100, refusal(413, "request_body_too_large", "the request body is larger than 1024 bytes")),
        (
            br#"{"model":"gpt-4o-mini","model":"gpt-4o"}"#,
            0,
            refusal(
                400,
                "bad_request_body",
                "the request body must be one JSON document: a key appears twice in one object",
            ),
        ),
        (
            b"model=gpt-4o",
            0,
            refusal(
                400,
                "bad_request_body",
                "the request body must be one JSON document: it is not valid JSON at byte 0: expected a value",
            ),
        ),
        (br#"{"messages":[]}"#, 0, refusal(400, "bad_request_body", "body:model is missing")),
        (
            b"",
            0,
            refusal(400, "bad_request_body", "the request body must be one JSON document: the request body is empty"),
        ),
    ];
    for (sent, chunks, want) in cases {
        let a = chat(&stack, "k1", sent, chunks);
        assert_eq!((a.status, a.body), want, "{}", String::from_utf8_lossy(&sent[..sent.len().min(40)]));
    }
    assert!(upstream.bodies().is_empty());
    assert_eq!(chat(&stack, "k1", &body("gpt-4o"), 0).status, 200, "no refused request spent the budget");
}

/// Sends the headers of a request whose 100-byte body never comes; the
/// status and body of the answer and how long it took.
fn body_never_sent(stack: &Stack) -> (String, Duration) {
    let mut conn = TcpStream::connect(("127.0.0.1", stack.envoy.port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head =
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer k1\r\ncontent-length: 100\r\n\r\n";
    let started = Instant::now();
    conn.write_all(head.as_bytes()).unwrap();
    let mut answer = vec![0; 4096];
    // A signal to this test process may interrupt the wait: wait again.
    let n = loop {
        match conn.read(&mut answer) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => break r.unwrap(),
        }
    };
    (String::from_utf8_lossy(&answer[..n]).into_owned(), started.elapsed())
}

#[test]
fn a_body_that_never_comes_is_answered_408_after_the_rules_timeout() {
    let (stack, upstream) = start(&[STOP_ITERATION]);
    // While the body is awaited, requests the filter answers at once (an
    // empty body: 400) measure how late this machine lets Envoy answer.
    let waiting = AtomicBool::new(true);
    let ((answer, took), slowest) = std::thread::scope(|s| {
        let reference = s.spawn(|| {
            let mut slowest = Duration::ZERO;
            while waiting.load(Ordering::Relaxed) {
                let asked = Instant::now();
                assert_eq!(chat(&stack, "k2", b"", 0).status, 400);
                slowest = slowest.max(asked.elapsed());
                std::thread::sleep(Duration::from_millis(20));
            }
            slowest
        });
        let answered = body_never_sent(&stack);
        waiting.store(false, Ordering::Relaxed);
        (answered, reference.join().unwrap())
    });
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    let detail =
        r#"{"error":"request_body_timeout","rule":"llm","detail":"the request body did not arrive within 1s"}"#;
    assert!(answer.ends_with(detail), "{answer}");
    // Never before the timeout; after it, at the filter's next timer (a
    // tenth of the timeout), as late as an immediate answer was then.
    eprintln!("408 after {took:?}; an immediate answer took at most {slowest:?} meanwhile");
    let bound = Duration::from_millis(1000 + 100) + 2 * slowest + Duration::from_millis(500);
    assert!(took >= Duration::from_millis(1000) && took < bound, "408 after {took:?}, not within 1 s to {bound:?}");
    assert!(upstream.bodies().is_empty());
}

#[test]
fn without_allow_on_headers_stop_iteration_a_body_rule_fails_closed_with_408() {
    // Envoy then holds the body until the filter resumes, which it never
    // does before the body: the timeout answers, and the log says why.
    let (stack, upstream) = start(&[]);
    let a = chat(&stack, "k1", &body("gpt-4o"), 0);
    assert_eq!((a.status, a.body), refusal(408, "request_body_timeout", "the request body did not arrive within 1s"));
    assert!(upstream.bodies().is_empty());
    assert!(stack.envoy.log().contains("allow_on_headers_stop_iteration: true"), "the log names the fix");
}

#[test]
fn with_allow_on_headers_stop_iteration_a_body_never_carries_its_headers_past_the_store_decision() {
    // A rule of the headers alone: its decision waits for the store while
    // the body arrives; the body is held, and the 429 still holds.
    let per_key = r#"{"name":"llm","key":["header:authorization"],"limits":[{"algorithm":"sliding_log","limit":2,"window":"1h"}]}"#;
    let (stack, upstream) = start_rules(per_key, &[STOP_ITERATION]);
    let statuses: Vec<u16> = (0..4).map(|i| chat(&stack, "k1", &body("gpt-4o"), [0, 9][i % 2]).status).collect();
    assert_eq!(statuses, [200, 200, 429, 429]);
    assert_eq!(upstream.bodies(), vec![body("gpt-4o"); 2]);
}
