//! Requests whose decision waits for their body: buffered until whole,
//! read once, decided with the other rules; refused past the bound, when
//! the body is no JSON, and when it never comes.

use super::*;

/// Per key per model, at most 64 bytes of body read, 1 s to send it.
const PER_MODEL: &str = r#"{"name":"llm","match":{"path_prefix":"/v1/"},"key":["header:x-user","body:model"],
    "identity":"clear","request_body":{"max_bytes":64,"timeout":"1s"},
    "limits":[{"algorithm":"fixed_window","limit":3,"window":"1m"}]}"#;

fn chat(u: &str) -> FakeRequest {
    FakeRequest::new("POST", "/v1/chat/completions").with("x-user", u)
}

/// Feeds `body` in chunks of `chunk` bytes as a host that buffers them
/// does (each call tells the size buffered so far); the last call's action
/// and how many times the body was read.
fn send_body(w: &mut Worker, host: &FakeHost, stream: u32, body: &[u8], chunk: usize) -> (BodyAction, usize) {
    let reads = Cell::new(0);
    let mut sent = 0;
    loop {
        sent = (sent + chunk).min(body.len());
        let eos = sent == body.len();
        let read = |n: u64| {
            reads.set(reads.get() + 1);
            Some(body[..n as usize].to_vec())
        };
        let action = w.on_request_body(host, stream, &chat("a"), sent as u64, eos, read);
        if eos || action == BodyAction::Continue {
            return (action, reads.get());
        }
        assert_eq!(action, BodyAction::Buffer, "held while the body comes");
    }
}

