use std::cell::{Cell, RefCell};

use super::*;
use crate::metrics::fake::FakeMetrics;
use crate::metrics::{Event, Metrics};
use crate::request::fake::FakeRequest;
use crate::response::LocalReply;
use crate::shared::fake::FakeShared;
use crate::shared::SharedData;
use crate::store::transport::{Answer, Wire};
use wasm_bindgen_test::wasm_bindgen_test;

const NOW: u64 = 1_700_000_000_000;

/// A host that records what the worker asks of it.
#[derive(Default)]
struct FakeHost {
    now: Cell<u64>,
    shared: FakeShared,
    metrics: FakeMetrics,
    next_token: Cell<u32>,
    sent: RefCell<Vec<(u32, Wire)>>,
    fail_send: Cell<bool>,
    resumed: RefCell<Vec<u32>>,
    request_headers: RefCell<Vec<(String, String)>>,
    request_bodies: RefCell<Vec<(u64, Vec<u8>)>>,
    replied: RefCell<Vec<(u32, LocalReply)>>,
    /// The access log's fields, by stream, in the order written.
    access_log: RefCell<Vec<(u32, &'static str, String)>>,
    warnings: RefCell<Vec<String>>,
    calls: Cell<usize>,
    random: Cell<u64>,
}

impl SharedData for FakeHost {
    fn get(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        self.shared.get(key)
    }
    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        self.shared.set(key, value, cas)
    }
}

impl Metrics for FakeHost {
    fn count(&self, rule: usize, event: Event) {
        self.metrics.count(rule, event);
    }
    fn count_by(&self, rule: usize, event: Event, n: u64) {
        self.metrics.count_by(rule, event, n);
    }
    fn store_call(&self, _decisions: usize) {
        self.calls.set(self.calls.get() + 1);
    }
}

impl Host for FakeHost {
    fn now(&self) -> Instant {
        Instant::from_ms(self.now.get())
    }
    fn random(&self) -> u64 {
        // A new number per request: concurrency permit ids differ.
        self.random.set(self.random.get() + 1);
        self.random.get()
    }
    fn send(&self, wire: &Wire, _reinit: bool) -> Result<u32, StoreError> {
        if self.fail_send.get() {
            return Err(StoreError::Dispatch);
        }
        let token = self.next_token.get() + 4;
        self.next_token.set(token);
        self.sent.borrow_mut().push((token, wire.clone()));
        Ok(token)
    }
    fn set_request_header(&self, name: &str, value: &str) {
        self.request_headers.borrow_mut().push((name.to_string(), value.to_string()));
    }
    fn replace_request_body(&self, len: u64, body: &[u8]) -> bool {
        self.request_bodies.borrow_mut().push((len, body.to_vec()));
        true
    }
    fn resume(&self, stream: u32, log: &[access_log::Field]) {
        self.annotate(stream, log);
        self.resumed.borrow_mut().push(stream);
    }
    fn reply(&self, stream: u32, reply: &LocalReply, log: &[access_log::Field]) {
        self.annotate(stream, log);
        self.replied.borrow_mut().push((stream, reply.clone()));
    }
    fn warn(&self, message: &str) {
        self.warnings.borrow_mut().push(message.to_string());
    }
    fn annotate(&self, stream: u32, fields: &[access_log::Field]) {
        let mut log = self.access_log.borrow_mut();
        log.extend(fields.iter().map(|(n, v)| (stream, *n, v.clone())));
    }
}

impl FakeHost {
    fn new() -> FakeHost {
        let h = FakeHost::default();
        h.now.set(NOW);
        h
    }

    /// The body of the n-th call sent, as text.
    fn body(&self, n: usize) -> String {
        match &self.sent.borrow()[n].1 {
            Wire::Http { body, .. } => String::from_utf8(body.clone()).unwrap(),
            Wire::Resp(b) => String::from_utf8(b.clone()).unwrap(),
        }
    }

    fn token(&self, n: usize) -> u32 {
        self.sent.borrow()[n].0
    }

    /// How many decisions the n-th EVALSHA carries (ARGV after the spec
    /// and shape tables).
    fn decisions_in(&self, n: usize) -> usize {
        let body = self.body(n);
        let parts: Vec<&str> = body.split('/').collect();
        let keys: usize = parts[2].parse().unwrap();
        let argv = &parts[3 + keys..];
        let specs: usize = argv[1].parse().unwrap();
        let mut at = 2 + specs * 4;
        let shapes: usize = argv[at].parse().unwrap();
        at += 1;
        for _ in 0..shapes {
            let limits: usize = argv[at].parse().unwrap();
            at += 1 + limits * 4;
        }
        argv[at].parse().unwrap()
    }
}

