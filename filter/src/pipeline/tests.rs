use super::*;
use crate::config::Config;
use crate::metrics::fake::FakeMetrics;
use crate::request::fake::FakeRequest;
use crate::shared::fake::FakeShared;
use wasm_bindgen_test::wasm_bindgen_test;

const NOW: u64 = 1_700_000_000_000;

const CONFIG: &str = r#"{"domain":"shop","store":{"cluster":"s"},"rules":[
  {"name":"login","match":{"path_prefix":"/login"},"key":["client_ip"],"failure_mode":"closed",
   "limits":[{"algorithm":"sliding_log","limit":5,"window":"1h"}]},
  {"name":"api","match":{"path_prefix":"/api/"},"key":["header:x-api-key"],"fleet_size":2,
   "limits":[{"limit":10,"window":"1m"},{"algorithm":"fixed_window","limit":100,"window":"1d"}]},
  {"name":"api-ip","match":{"path_prefix":"/api/"},"key":["client_ip"],
   "limits":[{"algorithm":"token_bucket","limit":50,"window":"1s"}]},
  {"name":"api-all","match":{"path_prefix":"/api/"},"key":["header:x-api-key"],
   "limits":[{"algorithm":"gcra","limit":1000,"window":"1s","burst":100}]},
  {"name":"watch","match":{"path_prefix":"/watch"},"key":["client_ip"],"shadow":true,
   "limits":[{"algorithm":"fixed_window","limit":1,"window":"1m"}]}]}"#;

struct World {
    config: Config,
    shared: FakeShared,
    metrics: FakeMetrics,
}

impl World {
    fn new(json: &str) -> World {
        World {
            config: Config::parse(json.as_bytes()).unwrap(),
            shared: FakeShared::default(),
            metrics: FakeMetrics::default(),
        }
    }

    fn env(&self) -> Env<'_, FakeShared, FakeMetrics> {
        Env { config: &self.config, shared: &self.shared, metrics: &self.metrics }
    }

    fn begin(&self, req: &FakeRequest) -> Start {
        begin(&self.env(), req, || NOW)
    }

    /// Runs a request to its outcome, answering call `i` with `replies[i]`.
    fn run(&self, req: &FakeRequest, replies: &[Result<Vec<Decision>, StoreError>]) -> Outcome {
        match self.begin(req) {
            Start::Done(o) => o,
            Start::Wait(mut p) => {
                assert_eq!(p.calls.len(), replies.len(), "calls made");
                let mut out = None;
                for (i, r) in replies.iter().enumerate() {
                    out = p.on_reply(&self.env(), i, r.clone(), NOW);
                }
                out.expect("every call answered")
            }
        }
    }
}

fn allow(remaining: u64, reset_ms: u64) -> Decision {
    Decision { allowed: true, remaining, reset_ms, retry_after_ms: Some(0) }
}

fn deny(remaining: u64, reset_ms: u64, retry: u64) -> Decision {
    Decision { allowed: false, remaining, reset_ms, retry_after_ms: Some(retry) }
}

fn api(key: &str) -> FakeRequest {
    FakeRequest::new("GET", "/api/items").with("x-api-key", key)
}

fn header<'a>(o: &'a Outcome, name: &str) -> Option<&'a str> {
    let headers = match o {
        Outcome::Continue(h) => h,
        Outcome::Reply(r) => &r.headers,
    };
    headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
}

#[test]
#[wasm_bindgen_test]
fn a_request_no_rule_matches_passes_untouched() {
    let w = World::new(CONFIG);
    assert!(
        matches!(w.begin(&FakeRequest::new("GET", "/static/a.css")), Start::Done(Outcome::Continue(h)) if h.is_empty())
    );
}

#[test]
#[wasm_bindgen_test]
fn one_call_per_identity_covering_every_limit_of_its_rules() {
    let w = World::new(CONFIG);
    let Start::Wait(p) = w.begin(&api("k1")) else { panic!("expected calls") };
    assert_eq!(p.calls.len(), 2, "client_ip rules in one call, x-api-key rules in another");
    assert_eq!(p.calls[0].rules, [2]);
    assert_eq!(p.calls[0].script.keys, ["shop:{10.0.0.1}:api-ip:tb:1000"]);
    assert_eq!(p.calls[1].rules, [1, 3]);
    assert_eq!(
        p.calls[1].script.keys,
        [
            "shop:{k1}:api:sw:60000:28333333",
            "shop:{k1}:api:sw:60000:28333332",
            "shop:{k1}:api:fw:86400000:19675",
            "shop:{k1}:api-all:gc:1000",
        ]
    );
    assert_eq!(p.calls[1].script.decisions(), 1, "one decision covering the identity's three limits");
}

