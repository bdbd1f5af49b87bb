//! Charges after the response: merged per client while they wait, and
//! never lost without a count and a log line.

use super::*;

const LLM: &str = r#"{"name":"llm","key":["header:x-user"],"cost":{"response_header":"x-usage","default":1,"max":1000},
    "limits":[{"algorithm":"fixed_window","limit":1000000,"window":"1h"}]}"#;

/// A response reporting `usage` in `x-usage`.
struct Usage(&'static str);

impl ResponseSource for Usage {
    fn header(&self, name: &str) -> Option<Vec<u8>> {
        (name == "x-usage").then(|| self.0.as_bytes().to_vec())
    }
}

/// Streams 1..=n of client "a", all admitted; every call sent so far
/// answered (their count is the index of the next call).
fn admitted(host: &FakeHost, n: u32) -> (Worker, usize) {
    let config = config(r#","batch":{"max_in_flight":1,"max_decisions":256},"circuit_breaker":{"failures":1000}"#, LLM);
    let mut w = Worker::new(config, Instant::from_ms(NOW));
    for s in 1..=n {
        w.on_request(host, s, &user("/", "a"));
    }
    // The webdis body bound splits them over several calls.
    let mut call = 0;
    while host.resumed.borrow().len() < n as usize {
        w.on_answer(host, host.token(call), ints(&ALLOW.repeat(host.decisions_in(call))));
        call += 1;
    }
    (w, call)
}

#[test]
#[wasm_bindgen_test]
fn a_burst_of_answers_from_one_client_waits_as_one_charge_of_their_sum() {
    let host = FakeHost::new();
    let (mut w, k) = admitted(&host, 101);
    w.on_response_headers(&host, 1, &Usage("7"), true);
    assert!(host.access_log.borrow().contains(&(1, "ratelimit_charge", "7".into())), "told the access log");
    assert_eq!(host.sent.borrow().len(), k + 1, "the first charge goes at once");
    assert!(host.body(k).contains("/g/7/0/"), "{}", host.body(k));
    for s in 2..=100 {
        w.on_response_headers(&host, s, &Usage("7"), true);
    }
    assert_eq!(
        w.sizes(),
        (1, 1, 1),
        "99 answers wait as one entry behind the call in flight (stream 101 waits for its response)"
    );
    w.on_answer(&host, host.token(k), ints(&ALLOW));
    assert_eq!(host.decisions_in(k + 1), 1);
    assert!(host.body(k + 1).contains("/g/693/0/"), "99 x 7 in one charge: {}", host.body(k + 1));
    // A charge arriving while that one is out starts a new entry.
    w.on_response_headers(&host, 101, &Usage("5"), true);
    assert_eq!(w.sizes().1, 1);
    w.on_answer(&host, host.token(k + 1), ints(&ALLOW));
    assert!(host.body(k + 2).contains("/g/5/0/"), "{}", host.body(k + 2));
    assert_eq!((host.metrics.get(0, Event::Charged), host.metrics.get(0, Event::ChargedUnits)), (101, 705));
    assert_eq!(host.metrics.get(0, Event::ChargeFailed), 0);
}

#[test]
#[wasm_bindgen_test]
fn a_merged_charge_the_store_refuses_is_counted_per_answer_and_logged_with_its_units() {
    let host = FakeHost::new();
    let (mut w, k) = admitted(&host, 10);
    for s in 1..=10 {
        w.on_response_headers(&host, s, &Usage("30"), true);
    }
    w.on_answer(&host, host.token(k), Answer::Http { status: Some(503), body: Vec::new() });
    assert_eq!(host.metrics.get(0, Event::ChargeFailed), 1);
    w.on_answer(&host, host.token(k + 1), Answer::Http { status: Some(503), body: Vec::new() });
    assert_eq!(host.metrics.get(0, Event::ChargeFailed), 10, "one per answer charged");
    assert_eq!(
        *host.warnings.borrow(),
        [
            "ratelimit: store answered HTTP 503 (1 store errors on this worker since the last such line)",
            "ratelimit: 1 charges (30 units) could not be stored since the last such line (store answered HTTP 503); they were counted in the local fallback bucket",
        ]
    );
    // The timer logs the rest once the interval has passed.
    host.now.set(NOW + incidents::LOG_INTERVAL_MS);
    w.on_tick(&host);
    assert_eq!(
        host.warnings.borrow()[2..],
        [
            "ratelimit: store answered HTTP 503 (1 store errors on this worker since the last such line)",
            "ratelimit: 9 charges (270 units) could not be stored since the last such line (store answered HTTP 503); they were counted in the local fallback bucket",
        ]
    );
}

#[test]
#[wasm_bindgen_test]
fn decisions_overdue_in_a_burst_go_out_in_at_most_max_flights_calls() {
    let host = FakeHost::new();
    let config = config(r#","timeout_ms":200,"batch":{"max_in_flight":1,"max_decisions":1}"#, LLM);
    let mut w = Worker::new(config, Instant::from_ms(NOW));
    for s in 0..200 {
        w.on_request(&host, s, &user("/", &format!("u{s}")));
    }
    host.now.set(NOW + 50);
    w.on_tick(&host);
    assert_eq!(w.sizes().0, MAX_FLIGHTS, "past max_in_flight, up to MAX_FLIGHTS");
    assert_eq!(w.sizes().1, 200 - MAX_FLIGHTS);
}
