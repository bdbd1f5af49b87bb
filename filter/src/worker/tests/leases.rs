//! Leases on one worker: a hot client's decision brings a lease decision
//! along; granted, the client's next requests are admitted in the proxy.

use super::*;
use crate::lease::HOT_AFTER;

const HOT: &str = r#"{"name":"hot","match":{"path_prefix":"/api"},"key":["header:x-user"],"fleet_size":2,
    "lease":{"max_units":10,"max_age":"1s"},
    "limits":[{"algorithm":"fixed_window","limit":1000,"window":"1m"},{"algorithm":"token_bucket","limit":100,"window":"1s"}]}"#;

/// An allowed limit with `remaining` left, resetting in `reset`.
fn allow(remaining: i64, reset: i64) -> [i64; 4] {
    [1, remaining, reset, 0]
}

/// A worker whose client "a" sent `n` requests, each decided by the store
/// (every call answered: both limits allowed, 900 and 90 left).
fn warmed(host: &FakeHost, n: u32) -> Worker {
    let mut w = Worker::new(config(r#","batch":{"max_in_flight":1}"#, HOT), Instant::from_ms(NOW));
    for s in 0..n {
        w.on_request(host, s, &user("/api", "a"));
        let call = host.sent.borrow().len() - 1;
        let decisions = host.decisions_in(call);
        w.on_answer(host, host.token(call), ints(&[allow(900, 30_000), allow(90, 100)].concat().repeat(decisions)));
    }
    w
}

/// The request after the one that made client "a" hot (stream 100), and
/// the store's answer to its call: the request's two limits, then the
/// lease's. (The hot request's own answer, 900 and 90 left, is the view
/// that sizes the ask: a share of what remains.)
fn hot_request_answered(host: &FakeHost, w: &mut Worker, lease: [[i64; 4]; 2]) -> usize {
    let call = host.sent.borrow().len();
    w.on_request(host, 100, &user("/api", "a"));
    w.on_answer(host, host.token(call), ints(&[allow(900, 30_000), allow(90, 100), lease[0], lease[1]].concat()));
    call
}

#[test]
#[wasm_bindgen_test]
fn a_hot_clients_decision_brings_a_lease_and_its_next_requests_need_no_store_call() {
    let host = FakeHost::new();
    let mut w = warmed(&host, HOT_AFTER as u32);
    let before = host.sent.borrow().len();
    assert_eq!(before, HOT_AFTER as usize, "one decision a call, no lease: cold, then hot with no view yet");
    // The next request: its decision, and a lease decision of min(heat
    // 5, max_units 10, 90 left / (2 x fleet of 2)) requests: 5 units of
    // each limit.
    w.on_request(&host, 100, &user("/api", "a"));
    assert_eq!(host.decisions_in(before), 2);
    assert!(host.body(before).contains("/u/5/0/"), "{}", host.body(before));
    w.on_answer(
        &host,
        host.token(before),
        ints(&[allow(900, 30_000), allow(90, 100), allow(895, 30_000), allow(85, 150)].concat()),
    );
    assert_eq!(host.metrics.get(0, Event::LeaseGranted), 1);
    // Five requests admitted in the proxy, with no call and no pause. The
    // tighter limit shows: the bucket, 85 left outside the lease plus what
    // the lease still holds after each request.
    for (s, remaining) in [(101, "89"), (102, "88"), (103, "87"), (104, "86"), (105, "85")] {
        assert_eq!(w.on_request(&host, s, &user("/api", "a")), Action::Continue);
        let headers = w.on_response_headers(&host, s, &NoHeaders, true);
        let field = |name: &str| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
        assert_eq!(field("x-ratelimit-limit").as_deref(), Some("100"));
        assert_eq!(field("x-ratelimit-remaining").as_deref(), Some(remaining));
        // Reset as the store said it at the grant (150 ms after it): 1 s rounded up.
        assert_eq!(field("ratelimit-reset").as_deref(), Some("1"));
    }
    assert_eq!(host.sent.borrow().len(), before + 1, "no store call");
    assert_eq!(host.metrics.get(0, Event::LeaseAllowed), 5);
    assert_eq!(host.metrics.get(0, Event::Allowed), HOT_AFTER + 6);
    // Spent: the next request goes to the store again (and asks anew).
    assert_eq!(w.on_request(&host, 106, &user("/api", "a")), Action::Pause);
    assert_eq!(host.sent.borrow().len(), before + 2);
}

#[test]
#[wasm_bindgen_test]
fn a_first_lease_is_capped_by_a_share_of_what_the_store_said_remains() {
    // Each of the first four requests answered with 8 left of the bucket.
    let host = FakeHost::new();
    let mut w = Worker::new(config(r#","batch":{"max_in_flight":1}"#, HOT), Instant::from_ms(NOW));
    for s in 0..HOT_AFTER as u32 {
        w.on_request(&host, s, &user("/api", "a"));
        let call = host.sent.borrow().len() - 1;
        assert_eq!(host.decisions_in(call), 1, "no view yet: no lease asked");
        w.on_answer(&host, host.token(call), ints(&[allow(900, 30_000), allow(8, 920)].concat()));
    }
    // Hot, and the last answer said 8 left: a fleet of 2 asks 8 / 4 = 2,
    // not min(heat 5, max_units 10) = 5, which would leave the other
    // proxy 3 of the 8.
    let call = host.sent.borrow().len();
    w.on_request(&host, 100, &user("/api", "a"));
    assert_eq!(host.decisions_in(call), 2);
    assert!(host.body(call).contains("/u/2/0/"), "{}", host.body(call));
}

#[test]
#[wasm_bindgen_test]
fn a_cold_client_of_a_leased_rule_reads_no_more_shared_data_than_without_leases() {
    let unleased = HOT.replace(r#""lease":{"max_units":10,"max_age":"1s"},"#, "");
    assert_ne!(unleased, HOT);
    let reads = |rule: &str| {
        let host = FakeHost::new();
        let mut w = Worker::new(config(r#","batch":{"max_in_flight":1}"#, rule), Instant::from_ms(NOW));
        for s in 0..HOT_AFTER as u32 - 1 {
            w.on_request(&host, s, &user("/api", "a"));
            let call = host.sent.borrow().len() - 1;
            assert_eq!(host.decisions_in(call), 1, "no lease asked");
            w.on_answer(&host, host.token(call), ints(&[allow(900, 30_000), allow(90, 100)].concat()));
        }
        host.shared.reads()
    };
    assert_eq!(reads(HOT), reads(&unleased));
}

#[test]
#[wasm_bindgen_test]
fn a_refused_lease_admits_nothing_and_the_request_stands_on_its_own_decision() {
    let host = FakeHost::new();
    let mut w = warmed(&host, HOT_AFTER as u32);
    // The request allowed; the lease does not fit the bucket.
    let call = hot_request_answered(&host, &mut w, [allow(896, 30_000), [0, 2, 100, 40]]);
    assert_eq!(*host.resumed.borrow().last().unwrap(), 100);
    assert_eq!(host.metrics.get(0, Event::LeaseGranted), 0);
    assert_eq!(w.on_request(&host, 101, &user("/api", "a")), Action::Pause, "decided by the store");
    // What the refusal said of the bucket (2 left, fleet of 2): no more asks.
    w.on_answer(&host, host.token(call + 1), ints(&[allow(899, 30_000), allow(1, 100)].concat()));
    assert_eq!(host.decisions_in(call + 1), 1);
}

#[test]
#[wasm_bindgen_test]
fn a_lease_in_hand_admits_while_the_store_is_down_and_an_expired_one_does_not() {
    let host = FakeHost::new();
    let mut w = warmed(&host, HOT_AFTER as u32);
    hot_request_answered(&host, &mut w, [allow(896, 30_000), allow(86, 140)]);
    host.fail_send.set(true);
    assert_eq!(w.on_request(&host, 101, &user("/api", "a")), Action::Continue, "paid for: admitted");
    // After max_age (1 s) the lease is gone: the store decides (it fails: open).
    host.now.set(NOW + 1_000);
    w.on_request(&host, 102, &user("/api", "a"));
    assert_eq!(host.metrics.get(0, Event::FallbackAllowed), 1);
}

#[test]
#[wasm_bindgen_test]
fn with_overrides_on_a_lease_ends_within_their_bound_of_its_ask() {
    const LONG: &str = r#"{"name":"hot","match":{"path_prefix":"/api"},"key":["header:x-user"],
        "lease":{"max_units":10,"max_age":"10s"},"limits":[{"algorithm":"fixed_window","limit":1000,"window":"1m"}]}"#;
    let host = FakeHost::new();
    let store = r#","batch":{"max_in_flight":1}},"overrides":{"within":"300ms""#;
    let mut w = Worker::new(config(store, LONG), Instant::from_ms(NOW));
    // Each decision reads overrides, none set: its reply as any.
    let none = |remaining| allow(remaining, 40_000).to_vec();
    for s in 0..HOT_AFTER as u32 {
        w.on_request(&host, s, &user("/api", "a"));
        let call = host.sent.borrow().len() - 1;
        w.on_answer(&host, host.token(call), ints(&none(900)));
    }
    let call = host.sent.borrow().len();
    w.on_request(&host, 100, &user("/api", "a"));
    assert_eq!(host.decisions_in(call), 2, "the request and its lease");
    w.on_answer(&host, host.token(call), ints(&[none(900), none(890)].concat()));
    assert_eq!(host.metrics.get(0, Event::LeaseGranted), 1);
    // Its window lasts 40 s more and max_age is 10 s: 300 ms is the end.
    host.now.set(NOW + 299);
    assert_eq!(w.on_request(&host, 101, &user("/api", "a")), Action::Continue, "from the lease");
    host.now.set(NOW + 300);
    let calls = host.sent.borrow().len();
    assert_eq!(w.on_request(&host, 102, &user("/api", "a")), Action::Pause, "the store again");
    assert_eq!(host.sent.borrow().len(), calls + 1);
}