#[test]
#[wasm_bindgen_test]
fn allowed_requests_carry_the_most_restrictive_limits_headers() {
    let w = World::new(CONFIG);
    let out = w.run(&api("k1"), &[Ok(vec![allow(49, 20)]), Ok(vec![allow(9, 60_000), allow(99, 1000), allow(99, 10)])]);
    assert_eq!(
        out,
        Outcome::Continue(vec![
            ("x-ratelimit-limit", "10".into()),
            ("x-ratelimit-remaining", "9".into()),
            ("x-ratelimit-reset", "1700000060".into()),
            ("ratelimit-limit", "10".into()),
            ("ratelimit-remaining", "9".into()),
            ("ratelimit-reset", "60".into()),
        ])
    );
    assert_eq!(w.metrics.get(1, Event::Allowed), 1);
    assert_eq!(w.metrics.get(2, Event::Allowed), 1);
}

#[test]
#[wasm_bindgen_test]
fn a_denial_answers_429_and_the_next_request_comes_from_the_deny_cache() {
    let w = World::new(CONFIG);
    let out =
        w.run(&api("k1"), &[Ok(vec![allow(49, 20)]), Ok(vec![deny(0, 30_000, 2_500), allow(99, 1000), allow(99, 10)])]);
    let Outcome::Reply(r) = &out else { panic!("expected a 429") };
    assert_eq!(r.status, 429);
    assert_eq!(r.body, r#"{"error":"rate_limited","rule":"api","retry_after":3}"#);
    assert_eq!(header(&out, "retry-after"), Some("3"));
    assert_eq!(header(&out, "x-ratelimit-remaining"), Some("0"));
    assert_eq!(w.metrics.get(1, Event::Denied), 1);
    assert_eq!(w.metrics.get(3, Event::Allowed), 0, "a rule of a denied call spent nothing: not counted as allowed");

    // Same client: no store call at all.
    let Start::Done(Outcome::Reply(r)) = w.begin(&api("k1")) else { panic!("expected a cached 429") };
    assert_eq!(r.status, 429);
    assert_eq!(w.metrics.get(1, Event::DenyCacheHit), 1);
    // Another client is not affected.
    assert!(matches!(w.begin(&api("k2")), Start::Wait(_)));
    // At the retry instant the cache lets the store decide again.
    assert!(matches!(begin(&w.env(), &api("k1"), || NOW + 2_500), Start::Wait(_)));
}

#[test]
#[wasm_bindgen_test]
fn a_changed_limit_ignores_denials_cached_under_the_old_one() {
    let w = World::new(CONFIG);
    w.run(&api("k1"), &[Ok(vec![allow(49, 20)]), Ok(vec![deny(0, 30_000, 20_000), allow(9, 1), allow(9, 1)])]);
    let raised =
        World { config: Config::parse(CONFIG.replace("\"limit\":10,", "\"limit\":20,").as_bytes()).unwrap(), ..w };
    assert!(matches!(raised.begin(&api("k1")), Start::Wait(_)), "the raised limit is asked, not the stale denial");
}

#[test]
#[wasm_bindgen_test]
fn store_failure_fails_open_through_the_fallback_share() {
    let w = World::new(CONFIG);
    let err = || Err(StoreError::Status(503));
    // api: sliding 10/min with fleet_size 2 -> 5 per window on this proxy.
    let mut admitted = 0;
    for _ in 0..8 {
        if let Outcome::Continue(_) = w.run(&api("k1"), &[Ok(vec![allow(49, 20)]), err()]) {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 5);
    assert_eq!(w.metrics.get(1, Event::FallbackAllowed), 5);
    assert_eq!(w.metrics.get(1, Event::FallbackDenied), 3);
    assert_eq!(w.metrics.get(1, Event::StoreError), 8);
}

#[test]
#[wasm_bindgen_test]
fn store_failure_fails_closed_with_503_never_429() {
    let w = World::new(CONFIG);
    let out = w.run(&FakeRequest::new("POST", "/login"), &[Err(StoreError::Status(504))]);
    let Outcome::Reply(r) = out else { panic!("expected a 503") };
    assert_eq!((r.status, r.body.as_str()), (503, r#"{"error":"rate_limiter_unavailable"}"#));
    assert_eq!(w.metrics.get(0, Event::FailClosed), 1);
}

#[test]
#[wasm_bindgen_test]
fn a_real_denial_wins_over_a_fail_closed_failure() {
    let json = CONFIG.replace(
        r#""key":["client_ip"],"limits":[{"algorithm":"token_bucket""#,
        r#""key":["client_ip"],"failure_mode":"closed","limits":[{"algorithm":"token_bucket""#,
    );
    let w = World::new(&json);
    let out =
        w.run(&api("k1"), &[Err(StoreError::Status(503)), Ok(vec![deny(0, 1000, 900), allow(1, 1), allow(1, 1)])]);
    assert!(matches!(out, Outcome::Reply(ref r) if r.status == 429));
}

#[test]
#[wasm_bindgen_test]
fn three_failures_open_the_breaker_and_requests_stop_calling_the_store() {
    let w = World::new(CONFIG);
    for _ in 0..3 {
        w.run(&FakeRequest::new("POST", "/login"), &[Err(StoreError::Status(503))]);
    }
    let Start::Done(Outcome::Reply(r)) = w.begin(&FakeRequest::new("POST", "/login")) else {
        panic!("no call while open")
    };
    assert_eq!(r.status, 503);
    assert_eq!(w.metrics.get(0, Event::StoreError), 3, "no call, no new store error");
    assert_eq!(w.metrics.get(0, Event::FailClosed), 4);
    // 30 s later one probe goes through.
    assert!(matches!(begin(&w.env(), &FakeRequest::new("POST", "/login"), || NOW + 30_000), Start::Wait(_)));
}

#[test]
#[wasm_bindgen_test]
fn shadow_rules_count_would_be_denials_and_never_reject() {
    let w = World::new(CONFIG);
    let out = w.run(&FakeRequest::new("GET", "/watch"), &[Ok(vec![deny(0, 30_000, 30_000)])]);
    assert_eq!(header(&out, "x-ratelimit-remaining"), Some("0"));
    assert!(matches!(out, Outcome::Continue(_)));
    assert_eq!(w.metrics.get(4, Event::ShadowDenied), 1);
    // The cached would-be denial is counted again without a call.
    assert!(matches!(w.begin(&FakeRequest::new("GET", "/watch")), Start::Done(Outcome::Continue(_))));
    assert_eq!(w.metrics.get(4, Event::ShadowDenied), 2);
    assert_eq!(w.metrics.get(4, Event::DenyCacheHit), 1);
}

#[test]
#[wasm_bindgen_test]
fn headers_can_be_turned_off_but_retry_after_stays() {
    let w = World::new(&CONFIG.replace(r#""store""#, r#""response_headers":false,"store""#));
    let ok = w.run(&api("k1"), &[Ok(vec![allow(49, 20)]), Ok(vec![allow(9, 60_000), allow(99, 1000), allow(99, 10)])]);
    assert_eq!(ok, Outcome::Continue(vec![]));
    let Outcome::Reply(r) = w.run(&FakeRequest::new("POST", "/login"), &[Ok(vec![deny(0, 10, 1_001)])]) else {
        panic!()
    };
    assert_eq!(r.headers, vec![("content-type", "application/json".to_string()), ("retry-after", "2".to_string())]);
}

#[test]
#[wasm_bindgen_test]
fn a_rule_whose_key_part_is_absent_does_not_apply() {
    let w = World::new(CONFIG);
    let Start::Wait(p) = w.begin(&FakeRequest::new("GET", "/api/items")) else { panic!() };
    assert_eq!(p.calls.len(), 1, "only the client_ip rule applies without an x-api-key");
    assert_eq!(p.calls[0].rules, [2]);
}

#[test]
#[wasm_bindgen_test]
fn a_late_or_repeated_reply_is_ignored() {
    let w = World::new(CONFIG);
    let Start::Wait(mut p) = w.begin(&FakeRequest::new("POST", "/login")) else { panic!() };
    assert!(p.on_reply(&w.env(), 0, Ok(vec![allow(4, 1)]), NOW).is_some());
    assert!(p.on_reply(&w.env(), 0, Ok(vec![allow(4, 1)]), NOW).is_none());
    assert!(p.on_reply(&w.env(), 7, Ok(vec![]), NOW).is_none());
}

#[test]
#[wasm_bindgen_test]
fn a_reply_with_too_few_decisions_never_panics() {
    let w = World::new(CONFIG);
    let out = w.run(&api("k1"), &[Ok(vec![]), Ok(vec![allow(1, 1)])]);
    assert!(matches!(out, Outcome::Continue(_)));
}

#[test]
#[wasm_bindgen_test]
fn a_failing_shard_sends_only_its_clients_to_the_failure_policy() {
    let w = World::new(CONFIG);
    let shard_down = || Err(StoreError::Redis("ERR upstream failure".into()));
    // k1 and k2 hash to different cluster slots.
    assert_ne!(crate::keys::cluster_slot("k1"), crate::keys::cluster_slot("k2"));
    for _ in 0..3 {
        w.run(&api("k1"), &[Ok(vec![allow(49, 20)]), shard_down()]);
    }
    let Start::Wait(p) = w.begin(&api("k1")) else { panic!("the client_ip call still goes") };
    assert!(p.calls[0].is_waiting());
    assert!(!p.calls[1].is_waiting(), "k1's slot breaker is open: no call");
    let Start::Wait(p) = w.begin(&api("k2")) else { panic!() };
    assert!(p.calls.iter().all(PlannedCall::is_waiting), "k2's shard is untouched");
}