#[test]
#[wasm_bindgen_test]
fn the_decision_waits_for_the_whole_body_and_keys_on_its_field() {
    let host = FakeHost::new();
    let mut w = Worker::new(config("", PER_MODEL), Instant::from_ms(NOW));
    assert_eq!(w.on_request_headers(&host, 2, &chat("a"), false), Action::Pause);
    assert!(host.sent.borrow().is_empty(), "nothing is decided before the body");
    let (action, reads) = send_body(&mut w, &host, 2, br#"{"model":"gpt\u002d4o","messages":[]}"#, 5);
    assert_eq!((action, reads), (BodyAction::Buffer, 1), "read once, whole; held for the store");
    assert!(host.body(0).contains("%7Ba~~gpt-4o%7D"), "{}", host.body(0));
    w.on_answer(&host, host.token(0), ints(&ALLOW));
    assert_eq!(*host.resumed.borrow(), [2], "the held headers and body go on");
    assert!((w.bodies_waiting == 0));
}

#[test]
#[wasm_bindgen_test]
fn a_body_past_the_bound_is_refused_unread_before_it_ends() {
    let host = FakeHost::new();
    let mut w = Worker::new(config("", PER_MODEL), Instant::from_ms(NOW));
    w.on_request_headers(&host, 2, &chat("a"), false);
    let big = format!(r#"{{"model":"gpt-4o","pad":"{}"}}"#, "x".repeat(100));
    assert_eq!(w.on_request_body(&host, 2, &chat("a"), 60, false, |_| None), BodyAction::Buffer);
    let read = |_: u64| -> Option<Vec<u8>> { panic!("a body past the bound is never read") };
    assert_eq!(w.on_request_body(&host, 2, &chat("a"), big.len() as u64 - 10, false, read), BodyAction::Buffer);
    let replied = host.replied.borrow();
    assert_eq!(replied.len(), 1);
    assert_eq!(
        (replied[0].0, replied[0].1.status, replied[0].1.body.as_str()),
        (
            2,
            413,
            r#"{"error":"request_body_too_large","rule":"llm","detail":"the request body is larger than 64 bytes"}"#
        )
    );
    assert!(host.sent.borrow().is_empty());
    assert_eq!(w.on_request_body(&host, 2, &chat("a"), 200, true, |_| None), BodyAction::Continue, "decided");
}

#[test]
#[wasm_bindgen_test]
fn a_request_without_a_body_or_with_a_bad_one_is_refused_never_passed() {
    let host = FakeHost::new();
    let mut w = Worker::new(config("", PER_MODEL), Instant::from_ms(NOW));
    assert_eq!(w.on_request_headers(&host, 2, &chat("a"), true), Action::Pause, "answered");
    w.on_request_headers(&host, 3, &chat("a"), false);
    send_body(&mut w, &host, 3, br#"{"model":"a","model":"b"}"#, 100);
    w.on_request_headers(&host, 4, &chat("a"), false);
    send_body(&mut w, &host, 4, br#"{"messages":[]}"#, 100);
    w.on_request_headers(&host, 5, &chat("a"), false);
    send_body(&mut w, &host, 5, b"model=gpt-4o", 100);
    let replied: Vec<(u32, u32, String)> =
        host.replied.borrow().iter().map(|(s, r)| (*s, r.status, r.body.clone())).collect();
    let detail = |d: &str| format!(r#"{{"error":"bad_request_body","rule":"llm","detail":"{d}"}}"#);
    assert_eq!(
        replied,
        [
            (2, 400, detail("the request body must be one JSON document: the request body is empty")),
            (3, 400, detail("the request body must be one JSON document: a key appears twice in one object")),
            (4, 400, detail("body:model is missing")),
            (
                5,
                400,
                detail("the request body must be one JSON document: it is not valid JSON at byte 0: expected a value")
            ),
        ]
    );
    assert!(host.sent.borrow().is_empty());
    assert_eq!(host.metrics.get(0, Event::BadRequest), 4);
}

#[test]
#[wasm_bindgen_test]
fn a_rule_that_reads_an_unreadable_body_as_absent_lets_the_others_decide() {
    let host = FakeHost::new();
    let lenient = PER_MODEL.replace(r#""timeout":"1s""#, r#""timeout":"1s","invalid":"absent""#);
    let mut w = Worker::new(config("", &format!("{lenient},{API}")), Instant::from_ms(NOW));
    w.on_request_headers(&host, 2, &chat("a"), false);
    assert_eq!(w.on_request_body(&host, 2, &chat("a"), 65, false, |_| None), BodyAction::Continue);
    assert!(host.replied.borrow().is_empty() && host.sent.borrow().is_empty(), "no rule applies");
    // Another rule of the request still decides it, after the body.
    let both = FakeRequest::new("POST", "/v1/x").with("x-user", "a");
    let api = API.replace("/api", "/v1/");
    let mut w =
        Worker::new(config("", &format!("{lenient},{}", api.replace(r#""api""#, r#""api2""#))), Instant::from_ms(NOW));
    assert_eq!(w.on_request_headers(&host, 3, &both, false), Action::Pause);
    assert!(host.sent.borrow().is_empty(), "all rules of the request are decided together");
    assert_eq!(w.on_request_body(&host, 3, &both, 4, true, |_| Some(b"nope".to_vec())), BodyAction::Buffer);
    assert_eq!(host.sent.borrow().len(), 1, "api2's decision, once the body is in");
}

#[test]
#[wasm_bindgen_test]
fn a_body_that_never_comes_is_answered_408_on_the_timer() {
    let host = FakeHost::new();
    let mut w = Worker::new(config("", PER_MODEL), Instant::from_ms(NOW));
    assert_eq!(w.tick_period_ms(), 10_000, "no body waited for: the idle period");
    w.on_request_headers(&host, 2, &chat("a"), false);
    w.on_request_headers(&host, 3, &chat("a"), false);
    assert_eq!(w.tick_period_ms(), 100, "a tenth of the timeout");
    w.on_request_body(&host, 3, &chat("a"), 10, false, |_| None);
    host.now.set(NOW + 999);
    w.on_tick(&host);
    assert!(host.replied.borrow().is_empty());
    host.now.set(NOW + 1000);
    w.on_tick(&host);
    let replied: Vec<(u32, u32, String)> =
        host.replied.borrow().iter().map(|(s, r)| (*s, r.status, r.body.clone())).collect();
    let late = r#"{"error":"request_body_timeout","rule":"llm","detail":"the request body did not arrive within 1s"}"#;
    assert_eq!(replied, [(2, 408, late.to_string()), (3, 408, late.to_string())]);
    let warnings = host.warnings.borrow();
    assert_eq!(warnings.len(), 1, "one line per 10 s: {warnings:?}");
    assert!(warnings[0].starts_with("ratelimit: rule llm: a request body did not arrive within its 1000 ms"));
    assert!((w.bodies_waiting == 0));
    assert_eq!(w.tick_period_ms(), 10_000);
}

#[test]
#[wasm_bindgen_test]
fn a_stream_gone_while_its_body_comes_leaves_nothing_and_other_requests_are_not_held() {
    let host = FakeHost::new();
    let mut w = Worker::new(config("", &format!("{PER_MODEL},{API}")), Instant::from_ms(NOW));
    w.on_request_headers(&host, 2, &chat("a"), false);
    w.on_stream_end(&host, 2);
    assert!((w.bodies_waiting == 0));
    assert_eq!(w.on_request_body(&host, 2, &chat("a"), 10, true, |_| None), BodyAction::Continue);
    assert_eq!(w.on_request_headers(&host, 4, &user("/api", "a"), false), Action::Pause, "to the store");
    let body = |w: &mut Worker| w.on_request_body(&host, 4, &user("/api", "a"), 10, true, |_| None);
    assert_eq!(body(&mut w), BodyAction::Hold, "never let through before its decision");
    assert_eq!(host.sent.borrow().len(), 1, "decided at its headers, its body never read");
    w.on_answer(&host, host.token(0), ints(&ALLOW));
    assert_eq!(body(&mut w), BodyAction::Continue, "decided: its body passes");
}

#[test]
#[wasm_bindgen_test]
fn a_host_that_hands_no_body_over_refuses_what_a_body_rule_applies_to() {
    let host = FakeHost::new();
    let mut w = Worker::new(config("", &format!("{PER_MODEL},{API}")), Instant::from_ms(NOW));
    w.pin_calls_to_streams();
    for (stream, eos) in [(2, false), (3, true)] {
        assert_eq!(w.on_request_headers(&host, stream, &chat("a"), eos), Action::Pause, "answered");
    }
    let replied: Vec<(u32, u32, String)> =
        host.replied.borrow().iter().map(|(s, r)| (*s, r.status, r.body.clone())).collect();
    let body = r#"{"error":"request_body_unsupported","rule":"llm","detail":"this host does not hand the request body to the filter: rules reading it refuse the requests they apply to"}"#;
    assert_eq!(replied, [(2, 501, body.to_string()), (3, 501, body.to_string())]);
    assert!((w.bodies_waiting == 0) && host.sent.borrow().is_empty());
    assert_eq!(w.on_request_headers(&host, 4, &user("/api", "a"), false), Action::Pause, "other rules decide as ever");
    assert_eq!(host.sent.borrow().len(), 1);
}
