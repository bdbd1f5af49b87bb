//! Reservation mode: a request takes its worst case at admission and the
//! response settles it: what it used past it is charged, what it left is
//! given back into the window it was taken from.

use super::*;

/// 100 output tokens unless the body says, plus one per body byte.
const RESERVED: &str = r#"{"name":"llm","key":["header:x-user"],"identity":"clear",
    "cost":{"response_header":"x-usage","default":1,"max":1000,"reservation":{"default_output":100}},
    "limits":[{"algorithm":"fixed_window","limit":100000,"window":"1h"}]}"#;

/// A response reporting `usage` in `x-usage`.
struct Usage(&'static str);

impl ResponseSource for Usage {
    fn header(&self, name: &str) -> Option<Vec<u8>> {
        (name == "x-usage").then(|| self.0.as_bytes().to_vec())
    }
}

fn chat() -> FakeRequest {
    FakeRequest::new("POST", "/v1/chat/completions").with("x-user", "a")
}

/// Stream `s` sends `body` whole and is admitted by the store's call `call`.
fn admit(w: &mut Worker, host: &FakeHost, s: u32, body: &'static [u8], call: usize) {
    assert_eq!(w.on_request_headers(host, s, &chat(), false), Action::Pause);
    let read = |n: u64| Some(body[..n as usize].to_vec());
    assert_eq!(w.on_request_body(host, s, &chat(), body.len() as u64, true, read), BodyAction::Buffer);
    w.on_answer(host, host.token(call), ints(&ALLOW));
    assert_eq!(host.resumed.borrow().last(), Some(&s));
}

#[test]
#[wasm_bindgen_test]
fn the_worst_case_is_reserved_and_the_response_settles_it() {
    let host = FakeHost::new();
    let mut w = Worker::new(config(r#","batch":{"max_in_flight":1}"#, RESERVED), Instant::from_ms(NOW));
    let body = br#"{"max_tokens":50}"#; // 17 bytes
    admit(&mut w, &host, 1, body, 0);
    assert!(host.body(0).contains("/u/67/0/"), "50 + 17 taken at admission: {}", host.body(0));
    let window = NOW / 3_600_000;
    // The hour ends before the response: the refund goes into the hour
    // the reservation was taken from.
    host.now.set((window + 1) * 3_600_000 + 5);
    w.on_response_headers(&host, 1, &Usage("30"), true);
    let refund = host.body(1);
    assert!(refund.contains("/f/37/0/"), "67 - 30 given back: {refund}");
    assert!(refund.contains(&format!("%3A{window}/")), "the window it was taken from: {refund}");
    w.on_answer(&host, host.token(1), ints(&[1, 0, 0, 0]));
    assert_eq!((host.metrics.get(0, Event::Charged), host.metrics.get(0, Event::ChargedUnits)), (1, 30));

    admit(&mut w, &host, 2, br#"{"max_tokens":1}"#, 2);
    assert!(host.body(2).contains("/u/17/0/"), "{}", host.body(2));
    w.on_response_headers(&host, 2, &Usage("500"), true);
    assert!(host.body(3).contains("/g/483/0/"), "what it used past its reservation is charged: {}", host.body(3));
    w.on_answer(&host, host.token(3), ints(&ALLOW));

    admit(&mut w, &host, 3, br#"{"max_tokens":0}"#, 4);
    w.on_response_headers(&host, 3, &Usage("16"), true);
    assert_eq!(host.sent.borrow().len(), 5, "used exactly what it reserved: nothing to settle");
    assert!(host.warnings.borrow().is_empty(), "{:?}", host.warnings.borrow());
}

#[test]
#[wasm_bindgen_test]
fn a_body_without_a_readable_bound_is_refused_and_a_failed_refund_is_logged_not_spent() {
    let host = FakeHost::new();
    let mut w = Worker::new(config(r#","batch":{"max_in_flight":1}"#, RESERVED), Instant::from_ms(NOW));
    w.on_request_headers(&host, 1, &chat(), false);
    let body = br#"{"max_tokens":"lots"}"#;
    w.on_request_body(&host, 1, &chat(), body.len() as u64, true, |n| Some(body[..n as usize].to_vec()));
    let replied = host.replied.borrow().clone();
    assert_eq!(
        (replied[0].1.status, replied[0].1.body.as_str()),
        (400, r#"{"error":"bad_request_body","rule":"llm","detail":"body:max_tokens must be a non-negative integer"}"#)
    );
    assert!(host.sent.borrow().is_empty());

    admit(&mut w, &host, 2, br#"{"max_tokens":50}"#, 0);
    w.on_response_headers(&host, 2, &Usage("7"), true);
    w.on_answer(&host, host.token(1), Answer::Http { status: Some(503), body: Vec::new() });
    assert_eq!(host.metrics.get(0, Event::ChargeFailed), 0, "a refund is not a charge");
    assert_eq!(
        host.warnings.borrow()[1],
        "ratelimit: 1 refunds (60 units) of reservations could not be stored since the last such line (store answered HTTP 503); those clients stay charged their worst case"
    );
}

#[test]
#[wasm_bindgen_test]
fn a_reservation_whose_stream_left_before_the_answer_is_given_back_whole_if_it_was_surely_taken() {
    let host = FakeHost::new();
    let mut w = Worker::new(config(r#","batch":{"max_in_flight":1}"#, RESERVED), Instant::from_ms(NOW));
    let body = br#"{"max_tokens":50}"#;
    let send = |w: &mut Worker, s: u32| {
        w.on_request_headers(&host, s, &chat(), false);
        w.on_request_body(&host, s, &chat(), body.len() as u64, true, |n| Some(body[..n as usize].to_vec()));
    };
    send(&mut w, 1);
    w.on_stream_end(&host, 1);
    w.on_answer(&host, host.token(0), ints(&ALLOW));
    assert!(host.body(1).contains("/f/67/0/"), "the request never went on: all 67 back: {}", host.body(1));
    w.on_answer(&host, host.token(1), ints(&[1, 0, 0, 0]));
    assert_eq!(host.metrics.get(0, Event::Charged), 0, "nothing was charged");
    // An answer lost: the store may or may not have taken it; nothing is
    // given back (a refund of units never taken would admit past the limit).
    send(&mut w, 2);
    w.on_stream_end(&host, 2);
    w.on_answer(&host, host.token(2), Answer::Http { status: Some(503), body: Vec::new() });
    assert_eq!(host.sent.borrow().len(), 3);
}

#[test]
#[wasm_bindgen_test]
fn a_reservation_of_a_request_another_rule_refused_is_given_back_whole() {
    let host = FakeHost::new();
    let team = r#",{"name":"team","key":["header:x-team"],"identity":"clear",
        "limits":[{"algorithm":"fixed_window","limit":1,"window":"1h"}]}"#;
    let mut w =
        Worker::new(config(r#","batch":{"max_in_flight":1}"#, &format!("{RESERVED}{team}")), Instant::from_ms(NOW));
    let request = chat().with("x-team", "t");
    let body = br#"{"max_tokens":50}"#;
    w.on_request_headers(&host, 1, &request, false);
    w.on_request_body(&host, 1, &request, body.len() as u64, true, |n| Some(body[..n as usize].to_vec()));
    assert_eq!(host.decisions_in(0), 2);
    // The budget admits (67 taken), the team's limit refuses.
    w.on_answer(&host, host.token(0), ints(&[1, 99_933, 60_000, 0, 0, 0, 60_000, 60_000]));
    assert_eq!(host.replied.borrow()[0].1.status, 429);
    assert!(host.body(1).contains("/f/67/0/"), "the request never went on: {}", host.body(1));
}

#[test]
#[wasm_bindgen_test]
fn each_completion_asked_for_is_reserved_and_no_worst_case_passes_the_smallest_budget() {
    let host = FakeHost::new();
    let budgets = r#"{"name":"llm","key":["header:x-user"],"identity":"clear",
        "cost":{"response_header":"x-usage","default":1,"max":200000,"reservation":{"default_output":4096}},
        "limits":[{"algorithm":"token_bucket","limit":100000,"window":"1h","burst":50000},
                  {"algorithm":"fixed_window","limit":80000,"window":"1d"}]}"#;
    let mut w = Worker::new(config(r#","batch":{"max_in_flight":1}"#, budgets), Instant::from_ms(NOW));
    let n = br#"{"n":8,"max_tokens":3000}"#; // 25 bytes
    admit(&mut w, &host, 1, n, 0);
    let both = "/1/v/24025/0/2/u/24025/0/";
    assert!(host.body(0).contains(both), "8 completions of 3,000 and the body, the bucket's marked: {}", host.body(0));
    let best_of = br#"{"n":2,"best_of":3,"max_tokens":10}"#; // 35 bytes
    admit(&mut w, &host, 2, best_of, 1);
    assert!(host.body(1).contains("/v/65/0/"), "3 candidates of 10 and the body: {}", host.body(1));
    // No bound stated and a large prompt: 4,096 + 120,000 bytes is past the
    // bucket's 50,000 (and max's 200,000 past both): the whole bucket, which
    // a full one admits, never a worst case no bucket can hold.
    let prompt = format!(r#"{{"messages":"{}"}}"#, "x".repeat(120_000));
    let prompt: &'static [u8] = Box::leak(prompt.into_bytes().into_boxed_slice());
    admit(&mut w, &host, 3, prompt, 2);
    assert!(host.body(2).contains("/v/50000/0/"), "capped at the smallest capacity: {}", host.body(2));
}

#[test]
#[wasm_bindgen_test]
fn a_refused_worst_case_is_never_cached_but_a_refused_request_count_is() {
    let host = FakeHost::new();
    let rule = r#"{"name":"llm","key":["header:x-user"],"identity":"clear",
        "cost":{"response_header":"x-usage","default":1,"max":1000,"reservation":{"default_output":100}},
        "limits":[{"algorithm":"fixed_window","limit":5,"window":"1d","counts":"requests"},
                  {"algorithm":"fixed_window","limit":1000,"window":"1h"}]}"#;
    let mut w = Worker::new(config(r#","batch":{"max_in_flight":1}"#, rule), Instant::from_ms(NOW));
    let send = |w: &mut Worker, s: u32| {
        let body = br#"{"max_tokens":900}"#;
        w.on_request_headers(&host, s, &chat(), false);
        w.on_request_body(&host, s, &chat(), body.len() as u64, true, |n| Some(body[..n as usize].to_vec()));
    };
    // The tokens refuse the worst case: refunds of requests in flight may
    // make room before the store's retry instant, so the next one asks again.
    send(&mut w, 1);
    w.on_answer(&host, host.token(0), ints(&[1, 3, 3_600_000, 0, 0, 50, 3_600_000, 1_800_000]));
    assert_eq!(host.replied.borrow()[0].1.status, 429);
    send(&mut w, 2);
    assert_eq!(host.sent.borrow().len(), 2, "asked the store, not the deny cache");
    // A refused request count is cached: no refund gives a request back.
    w.on_answer(&host, host.token(1), ints(&[0, 0, 3_600_000, 1_800_000, 1, 50, 3_600_000, 0]));
    send(&mut w, 3);
    assert_eq!(host.sent.borrow().len(), 2, "answered from the deny cache");
    assert_eq!(host.replied.borrow().len(), 3);
    assert_eq!(host.metrics.get(0, Event::DenyCacheHit), 1);
}

/// 10,000 tokens per 10 s in a token bucket, reserved.
const BUCKET: &str = r#"{"name":"llm","key":["header:x-user"],"identity":"clear",
    "cost":{"response_header":"x-usage","default":1,"max":1000,"reservation":{"default_output":100}},
    "limits":[{"algorithm":"token_bucket","limit":10000,"window":"10s"}]}"#;

/// The store's answer to an admitted reservation of a bucket: its lead
/// after (in 1/10,000 ms), when the bucket was born and all that was added
/// to it: the reservation's mark.
fn marked(lead: i64, born: u64, count: i64) -> Answer {
    ints(&[1, lead, born as i64, count])
}

#[test]
#[wasm_bindgen_test]
fn a_buckets_reservation_keeps_its_mark_out_of_the_headers_and_its_refund_carries_it() {
    let host = FakeHost::new();
    let mut w = Worker::new(config(r#","batch":{"max_in_flight":1}"#, BUCKET), Instant::from_ms(NOW));
    let send = |w: &mut Worker, s: u32, body: &'static [u8]| {
        w.on_request_headers(&host, s, &chat(), false);
        w.on_request_body(&host, s, &chat(), body.len() as u64, true, |n| Some(body[..n as usize].to_vec()));
    };
    let born = NOW - 5_000;
    send(&mut w, 1, br#"{"max_tokens":50}"#);
    assert!(host.body(0).contains("/1/1/v/67/0/1/1"), "50 + 17 reserved: {}", host.body(0));
    // 70 tokens missing after it (70 ms of refill): 9,930 remain.
    w.on_answer(&host, host.token(0), marked(700_000, born, 4_242));
    assert_eq!(*host.resumed.borrow(), [1]);
    // Three more: two of that bucket, one of a bucket born since.
    for (s, count, b) in [(2, 5_000, born), (3, 5_067, born), (4, 67, NOW)] {
        send(&mut w, s, br#"{"max_tokens":50}"#);
        w.on_answer(&host, host.token(s as usize - 1), marked(700_000, b, count));
    }
    let headers = w.on_response_headers(&host, 1, &Usage("30"), true);
    assert!(headers.contains(&("x-ratelimit-remaining", "9930".into())), "{headers:?}");
    // Full again in 70 ms: the next second.
    assert!(headers.contains(&("x-ratelimit-reset", (NOW / 1000 + 1).to_string())), "{headers:?}");
    assert!(headers.contains(&("ratelimit-reset", "1".into())), "{headers:?}");
    assert!(host.body(4).contains(&format!("/1/1/f/37/{born}%3A4242/1/1")), "the mark: {}", host.body(4));
    // While that refund is out, the three settle: the one of the bucket
    // born since waits apart; the two of one bucket wait as one refund of
    // their sum, under the older mark less the newer's 60 given back.
    for s in [3, 2, 4] {
        w.on_response_headers(&host, s, &Usage("7"), true);
    }
    assert_eq!(host.sent.borrow().len(), 5);
    w.on_answer(&host, host.token(4), ints(&[1, 0, 0, 0]));
    let refunds = host.body(5);
    assert!(refunds.contains(&format!("/1/1/f/120/{born}%3A5060/1/1/f/60/{NOW}%3A67/")), "{refunds}");
    assert_eq!(host.decisions_in(5), 2);
    w.on_answer(&host, host.token(5), ints(&[1, 0, 0, 0, 1, 0, 0, 0]));
    // An excess charge carries no mark.
    send(&mut w, 5, br#"{"max_tokens":50}"#);
    w.on_answer(&host, host.token(6), marked(700_000, born, 9_000));
    w.on_response_headers(&host, 5, &Usage("100"), true);
    assert!(host.body(7).contains("/1/1/g/33/0/1/1"), "{}", host.body(7));
    assert!(host.warnings.borrow().is_empty(), "{:?}", host.warnings.borrow());
}

#[test]
#[wasm_bindgen_test]
fn a_buckets_reservation_given_back_whole_carries_its_mark() {
    let host = FakeHost::new();
    let team = r#",{"name":"team","key":["header:x-team"],"identity":"clear",
        "limits":[{"algorithm":"fixed_window","limit":1,"window":"1h"}]}"#;
    let mut w =
        Worker::new(config(r#","batch":{"max_in_flight":1}"#, &format!("{BUCKET}{team}")), Instant::from_ms(NOW));
    let body = br#"{"max_tokens":50}"#;
    let send = |w: &mut Worker, s: u32, request: &FakeRequest| {
        w.on_request_headers(&host, s, request, false);
        w.on_request_body(&host, s, request, body.len() as u64, true, |n| Some(body[..n as usize].to_vec()));
    };
    // Its stream gone before the answer.
    send(&mut w, 1, &chat());
    w.on_stream_end(&host, 1);
    w.on_answer(&host, host.token(0), marked(670_000, NOW, 67));
    assert!(host.body(1).contains(&format!("/f/67/{NOW}%3A67/")), "{}", host.body(1));
    w.on_answer(&host, host.token(1), ints(&[1, 0, 0, 0]));
    // Refused by another rule after the bucket took it.
    send(&mut w, 2, &chat().with("x-team", "t"));
    let mut answer = vec![1, 1_340_000, NOW as i64, 134];
    answer.extend([0, 0, 60_000, 60_000]);
    w.on_answer(&host, host.token(2), ints(&answer));
    assert_eq!(host.replied.borrow()[0].1.status, 429);
    assert!(host.body(3).contains(&format!("/f/67/{NOW}%3A134/")), "{}", host.body(3));
}