/// How user `u`'s hash tag appears in a webdis body (a header identity is
/// written as its digest).
fn tag(u: &str) -> String {
    format!("%7B{}%7D", crate::identity::digest(u))
}

/// A response without headers.
struct NoHeaders;

impl ResponseSource for NoHeaders {
    fn header(&self, _name: &str) -> Option<Vec<u8>> {
        None
    }
}

fn config(extra_store: &str, rules: &str) -> Config {
    let json = format!(r#"{{"domain":"t","store":{{"cluster":"s"{extra_store}}},"rules":[{rules}]}}"#);
    Config::parse(json.as_bytes()).unwrap()
}

const API: &str = r#"{"name":"api","match":{"path_prefix":"/api"},"key":["header:x-user"],"limits":[{"algorithm":"fixed_window","limit":3,"window":"1m"}]}"#;
const LOGIN: &str = r#"{"name":"login","match":{"path_prefix":"/login"},"key":["header:x-user"],"failure_mode":"closed","limits":[{"algorithm":"fixed_window","limit":3,"window":"1m"}]}"#;

fn user(path: &str, u: &str) -> FakeRequest {
    FakeRequest::new("GET", path).with("x-user", u)
}

/// webdis's answer with these integers.
fn ints(values: &[i64]) -> Answer {
    let list: Vec<String> = values.iter().map(i64::to_string).collect();
    Answer::Http { status: Some(200), body: format!(r#"{{"EVALSHA":[{}]}}"#, list.join(",")).into_bytes() }
}

const ALLOW: [i64; 4] = [1, 2, 60_000, 0];
const DENY: [i64; 4] = [0, 0, 60_000, 5_000];

#[test]
#[wasm_bindgen_test]
fn a_decision_goes_at_once_and_its_answer_resumes_the_request_with_headers() {
    let host = FakeHost::new();
    let mut w = Worker::new(config("", API), Instant::from_ms(NOW));
    assert_eq!(w.on_request(&host, 2, &user("/api", "a")), Action::Pause);
    assert_eq!(host.sent.borrow().len(), 1);
    w.on_answer(&host, host.token(0), ints(&ALLOW));
    assert_eq!(*host.resumed.borrow(), [2]);
    let headers = w.on_response_headers(&host, 2, &NoHeaders, false);
    assert!(headers.contains(&("x-ratelimit-remaining", "2".into())), "{headers:?}");
    assert_eq!(w.sizes(), (0, 0, 0), "nothing left behind");
}

#[test]
#[wasm_bindgen_test]
fn the_access_log_is_told_each_requests_decision_on_its_own_stream() {
    let host = FakeHost::new();
    let mut w = Worker::new(config("", API), Instant::from_ms(NOW));
    w.on_request(&host, 2, &user("/api", "a"));
    w.on_request(&host, 3, &user("/api", "b"));
    assert!(host.access_log.borrow().is_empty(), "nothing before the decision");
    assert_eq!(host.sent.borrow().len(), 2, "a call each");
    w.on_answer(&host, host.token(0), ints(&ALLOW));
    w.on_answer(&host, host.token(1), ints(&DENY));
    let log = host.access_log.borrow().clone();
    let of = |stream: u32| -> Vec<(&str, String)> {
        log.iter().filter(|(s, _, _)| *s == stream).map(|(_, n, v)| (*n, v.clone())).collect()
    };
    assert_eq!(
        of(2),
        [
            ("ratelimit_rule", "api".to_string()),
            ("ratelimit_limit", "3/1m".into()),
            ("ratelimit_remaining", "2".into()),
            ("ratelimit_decided_by", "store".into()),
        ]
    );
    assert_eq!(
        of(3),
        [
            ("ratelimit_rule", "api".to_string()),
            ("ratelimit_limit", "3/1m".into()),
            ("ratelimit_remaining", "0".into()),
            ("ratelimit_decided_by", "store".into()),
            ("ratelimit_retry_after", "5".into()),
        ]
    );
    // The next of b's is answered from the cache in its own callback.
    host.access_log.borrow_mut().clear();
    assert_eq!(w.on_request(&host, 4, &user("/api", "b")), Action::Pause);
    assert!(host.access_log.borrow().contains(&(4, "ratelimit_decided_by", "deny_cache".into())));
    // A request no rule applies to is told nothing.
    host.access_log.borrow_mut().clear();
    assert_eq!(w.on_request(&host, 5, &user("/static", "a")), Action::Continue);
    assert!(host.access_log.borrow().is_empty());
}

#[test]
#[wasm_bindgen_test]
fn decisions_arriving_while_every_call_is_out_leave_together_in_arrival_order() {
    let host = FakeHost::new();
    let mut w = Worker::new(config(r#","batch":{"max_in_flight":1,"max_decisions":8}"#, API), Instant::from_ms(NOW));
    w.on_request(&host, 2, &user("/api", "a"));
    w.on_request(&host, 3, &user("/api", "b"));
    w.on_request(&host, 4, &user("/api", "a"));
    assert_eq!(host.sent.borrow().len(), 1, "one call in flight: the others wait");
    assert_eq!(w.sizes(), (1, 2, 3));
    w.on_answer(&host, host.token(0), ints(&ALLOW));
    assert_eq!(host.sent.borrow().len(), 2);
    assert_eq!(host.decisions_in(1), 2, "the two waiting decisions share one call");
    let body = host.body(1);
    let b = body.find(&tag("b")).unwrap();
    let a = body.find(&tag("a")).unwrap();
    assert!(b < a, "arrival order: b, then a");
    // b allowed, a (its second request) denied: each request gets its own verdict.
    let mut both = ALLOW.to_vec();
    both.extend(DENY);
    w.on_answer(&host, host.token(1), ints(&both));
    assert_eq!(*host.resumed.borrow(), [2, 3]);
    let replied = host.replied.borrow();
    assert_eq!((replied[0].0, replied[0].1.status), (4, 429));
    assert_eq!(w.sizes(), (0, 0, 2), "two streams wait for their response headers");
}

#[test]
#[wasm_bindgen_test]
fn one_call_carries_at_most_max_decisions() {
    let host = FakeHost::new();
    let mut w = Worker::new(config(r#","batch":{"max_in_flight":1,"max_decisions":2}"#, API), Instant::from_ms(NOW));
    for s in 0..6 {
        w.on_request(&host, 10 + s, &user("/api", &format!("u{s}")));
    }
    w.on_answer(&host, host.token(0), ints(&ALLOW));
    assert_eq!(host.decisions_in(1), 2);
    w.on_answer(&host, host.token(1), ints(&[ALLOW, ALLOW].concat()));
    assert_eq!(host.decisions_in(2), 2);
    w.on_answer(&host, host.token(2), ints(&[ALLOW, ALLOW].concat()));
    assert_eq!(host.decisions_in(3), 1);
}

#[test]
#[wasm_bindgen_test]
fn a_cluster_call_carries_decisions_of_one_slot_only() {
    let host = FakeHost::new();
    let mut w = Worker::new(config(r#","redis_cluster":true,"batch":{"max_in_flight":1}"#, API), Instant::from_ms(NOW));
    w.on_request(&host, 1, &user("/api", "first"));
    for (s, u) in [(2, "a"), (3, "b"), (4, "a"), (5, "b")] {
        w.on_request(&host, s, &user("/api", u));
    }
    assert_ne!(
        crate::keys::cluster_slot(&crate::identity::digest("a")),
        crate::keys::cluster_slot(&crate::identity::digest("b"))
    );
    w.on_answer(&host, host.token(0), ints(&ALLOW));
    assert_eq!(host.decisions_in(1), 2);
    assert!(!host.body(1).contains(&tag("b")), "a's call permits no key of b");
    w.on_answer(&host, host.token(1), ints(&[ALLOW, ALLOW].concat()));
    assert_eq!(host.decisions_in(2), 2);
    assert!(!host.body(2).contains(&tag("a")));
}

#[test]
#[wasm_bindgen_test]
fn noscript_loads_the_script_and_resends_the_same_batch_once() {
    let host = FakeHost::new();
    let mut w = Worker::new(config(r#","batch":{"max_in_flight":1}"#, API), Instant::from_ms(NOW));
    w.on_request(&host, 1, &user("/api", "a"));
    w.on_request(&host, 2, &user("/api", "b"));
    w.on_request(&host, 3, &user("/api", "c"));
    w.on_answer(&host, host.token(0), ints(&ALLOW));
    let noscript = br#"{"EVALSHA":[false,"NOSCRIPT No matching script. Please use EVAL."]}"#.to_vec();
    w.on_answer(&host, host.token(1), Answer::Http { status: Some(200), body: noscript });
    assert!(matches!(&host.sent.borrow()[2].1, Wire::Http { method: "PUT", path: "/SCRIPT/LOAD", .. }));
    let loaded = format!(r#"{{"SCRIPT":"{}"}}"#, crate::script::sha1_hex()).into_bytes();
    w.on_answer(&host, host.token(2), Answer::Http { status: Some(200), body: loaded });
    assert_eq!(host.body(3), host.body(1), "the same batch again");
    w.on_answer(&host, host.token(3), ints(&[ALLOW, ALLOW].concat()));
    assert_eq!(*host.resumed.borrow(), [1, 2, 3]);
}

#[test]
#[wasm_bindgen_test]
fn a_failed_batch_sends_each_decision_to_its_own_rules_policy_and_counts_once() {
    let host = FakeHost::new();
    let mut w =
        Worker::new(config(r#","batch":{"max_in_flight":1}"#, &format!("{API},{LOGIN}")), Instant::from_ms(NOW));
    w.on_request(&host, 1, &user("/api", "first"));
    w.on_request(&host, 2, &user("/api", "a"));
    w.on_request(&host, 3, &user("/login", "b"));
    w.on_answer(&host, host.token(0), ints(&ALLOW));
    w.on_answer(&host, host.token(1), Answer::Http { status: Some(504), body: b"upstream request timeout".to_vec() });
    assert_eq!(*host.resumed.borrow(), [1, 2], "open: the fallback admits");
    let replied = host.replied.borrow();
    assert_eq!((replied[0].0, replied[0].1.status), (3, 503), "closed: 503");
    assert_eq!(host.metrics.get(0, Event::FallbackAllowed), 1);
    assert_eq!(host.metrics.get(1, Event::FailClosed), 1);
    let breaker = host.shared.get("ratelimit.breaker").map(|(b, _)| crate::shared::read_u64s::<4>(&b).unwrap());
    assert_eq!(breaker.unwrap()[0], 1, "one failed call, one failure");
}

#[test]
#[wasm_bindgen_test]
fn a_stream_gone_before_its_batch_returns_leaves_the_others_untouched() {
    let host = FakeHost::new();
    let mut w = Worker::new(config(r#","batch":{"max_in_flight":1}"#, API), Instant::from_ms(NOW));
    w.on_request(&host, 1, &user("/api", "first"));
    w.on_request(&host, 2, &user("/api", "a"));
    w.on_request(&host, 3, &user("/api", "b"));
    w.on_answer(&host, host.token(0), ints(&ALLOW));
    w.on_stream_end(&host, 2);
    w.on_answer(&host, host.token(1), ints(&[ALLOW, ALLOW].concat()));
    assert_eq!(*host.resumed.borrow(), [1, 3]);
    // Gone while still queued: it never reaches a call.
    w.on_request(&host, 4, &user("/api", "c"));
    w.on_request(&host, 5, &user("/api", "d"));
    w.on_request(&host, 6, &user("/api", "e"));
    w.on_stream_end(&host, 5);
    w.on_answer(&host, host.token(2), ints(&ALLOW));
    assert_eq!(host.decisions_in(3), 1);
    assert!(host.body(3).contains(&tag("e")));
}

#[test]
#[wasm_bindgen_test]
fn a_host_that_never_answers_holds_no_request_and_no_memory() {
    let host = FakeHost::new();
    let mut w = Worker::new(config(r#","timeout_ms":25,"batch":{"max_in_flight":1}"#, API), Instant::from_ms(NOW));
    w.on_request(&host, 1, &user("/api", "a"));
    w.on_request(&host, 2, &user("/api", "b"));
    host.now.set(NOW + 25 + UNANSWERED_GRACE_MS);
    w.on_tick(&host);
    assert!(host.resumed.borrow().is_empty(), "not before timeout + grace");
    host.now.set(NOW + 26 + UNANSWERED_GRACE_MS);
    w.on_tick(&host);
    assert_eq!(*host.resumed.borrow(), [1], "the unanswered call's decision falls back (open)");
    // The queued decision went out in its own call when the first was given up.
    assert_eq!(host.sent.borrow().iter().filter(|(_, w)| matches!(w, Wire::Http { path: "/", .. })).count(), 2);
    // A late answer to the swept call changes nothing.
    w.on_answer(&host, host.token(0), ints(&DENY));
    assert_eq!(host.replied.borrow().len(), 0);
}

#[test]
#[wasm_bindgen_test]
fn unknown_tokens_and_answers_of_the_wrong_size_are_harmless() {
    let host = FakeHost::new();
    let mut w = Worker::new(config("", API), Instant::from_ms(NOW));
    w.on_answer(&host, 12345, ints(&ALLOW));
    w.on_request(&host, 1, &user("/api", "a"));
    w.on_answer(&host, host.token(0), ints(&[1, 2, 3]));
    assert_eq!(*host.resumed.borrow(), [1], "malformed: the open rule's fallback admits");
    assert_eq!(host.metrics.get(0, Event::StoreError), 1);
}

#[test]
#[wasm_bindgen_test]
fn the_deny_cache_answers_before_anything_is_queued() {
    let host = FakeHost::new();
    let mut w = Worker::new(config("", API), Instant::from_ms(NOW));
    w.on_request(&host, 1, &user("/api", "a"));
    w.on_answer(&host, host.token(0), ints(&DENY));
    assert_eq!(w.on_request(&host, 2, &user("/api", "a")), Action::Pause);
    assert_eq!(host.sent.borrow().len(), 1, "no store call");
    assert_eq!(host.replied.borrow().len(), 2);
    assert_eq!(w.sizes(), (0, 0, 0));
}

#[test]
#[wasm_bindgen_test]
fn a_call_that_cannot_be_sent_decides_the_request_at_once() {
    let host = FakeHost::new();
    host.fail_send.set(true);
    let mut w = Worker::new(config("", LOGIN), Instant::from_ms(NOW));
    assert_eq!(w.on_request(&host, 1, &user("/login", "a")), Action::Pause);
    assert_eq!(host.replied.borrow()[0].1.status, 503);
    let mut w = Worker::new(config("", API), Instant::from_ms(NOW));
    assert_eq!(w.on_request(&host, 2, &user("/api", "a")), Action::Continue, "open: the fallback admits now");
    assert!(host.resumed.borrow().is_empty(), "continued, not resumed");
}

#[test]
#[wasm_bindgen_test]
fn the_queue_is_bounded_and_a_decision_over_it_is_overloaded_not_a_store_error() {
    let host = FakeHost::new();
    let mut w = Worker::new(config(r#","batch":{"max_in_flight":1}"#, LOGIN), Instant::from_ms(NOW));
    for s in 0..(MAX_QUEUED as u32 + 2) {
        w.on_request(&host, s, &user("/login", "u"));
    }
    assert_eq!(w.sizes().1, MAX_QUEUED);
    let replied = host.replied.borrow();
    assert_eq!(replied.len(), 1, "the one over the bound follows its rule's policy at once");
    assert_eq!(replied[0].1.status, 503);
    assert_eq!(host.metrics.get(0, Event::Overloaded), 1);
    assert_eq!(host.metrics.get(0, Event::StoreError), 0);
    assert_eq!(
        *host.warnings.borrow(),
        ["ratelimit: 1 decisions refused since the last such line: 65536 decisions already wait for the store on this worker; their rules' failure policies applied"]
    );
}

#[test]
#[wasm_bindgen_test]
fn store_errors_are_logged_once_per_interval_with_a_count() {
    let host = FakeHost::new();
    let mut w = Worker::new(config(r#","circuit_breaker":{"failures":1000}"#, API), Instant::from_ms(NOW));
    for s in 0..5 {
        w.on_request(&host, s, &user("/api", "a"));
        w.on_answer(&host, host.token(s as usize), Answer::Http { status: Some(503), body: Vec::new() });
    }
    assert_eq!(host.warnings.borrow().len(), 1);
    host.now.set(NOW + incidents::LOG_INTERVAL_MS);
    w.on_request(&host, 9, &user("/api", "a"));
    w.on_answer(&host, host.token(5), Answer::Http { status: Some(503), body: Vec::new() });
    assert_eq!(
        host.warnings.borrow()[1],
        "ratelimit: store answered HTTP 503 (5 store errors on this worker since the last such line)"
    );
}

#[test]
#[wasm_bindgen_test]
fn a_decision_waits_for_a_call_slot_a_quarter_of_a_timeout_at_most() {
    let host = FakeHost::new();
    let mut w = Worker::new(
        config(r#","timeout_ms":200,"batch":{"max_in_flight":1},"stats_interval":"1h""#, API),
        Instant::from_ms(NOW),
    );
    assert_eq!(w.tick_period_ms(), 3_600_000, "nothing waits: the INFO interval");
    w.on_request(&host, 1, &user("/api", "a"));
    w.on_request(&host, 2, &user("/api", "b"));
    assert_eq!(w.tick_period_ms(), 10, "a decision waits: ticks at a fifth of its longest wait");
    host.now.set(NOW + 49);
    w.on_tick(&host);
    let evalshas = || host.sent.borrow().iter().filter(|(_, w)| matches!(w, Wire::Http { path: "/", .. })).count();
    assert_eq!(evalshas(), 1, "the slot may still free up");
    host.now.set(NOW + 50);
    w.on_tick(&host);
    assert_eq!(evalshas(), 2, "sent in a call of its own, past the in-flight bound");
    assert_eq!(w.tick_period_ms(), 3_600_000);
    let tokens: Vec<u32> =
        host.sent.borrow().iter().filter(|(_, w)| matches!(w, Wire::Http { path: "/", .. })).map(|(t, _)| *t).collect();
    w.on_answer(&host, tokens[1], ints(&ALLOW));
    w.on_answer(&host, tokens[0], ints(&ALLOW));
    assert_eq!(*host.resumed.borrow(), [2, 1]);
}

/// webdis's answer with these values: numbers as they are, anything else
/// as a JSON string (a decision that failed inside Redis).
fn values(items: &[&str]) -> Answer {
    let list: Vec<String> =
        items.iter().map(|v| if v.parse::<i64>().is_ok() { v.to_string() } else { format!("\"{v}\"") }).collect();
    Answer::Http { status: Some(200), body: format!(r#"{{"EVALSHA":[{}]}}"#, list.join(",")).into_bytes() }
}

/// webdis's answer carrying a Redis error reply for the whole call.
fn redis_error(message: &str) -> Answer {
    Answer::Http { status: Some(200), body: format!(r#"{{"EVALSHA":[false,"{message}"]}}"#).into_bytes() }
}

/// A breaker record from shared data: (failures, open until).
fn breaker_record(host: &FakeHost, key: &str) -> Option<[u64; 4]> {
    host.shared.get(key).map(|(b, _)| crate::shared::read_u64s::<4>(&b).unwrap())
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[test]
#[wasm_bindgen_test]
fn a_decision_that_failed_inside_redis_follows_its_own_rules_policy_and_the_others_are_decided() {
    let host = FakeHost::new();
    let mut w =
        Worker::new(config(r#","batch":{"max_in_flight":1}"#, &format!("{API},{LOGIN}")), Instant::from_ms(NOW));
    w.on_request(&host, 1, &user("/api", "first"));
    w.on_request(&host, 2, &user("/login", "b"));
    w.on_request(&host, 3, &user("/api", "a"));
    w.on_request(&host, 4, &user("/api", "c"));
    w.on_answer(&host, host.token(0), ints(&ALLOW));
    assert_eq!(host.decisions_in(1), 3);
    // b's decision failed inside Redis; a's and c's were decided by the store.
    w.on_answer(
        &host,
        host.token(1),
        values(&[WRONGTYPE, "0", "0", "0", "1", "2", "60000", "0", "0", "0", "60000", "5000"]),
    );
    let replied = host.replied.borrow();
    assert_eq!((replied[0].0, replied[0].1.status), (2, 503), "closed: b alone fails closed");
    assert_eq!((replied[1].0, replied[1].1.status), (4, 429), "c is denied by the store");
    assert_eq!(*host.resumed.borrow(), [1, 3]);
    let headers = w.on_response_headers(&host, 3, &NoHeaders, false);
    assert!(headers.contains(&("x-ratelimit-remaining", "2".into())), "a decided by the store: {headers:?}");
    assert_eq!(host.metrics.get(1, Event::FailClosed), 1);
    assert_eq!(host.metrics.get(1, Event::StoreError), 1);
    assert_eq!(host.metrics.get(0, Event::StoreError), 0);
    assert_eq!(host.metrics.get(0, Event::FallbackAllowed), 0);
    assert_eq!(
        *host.warnings.borrow(),
        [format!("ratelimit: redis error: {WRONGTYPE} (1 store errors on this worker since the last such line)")]
    );
    // The breakers: a key failure of b's slot only; the store answered.
    let slot_key = |u: &str| {
        crate::breaker::slot_key(&w.config.store.breaker, crate::keys::cluster_slot(&crate::identity::digest(u)))
    };
    let b = slot_key("b");
    assert_eq!(breaker_record(&host, &b).map(|r| r[0]), Some(1), "b's slot counts one failure");
    for other in ["a", "c"] {
        let key = slot_key(other);
        assert_ne!(key, b, "{other} is in another range of hash slots");
        assert_eq!(breaker_record(&host, &key).map_or(0, |r| r[0]), 0, "{other}'s slot");
    }
    assert_eq!(breaker_record(&host, "ratelimit.breaker").map_or(0, |r| r[0]), 0, "the store breaker");
}

#[test]
#[wasm_bindgen_test]
fn crossslot_splits_the_call_by_slot_once_and_the_worker_batches_one_slot_from_then_on() {
    let host = FakeHost::new();
    let mut w = Worker::new(config(r#","batch":{"max_in_flight":1}"#, API), Instant::from_ms(NOW));
    assert_ne!(
        crate::keys::cluster_slot(&crate::identity::digest("a")),
        crate::keys::cluster_slot(&crate::identity::digest("b"))
    );
    w.on_request(&host, 1, &user("/api", "first"));
    for (s, u) in [(2, "a"), (3, "b"), (4, "a")] {
        w.on_request(&host, s, &user("/api", u));
    }
    w.on_answer(&host, host.token(0), ints(&ALLOW));
    assert_eq!(host.decisions_in(1), 3, "flag off: one call for both slots");
    w.on_answer(&host, host.token(1), redis_error("CROSSSLOT Keys in request don't hash to the same slot"));
    assert_eq!(
        *host.warnings.borrow(),
        ["ratelimit: the store is a Redis Cluster (CROSSSLOT): batching one hash slot per call from now on; set store.redis_cluster: true"]
    );
    // Resent at once, a's slot first (the oldest decision), b's after it.
    assert_eq!(host.decisions_in(2), 2);
    assert!(!host.body(2).contains(&tag("b")));
    w.on_answer(&host, host.token(2), ints(&[ALLOW, ALLOW].concat()));
    assert_eq!(host.decisions_in(3), 1);
    assert!(host.body(3).contains(&tag("b")));
    w.on_answer(&host, host.token(3), ints(&ALLOW));
    assert_eq!(*host.resumed.borrow(), [1, 2, 4, 3], "every decision decided by the store");
    assert_eq!(host.metrics.get(0, Event::StoreError), 0);
    assert!(breaker_record(&host, "ratelimit.breaker").is_none_or(|r| r[0] == 0));
    // From now on calls hold one slot: no CROSSSLOT to pay again.
    w.on_request(&host, 5, &user("/api", "c"));
    w.on_request(&host, 6, &user("/api", "a"));
    w.on_request(&host, 7, &user("/api", "c"));
    w.on_answer(&host, host.token(4), ints(&ALLOW));
    assert_eq!(host.decisions_in(5), 1, "a alone; c waits for a call of its slot");
    // A call of one slot that meets CROSSSLOT cannot be split: a store error.
    w.on_answer(&host, host.token(5), redis_error("CROSSSLOT Keys in request don't hash to the same slot"));
    assert_eq!(host.metrics.get(0, Event::StoreError), 1);
    assert_eq!(host.metrics.get(0, Event::FallbackAllowed), 1, "the open rule's fallback");
    let warnings = host.warnings.borrow();
    assert_eq!(warnings.len(), 2, "the cluster line once: {warnings:?}");
    assert!(warnings[1].starts_with("ratelimit: redis error: CROSSSLOT"), "{warnings:?}");
    assert_eq!(host.sent.borrow().len(), 7, "c's call, and nothing resent");
}

mod bodies;
mod charges;
#[cfg(not(target_arch = "wasm32"))]
mod lease_shares;
mod leases;
mod overrides;
mod pinned;
mod reservations;
mod slots;
mod stream_usage;
mod usage;
