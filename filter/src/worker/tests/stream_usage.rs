//! A streamed request that does not ask for its usage is made to; its
//! client gets the stream back without it, and the budget is charged what
//! the upstream reported. A stream without any usage report pays its
//! prompt and what it was delivered.

use super::*;

/// Check-then-charge, the usage read from chat completions and the
/// Responses API, asked for on the client's behalf.
const ASKING: &str = r#"{"name":"llm","match":{"path_prefix":"/v1/"},"key":["header:x-user"],
    "request_body":{"max_bytes":100000},
    "cost":{"response_body":[["usage.total_tokens","response.usage.total_tokens"]],"default":10,"max":200000,
            "include_usage":true},
    "limits":[{"algorithm":"fixed_window","limit":100000000,"window":"1h"}]}"#;

struct Headers(&'static [(&'static str, &'static str)]);

impl ResponseSource for Headers {
    fn header(&self, name: &str) -> Option<Vec<u8>> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_bytes().to_vec())
    }
}

const SSE: Headers = Headers(&[(":status", "200"), ("content-type", "text/event-stream")]);

fn chat() -> FakeRequest {
    FakeRequest::new("POST", "/v1/chat/completions").with("x-user", "a")
}

/// Stream `s` sends `body` whole; the store admits it (call `call`).
fn admit(w: &mut Worker, host: &FakeHost, s: u32, body: &[u8], call: usize) {
    assert_eq!(w.on_request_headers(host, s, &chat(), false), Action::Pause);
    let read = |n: u64| Some(body[..n as usize].to_vec());
    assert_eq!(w.on_request_body(host, s, &chat(), body.len() as u64, true, read), BodyAction::Buffer);
    w.on_answer(host, host.token(call), ints(&ALLOW));
    assert_eq!(host.resumed.borrow().last(), Some(&s));
}

/// The amount of the charge in call `n`.
fn charged(host: &FakeHost, n: usize) -> u64 {
    let body = host.body(n);
    let at = body.find("/g/").unwrap_or_else(|| panic!("no charge in {body}"));
    body[at + 3..].split('/').next().unwrap().parse().unwrap()
}

const WITH_USAGE: [&str; 4] = [
    "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n",
    "data: {\"choices\":[{\"delta\":{\"content\":\"!\"}}],\"usage\":null}\n\n",
    "data: {\"choices\":[],\"usage\":{\"total_tokens\":321}}\n\n",
    "data: [DONE]\n\n",
];

#[test]
#[wasm_bindgen_test]
fn a_stream_is_made_to_ask_for_its_usage_and_its_client_never_sees_it() {
    let host = FakeHost::new();
    let mut w = Worker::new(config("", ASKING), Instant::from_ms(NOW));
    let body = br#"{"model":"m","stream":true,"messages":[]}"#;
    admit(&mut w, &host, 1, body, 0);
    let sent = host.request_bodies.borrow().clone();
    assert_eq!(
        sent,
        [(
            body.len() as u64,
            br#"{"stream_options":{"include_usage":true},"model":"m","stream":true,"messages":[]}"#.to_vec()
        )]
    );
    w.on_response_headers(&host, 1, &SSE, false);
    assert!(w.rewrites_body(1));
    let mut client = Vec::new();
    for (i, chunk) in WITH_USAGE.iter().enumerate() {
        client.extend(w.on_response_body(&host, 1, chunk.as_bytes(), i == 3).unwrap());
    }
    assert_eq!(
        String::from_utf8(client).unwrap(),
        concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"!\"}}]}\n\n",
            "data: [DONE]\n\n"
        )
    );
    assert_eq!(charged(&host, 1), 321, "the usage the upstream reported");
    assert_eq!(w.sizes(), (1, 0, 0), "the stream is done");
}

#[test]
#[wasm_bindgen_test]
fn a_client_that_asked_gets_its_usage_and_its_body_as_it_sent_it() {
    let host = FakeHost::new();
    let mut w = Worker::new(config("", ASKING), Instant::from_ms(NOW));
    admit(&mut w, &host, 1, br#"{"stream":true,"stream_options":{"include_usage":true}}"#, 0);
    admit(&mut w, &host, 2, br#"{"stream":false}"#, 1);
    assert!(host.request_bodies.borrow().is_empty(), "nothing to add");
    w.on_response_headers(&host, 1, &SSE, false);
    assert!(!w.rewrites_body(1));
    assert_eq!(w.on_response_body(&host, 1, WITH_USAGE[2].as_bytes(), false), None, "passes as it is");
}

#[test]
#[wasm_bindgen_test]
fn a_body_naming_stream_in_another_case_is_refused() {
    let host = FakeHost::new();
    let mut w = Worker::new(config("", ASKING), Instant::from_ms(NOW));
    w.on_request_headers(&host, 1, &chat(), false);
    let body = br#"{"stream":false,"Stream":true}"#;
    w.on_request_body(&host, 1, &chat(), body.len() as u64, true, |n| Some(body[..n as usize].to_vec()));
    let replied = host.replied.borrow();
    assert_eq!(
        (replied[0].1.status, replied[0].1.body.as_str()),
        (
            400,
            r#"{"error":"bad_request_body","rule":"llm","detail":"body:stream is also given as a key spelled in another letter case"}"#
        )
    );
    assert!(host.sent.borrow().is_empty());
}

#[test]
#[wasm_bindgen_test]
fn a_stream_cut_before_its_usage_pays_its_prompt_and_what_it_delivered() {
    let host = FakeHost::new();
    let mut w = Worker::new(config("", ASKING), Instant::from_ms(NOW));
    // 40,000 bytes of prompt: 10,000 units at 4 bytes a unit.
    let body = format!(r#"{{"stream":true,"messages":"{}"}}"#, "x".repeat(40_000 - 29));
    assert_eq!(body.len(), 40_000);
    admit(&mut w, &host, 1, body.as_bytes(), 0);
    w.on_response_headers(&host, 1, &SSE, false);
    w.on_response_body(&host, 1, WITH_USAGE[0].as_bytes(), false);
    w.on_stream_end(&host, 1);
    assert_eq!(charged(&host, 1), 10_001, "the prompt and one event");
    // Gone before the response headers: the prompt.
    admit(&mut w, &host, 2, body.as_bytes(), 2);
    w.on_stream_end(&host, 2);
    assert_eq!(charged(&host, 3), 10_000);
}
