use super::*;
use crate::config::Config;
use crate::metrics::fake::FakeMetrics;
use crate::outcome::Overridden;
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

/// A trace as the tests compare it: rule name, decider, (limit, remaining).
type Traced<'a> = (&'a str, DecidedBy, Option<(u64, u64)>);

struct World {
    config: Config,
    shared: FakeShared,
    metrics: FakeMetrics,
    /// The trace of the last request decided.
    trace: std::cell::RefCell<Option<Trace>>,
}

impl World {
    fn new(json: &str) -> World {
        World {
            config: Config::parse(json.as_bytes()).unwrap(),
            shared: FakeShared::default(),
            metrics: FakeMetrics::default(),
            trace: Default::default(),
        }
    }

    /// The last decided request's trace: its rule's name, the decider, the
    /// limit and remaining it shows.
    fn traced(&self) -> Option<Traced<'_>> {
        let t = self.trace.borrow().clone()?;
        let shown = t.shown.map(|s| (s.limit, s.outcome.remaining));
        Some((self.config.rules[t.rule].name.as_str(), t.by, shown))
    }

    fn env(&self) -> Env<'_, FakeShared, FakeMetrics> {
        Env { config: &self.config, shared: &self.shared, metrics: &self.metrics, random: 0 }
    }

    /// A decided request's outcome, its effects applied as the worker
    /// applies them (denials remembered in the deny cache).
    fn applied(&self, d: Decided) -> Outcome {
        let cache = crate::deny_cache::DenyCache::new(&self.shared, self.config.deny_cache.slots);
        for (fingerprint, entry) in d.effects.denials {
            cache.remember(fingerprint, entry);
        }
        *self.trace.borrow_mut() = d.trace.map(|t| *t);
        d.outcome
    }

    /// Grants this proxy a lease of rule 0's limit (one, 1 unit a request)
    /// for API key `key`: `requests` of it, `remaining` outside it, until
    /// 10 s from now.
    fn grant_lease(&self, key: &str, requests: u64, remaining: u64) {
        let digest = IdentityDigest::of(&crate::identity::digest(key));
        let c = leases::candidate_for(&self.config, &[0], &digest).unwrap();
        let lease = crate::lease::LeaseRecord {
            fingerprint: c.fingerprint,
            expires_at_ms: NOW + 10_000,
            requests_left: requests,
            granted: requests,
            granted_at_ms: NOW,
            limits: vec![crate::lease::LeasedLimit {
                remaining_at_grant: remaining,
                reset_at_ms: NOW + 20_000,
                per_request: 1,
                limit: 0,
            }],
        };
        crate::lease::LeaseTable::new(&self.shared, self.config.deny_cache.slots).grant(lease, Instant::from_ms(NOW));
    }

    fn begin(&self, req: &FakeRequest) -> Began {
        self.begin_at(req, NOW)
    }

    /// `begin` at `now`, every client hot (each reads the lease table).
    fn begin_at(&self, req: &FakeRequest, now: u64) -> Began {
        let mut claims = TestClaims { shared: &self.shared, config: &self.config };
        match begin(&self.env(), req, || Instant::from_ms(now), &mut claims) {
            Start::Done(d) => Began::Done(self.applied(d)),
            Start::Wait(p) => Began::Wait(p),
        }
    }

    /// A decision's reply, the request's outcome once all are in.
    fn reply(&self, p: &mut Pending, i: usize, r: Result<Vec<LimitOutcome>, StoreError>) -> Option<Outcome> {
        p.on_reply(&self.env(), i, r).map(|d| self.applied(d))
    }

    /// Runs a request to its outcome, answering decision `i` with
    /// `replies[i]` and recording each in the breakers as the worker does.
    fn run(&self, req: &FakeRequest, replies: &[Result<Vec<LimitOutcome>, StoreError>]) -> Outcome {
        match self.begin(req) {
            Began::Done(o) => o,
            Began::Wait(mut p) => {
                assert_eq!(p.decisions.len(), replies.len(), "decisions made");
                let mut out = None;
                for (i, r) in replies.iter().enumerate() {
                    let health = crate::breaker::Health::of(r);
                    crate::breaker::record(
                        &self.shared,
                        &self.config.store.breaker,
                        p.decisions[i].slot,
                        Instant::from_ms(NOW),
                        health,
                    );
                    out = self.reply(&mut p, i, r.clone());
                }
                out.expect("every decision answered")
            }
        }
    }
}

/// `Start`, with a decided request's effects applied.
enum Began {
    Done(Outcome),
    Wait(Pending),
}

/// The claims of a worker on which every client is hot.
struct TestClaims<'a> {
    shared: &'a FakeShared,
    config: &'a Config,
}

impl Claims for TestClaims<'_> {
    fn draw(&mut self, lease: &LeaseCandidate, now: Instant) -> Option<crate::lease::LeaseRecord> {
        match crate::lease::LeaseTable::new(self.shared, self.config.deny_cache.slots).draw(lease.fingerprint, now) {
            crate::lease::Spend::Drawn(record) => Some(record),
            _ => None,
        }
    }

    fn gate(&mut self, slot: HashSlot, now: Instant) -> crate::breaker::Gate {
        let probe_ms = self.config.store.timeout.ms().saturating_mul(2).saturating_add(1000);
        crate::breaker::gate(self.shared, &self.config.store.breaker, slot, now, probe_ms)
    }
}

fn allow(remaining: u64, reset_ms: u64) -> LimitOutcome {
    LimitOutcome { allowed: true, remaining, reset_ms, retry_after_ms: Some(0), overridden: None }
}

fn deny(remaining: u64, reset_ms: u64, retry: u64) -> LimitOutcome {
    LimitOutcome { allowed: false, remaining, reset_ms, retry_after_ms: Some(retry), overridden: None }
}

fn api(key: &str) -> FakeRequest {
    FakeRequest::new("GET", "/api/items").with("x-api-key", key)
}

fn header<'a>(o: &'a Outcome, name: &str) -> Option<&'a str> {
    let headers = match o {
        Outcome::Continue(h, _, _) => h,
        Outcome::Reply(r) => &r.headers,
    };
    headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
}

#[test]
#[wasm_bindgen_test]
fn a_request_no_rule_matches_passes_untouched() {
    let w = World::new(CONFIG);
    assert!(
        matches!(w.begin(&FakeRequest::new("GET", "/static/a.css")), Began::Done(Outcome::Continue(h, _, _)) if h.is_empty())
    );
}

#[test]
#[wasm_bindgen_test]
fn one_call_per_identity_covering_every_limit_of_its_rules() {
    let w = World::new(CONFIG);
    let Began::Wait(p) = w.begin(&api("k1")) else { panic!("expected decisions") };
    assert_eq!(p.decisions.len(), 2, "client_ip rules in one decision, x-api-key rules in another");
    assert_eq!((p.decisions[0].rules.as_slice(), p.decisions[0].identity.as_str()), (&[2][..], "10.0.0.1"));
    // A header may carry a credential: the store sees its digest only.
    let k1 = crate::identity::digest("k1");
    assert_eq!((p.decisions[1].rules.as_slice(), p.decisions[1].identity.as_str()), (&[1, 3][..], k1.as_str()));
    let limits: Vec<(usize, usize, Op)> = p.decisions[1].limits.iter().map(|l| (l.rule, l.limit, l.op)).collect();
    assert_eq!(limits, [(1, 0, Op::Use(1)), (1, 1, Op::Use(1)), (3, 0, Op::Use(1))]);
}

#[test]
#[wasm_bindgen_test]
fn allowed_requests_carry_the_most_restrictive_limits_headers() {
    let w = World::new(CONFIG);
    let out = w.run(&api("k1"), &[Ok(vec![allow(49, 20)]), Ok(vec![allow(9, 60_000), allow(99, 1000), allow(99, 10)])]);
    assert_eq!(
        out,
        Outcome::Continue(
            vec![
                ("x-ratelimit-limit", "10".into()),
                ("x-ratelimit-remaining", "9".into()),
                ("x-ratelimit-reset", "1700000060".into()),
                ("ratelimit-limit", "10".into()),
                ("ratelimit-remaining", "9".into()),
                ("ratelimit-reset", "60".into()),
            ],
            vec![],
            vec![]
        )
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
    let Began::Done(Outcome::Reply(r)) = w.begin(&api("k1")) else { panic!("expected a cached 429") };
    assert_eq!(r.status, 429);
    assert_eq!(w.metrics.get(1, Event::DenyCacheHit), 1);
    // Another client is not affected.
    assert!(matches!(w.begin(&api("k2")), Began::Wait(_)));
    // At the retry instant the cache lets the store decide again.
    assert!(matches!(w.begin_at(&api("k1"), NOW + 2_500), Began::Wait(_)));
}

#[test]
#[wasm_bindgen_test]
fn a_changed_limit_ignores_denials_cached_under_the_old_one() {
    let w = World::new(CONFIG);
    w.run(&api("k1"), &[Ok(vec![allow(49, 20)]), Ok(vec![deny(0, 30_000, 20_000), allow(9, 1), allow(9, 1)])]);
    let raised =
        World { config: Config::parse(CONFIG.replace("\"limit\":10,", "\"limit\":20,").as_bytes()).unwrap(), ..w };
    assert!(matches!(raised.begin(&api("k1")), Began::Wait(_)), "the raised limit is asked, not the stale denial");
}

#[test]
#[wasm_bindgen_test]
fn store_failure_fails_open_through_the_fallback_share() {
    let w = World::new(CONFIG);
    let err = || Err(StoreError::Status(503));
    // api: sliding 10/min with fleet_size 2 -> 5 per window on this proxy.
    let mut admitted = 0;
    for _ in 0..8 {
        if let Outcome::Continue(..) = w.run(&api("k1"), &[Ok(vec![allow(49, 20)]), err()]) {
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
    let Began::Done(Outcome::Reply(r)) = w.begin(&FakeRequest::new("POST", "/login")) else {
        panic!("no call while open")
    };
    assert_eq!(r.status, 503);
    assert_eq!(w.metrics.get(0, Event::StoreError), 3, "no call, no new store error");
    assert_eq!(w.metrics.get(0, Event::FailClosed), 4);
    // 30 s later one probe goes through.
    assert!(matches!(w.begin_at(&FakeRequest::new("POST", "/login"), NOW + 30_000), Began::Wait(_)));
}

#[test]
#[wasm_bindgen_test]
fn shadow_rules_count_would_be_denials_and_never_reject() {
    let w = World::new(CONFIG);
    let out = w.run(&FakeRequest::new("GET", "/watch"), &[Ok(vec![deny(0, 30_000, 30_000)])]);
    assert_eq!(out, Outcome::Continue(vec![], vec![], vec![]), "a shadow rule shows nothing unless asked");
    assert_eq!(w.metrics.get(4, Event::ShadowDenied), 1);
    // The cached would-be denial is counted again without a call.
    assert!(matches!(w.begin(&FakeRequest::new("GET", "/watch")), Began::Done(Outcome::Continue(..))));
    assert_eq!(w.metrics.get(4, Event::ShadowDenied), 2);
    assert_eq!(w.metrics.get(4, Event::DenyCacheHit), 1);
}

#[test]
#[wasm_bindgen_test]
fn headers_can_be_turned_off_but_retry_after_stays() {
    let w = World::new(&CONFIG.replace(r#""store""#, r#""response_headers":false,"store""#));
    let ok = w.run(&api("k1"), &[Ok(vec![allow(49, 20)]), Ok(vec![allow(9, 60_000), allow(99, 1000), allow(99, 10)])]);
    assert_eq!(ok, Outcome::Continue(vec![], vec![], vec![]));
    let Outcome::Reply(r) = w.run(&FakeRequest::new("POST", "/login"), &[Ok(vec![deny(0, 10, 1_001)])]) else {
        panic!()
    };
    assert_eq!(r.headers, vec![("content-type", "application/json".into()), ("retry-after", "2".into())]);
}

#[test]
#[wasm_bindgen_test]
fn a_rule_whose_key_part_is_absent_does_not_apply() {
    let w = World::new(CONFIG);
    let Began::Wait(p) = w.begin(&FakeRequest::new("GET", "/api/items")) else { panic!() };
    assert_eq!(p.decisions.len(), 1, "only the client_ip rule applies without an x-api-key");
    assert_eq!(p.decisions[0].rules, [2]);
}

#[test]
#[wasm_bindgen_test]
fn a_late_or_repeated_reply_is_ignored() {
    let w = World::new(CONFIG);
    let Began::Wait(mut p) = w.begin(&FakeRequest::new("POST", "/login")) else { panic!() };
    assert!(w.reply(&mut p, 0, Ok(vec![allow(4, 1)])).is_some());
    assert!(w.reply(&mut p, 0, Ok(vec![allow(4, 1)])).is_none());
    assert!(w.reply(&mut p, 7, Ok(vec![])).is_none());
}

#[test]
#[wasm_bindgen_test]
fn a_reply_that_does_not_cover_its_decisions_limits_is_a_store_error() {
    let w = World::new(CONFIG);
    // Decision 0 (api-ip, one limit) gets no value, decision 1 (api and
    // api-all, three limits) one: neither is "all allowed".
    let out = w.run(&api("k1"), &[Ok(vec![]), Ok(vec![allow(1, 1)])]);
    assert!(matches!(out, Outcome::Continue(..)), "open rules: the fallback admits");
    for r in [1, 2, 3] {
        assert_eq!((w.metrics.get(r, Event::StoreError), w.metrics.get(r, Event::Allowed)), (1, 0), "rule {r}");
        assert_eq!(w.metrics.get(r, Event::FallbackAllowed), 1, "rule {r}");
    }
    let closed = w.run(&FakeRequest::new("POST", "/login"), &[Ok(vec![])]);
    assert!(matches!(closed, Outcome::Reply(ref r) if r.status == 503), "{closed:?}");
}

#[test]
#[wasm_bindgen_test]
fn a_request_whose_headers_cannot_be_read_meets_every_enforced_rules_failure_policy() {
    let w = World::new(CONFIG);
    let req = FakeRequest { unreadable: true, ..FakeRequest::new("GET", "/anything") };
    let Began::Done(Outcome::Reply(r)) = w.begin(&req) else { panic!("decided at once") };
    assert_eq!(r.status, 503, "login fails closed");
    for r in 0..4 {
        assert_eq!(w.metrics.get(r, Event::BadRequest), 1, "rule {r}");
    }
    assert_eq!(w.metrics.get(4, Event::BadRequest), 0, "a shadow rule never refuses");
    // Open rules admit through the fallback, on one identity for all such
    // requests, and a cost known after the response is still owed.
    let w = World::new(COSTS);
    let req = FakeRequest { unreadable: true, ..FakeRequest::new("POST", "/v1/chat") };
    let Began::Done(Outcome::Continue(_, charges, _)) = w.begin(&req) else { panic!("admitted") };
    assert_eq!(w.metrics.get(0, Event::FallbackAllowed), 1);
    assert_eq!(charges.len(), 1);
    assert_eq!(charges[0].identity, crate::identity::digest("~Unreadable"));
}

#[test]
#[wasm_bindgen_test]
fn a_failing_shard_sends_only_its_clients_to_the_failure_policy() {
    let w = World::new(CONFIG);
    let shard_down = || Err(StoreError::Redis("ERR upstream failure".into()));
    // k1 and k2 hash to different cluster slots.
    let slot = |k: &str| crate::keys::cluster_slot(&crate::identity::digest(k));
    assert_ne!(slot("k1"), slot("k2"));
    for _ in 0..3 {
        w.run(&api("k1"), &[Ok(vec![allow(49, 20)]), shard_down()]);
    }
    let Began::Wait(p) = w.begin(&api("k1")) else { panic!("the client_ip call still goes") };
    assert!(p.decisions[0].is_waiting());
    assert!(!p.decisions[1].is_waiting(), "k1's slot breaker is open: no call");
    let Began::Wait(p) = w.begin(&api("k2")) else { panic!() };
    assert!(p.decisions.iter().all(PlannedDecision::is_waiting), "k2's shard is untouched");
}

#[test]
#[wasm_bindgen_test]
fn a_key_header_with_two_different_values_is_refused_with_400() {
    let w = World::new(CONFIG);
    for req in [
        api("fresh").with("x-api-key", "spent"),
        FakeRequest::new("GET", "/api/items").with("x-api-key", "fresh, spent"),
    ] {
        let Began::Done(Outcome::Reply(r)) = w.begin(&req) else { panic!("expected a 400") };
        assert_eq!(r.status, 400);
        assert_eq!(
            r.body,
            r#"{"error":"ambiguous_identity","rule":"api","detail":"header:x-api-key has several different values"}"#
        );
    }
    assert_eq!(w.metrics.get(1, Event::BadRequest), 2);
    assert!(matches!(w.begin(&api("k1").with("x-api-key", "k1")), Began::Wait(_)), "the same key twice is one key");
}

const COSTS: &str = r#"{"domain":"shop","store":{"cluster":"s"},"rules":[
  {"name":"llm","match":{"path_prefix":"/v1/"},"key":["header:x-api-key"],
   "cost":{"response_body":"usage.total_tokens","default":100,"reserve":5},
   "limits":[{"limit":60,"window":"1m","counts":"requests"},{"algorithm":"token_bucket","limit":1000,"window":"1h"}]},
  {"name":"internal","match":{"path_prefix":"/batch"},"key":["header:x-api-key"],"cost":{"request_header":"x-cost","max":50},
   "limits":[{"algorithm":"fixed_window","limit":100,"window":"1m","staggered":true}]}]}"#;

#[test]
#[wasm_bindgen_test]
fn a_cost_known_after_the_response_is_checked_at_request_time_and_charged_after() {
    let w = World::new(COSTS);
    let req = FakeRequest::new("POST", "/v1/chat").with("x-api-key", "k");
    let Began::Wait(p) = w.begin(&req) else { panic!() };
    let ops: Vec<Op> = p.decisions[0].limits.iter().map(|l| l.op).collect();
    assert_eq!(ops, [Op::Use(1), Op::Check(5)], "requests consumed now, tokens checked against the reserve");
    let out = w.run(&req, &[Ok(vec![allow(59, 1000), allow(995, 18_000)])]);
    let Outcome::Continue(_, charges, _) = out else { panic!("let through") };
    assert_eq!(charges.len(), 1);
    assert_eq!(
        (charges[0].rule, charges[0].identity.as_str(), charges[0].limits.as_slice()),
        (0, crate::identity::digest("k").as_str(), &[(1, None)][..])
    );
    // Denied at the check: no charge is owed.
    let out = w.run(&req, &[Ok(vec![allow(58, 1000), deny(3, 18_000, 2_000)])]);
    assert!(matches!(out, Outcome::Reply(ref r) if r.status == 429));
}

#[test]
#[wasm_bindgen_test]
fn a_request_cost_header_is_read_strictly() {
    let w = World::new(COSTS);
    let batch = |cost: Option<&str>| {
        let req = FakeRequest::new("POST", "/batch").with("x-api-key", "k");
        w.begin(&match cost {
            Some(c) => req.with("x-cost", c),
            None => req,
        })
    };
    let Began::Wait(p) = batch(Some("7")) else { panic!() };
    assert_eq!(p.decisions[0].limits[0].op, Op::Use(7));
    let Began::Wait(p) = batch(None) else { panic!() };
    assert_eq!(p.decisions[0].limits[0].op, Op::Use(1), "absent: the default");
    for bad in ["0", "51", "-1", "1.5", "x", "", "7, 8", "99999999999999999999"] {
        let Began::Done(Outcome::Reply(r)) = batch(Some(bad)) else { panic!("{bad:?} accepted") };
        assert_eq!(r.status, 400, "{bad:?}");
        assert_eq!(
            r.body,
            r#"{"error":"bad_request_cost","rule":"internal","detail":"x-cost must be one integer from 1 to 50"}"#
        );
    }
}

#[test]
#[wasm_bindgen_test]
fn staggered_windows_have_a_stable_offset_per_client_spread_over_the_window() {
    let w = World::new(COSTS);
    let offset = |key: &str| {
        let req = FakeRequest::new("POST", "/batch").with("x-api-key", key);
        let Began::Wait(p) = w.begin(&req) else { panic!() };
        p.decisions[0].limits[0].offset_ms.unwrap()
    };
    assert_eq!(offset("a"), offset("a"));
    let offsets: Vec<u64> = (0..1000).map(|i| offset(&format!("client{i}"))).collect();
    assert!(offsets.iter().all(|&o| o < 60_000));
    // Spread: every tenth of the window holds some clients.
    for tenth in 0..10 {
        assert!(offsets.iter().any(|&o| o / 6_000 == tenth), "no client resets in tenth {tenth}");
    }
}

#[test]
#[wasm_bindgen_test]
fn a_shadow_rule_asked_to_shows_its_headers_under_other_names() {
    let w = World::new(&CONFIG.replace(r#""shadow":true,"#, r#""shadow":true,"shadow_headers":true,"#));
    let out = w.run(&FakeRequest::new("GET", "/watch"), &[Ok(vec![deny(0, 30_000, 30_000)])]);
    assert_eq!(
        out,
        Outcome::Continue(
            vec![
                ("x-ratelimit-shadow-limit", "1".into()),
                ("x-ratelimit-shadow-remaining", "0".into()),
                ("x-ratelimit-shadow-reset", "1700000030".into()),
            ],
            vec![],
            vec![]
        )
    );
}

#[test]
#[wasm_bindgen_test]
fn the_ietf_fields_name_every_limit_and_the_state_of_the_most_restrictive() {
    let w = World::new(&CONFIG.replace(r#""store""#, r#""response_headers":"ietf","store""#));
    let out = w.run(&api("k1"), &[Ok(vec![allow(49, 20)]), Ok(vec![allow(9, 60_000), allow(99, 1000), allow(99, 10)])]);
    let pk = crate::ratelimit_fields::PartitionKey::of(&crate::identity::digest("k1"));
    let b64 = |pk: crate::ratelimit_fields::PartitionKey| {
        let mut s = String::new();
        crate::ratelimit_fields::state_field("x", 0, 0, Some(pk)).split(";pk=").nth(1).unwrap().clone_into(&mut s);
        s
    };
    let Outcome::Continue(h, _, _) = &out else { panic!() };
    assert_eq!(h.len(), 2, "{h:?}");
    assert_eq!(header(&out, "ratelimit"), Some(format!(r#""api/1m";r=9;t=60;pk={}"#, b64(pk)).as_str()));
    let policy = header(&out, "ratelimit-policy").unwrap();
    assert!(policy.contains(r#""api/1m";q=10;w=60;pk="#), "{policy}");
    assert!(policy.contains(r#""api/1d";q=100;w=86400"#), "{policy}");
    assert!(policy.contains(r#""api-ip/1s";q=50;w=1;pk="#), "{policy}");
    assert!(!policy.contains("k1"), "never the raw identity");
}

#[test]
#[wasm_bindgen_test]
fn retry_after_jitter_is_never_earlier_than_the_exact_wait() {
    let w = World::new(&CONFIG.replace(r#""store""#, r#""retry_after_jitter":0.5,"store""#));
    let req = FakeRequest::new("POST", "/login");
    let mut pending = match w.begin(&req) {
        Began::Wait(p) => p,
        _ => panic!(),
    };
    let env = Env { random: u64::MAX, ..w.env() };
    let Some(Decided { outcome: Outcome::Reply(r), .. }) = pending.on_reply(&env, 0, Ok(vec![deny(0, 10_000, 10_000)]))
    else {
        panic!()
    };
    assert_eq!(r.headers.iter().find(|(n, _)| *n == "retry-after").map(|(_, v)| v.as_str()), Some("15"));
    assert_eq!(
        r.headers.iter().find(|(n, _)| *n == "x-ratelimit-reset").map(|(_, v)| v.as_str()),
        Some("1700000010"),
        "the reset stays exact"
    );
}

#[test]
#[wasm_bindgen_test]
fn a_live_lease_admits_even_past_a_denial_cached_since_and_without_one_the_cache_answers() {
    let config = r#"{"domain":"shop","store":{"cluster":"s"},"rules":[
      {"name":"hot","key":["header:x-api-key"],"lease":{"max_units":5,"max_age":"10s"},
       "limits":[{"algorithm":"fixed_window","limit":10,"window":"1m"}]}]}"#;
    let w = World::new(config);
    let req = FakeRequest::new("GET", "/").with("x-api-key", "k");
    // The store had nothing left outside the lease: the denial is cached.
    let out = w.run(&req, &[Ok(vec![deny(0, 20_000, 20_000)])]);
    assert!(matches!(out, Outcome::Reply(ref r) if r.status == 429));
    let Began::Done(Outcome::Reply(_)) = w.begin(&req) else { panic!("the deny cache answers") };
    // This proxy holds a lease of that client: its units are paid for.
    w.grant_lease("k", 2, 0);
    for remaining in ["1", "0"] {
        let Began::Done(out) = w.begin(&req) else { panic!("decided in the proxy") };
        assert!(matches!(out, Outcome::Continue(..)), "{out:?}");
        assert_eq!(header(&out, "x-ratelimit-remaining"), Some(remaining));
        assert!(header(&out, "x-ratelimit-reset").is_some());
    }
    assert_eq!(w.metrics.get(0, Event::LeaseAllowed), 2);
    let Began::Done(Outcome::Reply(r)) = w.begin(&req) else { panic!("spent: the cache again") };
    assert_eq!(r.status, 429);
}

#[test]
#[wasm_bindgen_test]
fn a_lease_admits_exactly_what_it_holds_one_table_draw_a_request() {
    let config = r#"{"domain":"shop","store":{"cluster":"s"},"rules":[
      {"name":"hot","key":["header:x-api-key"],"lease":{"max_units":128,"max_age":"10s"},
       "limits":[{"algorithm":"fixed_window","limit":1000,"window":"1m"}]}]}"#;
    let w = World::new(config);
    let req = FakeRequest::new("GET", "/").with("x-api-key", "k");
    w.grant_lease("k", 40, 900);
    let admit = || match w.begin(&req) {
        Began::Done(out) => {
            assert!(matches!(out, Outcome::Continue(..)), "{out:?}");
            Some(header(&out, "x-ratelimit-remaining").unwrap_or_default().to_string())
        }
        Began::Wait(_) => None,
    };
    let reads = w.shared.reads();
    let shown: Vec<String> = (0..40).map(|_| admit().expect("from the lease")).collect();
    assert_eq!(w.shared.reads() - reads, 40, "one read of the table a request");
    // 40 in all, never more: then the store decides.
    assert_eq!(admit(), None);
    // Remaining: 900 outside the lease plus what the lease still holds.
    assert_eq!((shown[0].as_str(), shown[39].as_str()), ("939", "900"));
    assert_eq!(w.metrics.get(0, Event::LeaseAllowed), 40);
}

#[test]
#[wasm_bindgen_test]
fn each_decision_traces_its_rule_limit_and_what_decided_it() {
    let w = World::new(CONFIG);
    // Allowed by the store: the most restrictive limit of the enforced rules.
    w.run(&api("k1"), &[Ok(vec![allow(49, 20)]), Ok(vec![allow(9, 60_000), allow(99, 1000), allow(99, 10)])]);
    assert_eq!(w.traced(), Some(("api", DecidedBy::Store, Some((10, 9)))));
    // Refused by the store, then by the cached denial.
    w.run(&api("k1"), &[Ok(vec![allow(49, 20)]), Ok(vec![deny(0, 30_000, 2_500), allow(99, 1000), allow(99, 10)])]);
    assert_eq!(w.traced(), Some(("api", DecidedBy::Store, Some((10, 0)))));
    w.run(&api("k1"), &[]);
    assert_eq!(w.traced(), Some(("api", DecidedBy::DenyCache, Some((10, 0)))));
    // The store failed: the open rules' shares, the closed rule's 503.
    w.run(&api("k2"), &[Err(StoreError::Status(504)), Err(StoreError::Status(504))]);
    assert_eq!(w.traced().map(|(r, by, _)| (r, by)), Some(("api", DecidedBy::Fallback)));
    let login = FakeRequest::new("POST", "/login");
    let out = w.run(&login, &[Err(StoreError::Status(504))]);
    assert!(matches!(out, Outcome::Reply(ref r) if r.status == 503));
    assert_eq!(w.traced(), Some(("login", DecidedBy::Unavailable, None)));
    // Refused before the store: a key of two values.
    let two = FakeRequest::new("GET", "/api/x").with("x-api-key", "a").with("x-api-key", "b");
    w.run(&two, &[]);
    assert_eq!(w.traced(), Some(("api", DecidedBy::Key, None)));
    // No rule: nothing to trace.
    w.run(&FakeRequest::new("GET", "/static/a.css"), &[]);
    assert_eq!(w.traced(), None);
}

#[test]
#[wasm_bindgen_test]
fn a_lease_traces_the_lease_and_a_block_answers_403_from_the_store_and_the_cache() {
    let config = r#"{"domain":"shop","store":{"cluster":"s"},"overrides":{"within":"2s"},"rules":[
      {"name":"hot","key":["header:x-api-key"],"lease":{"max_units":5,"max_age":"10s"},
       "limits":[{"algorithm":"fixed_window","limit":10,"window":"1m"}]}]}"#;
    let w = World::new(config);
    let req = FakeRequest::new("GET", "/").with("x-api-key", "k");
    w.grant_lease("k", 1, 3);
    assert!(matches!(w.run(&req, &[]), Outcome::Continue(..)));
    assert_eq!(w.traced(), Some(("hot", DecidedBy::Lease, Some((10, 3)))));
    // An override raised the limit to 20: shown as decided.
    let raised = |o: LimitOutcome| LimitOutcome { overridden: Some(Overridden { limit: 20, reset: false }), ..o };
    let out = w.run(&req, &[Ok(vec![raised(allow(15, 6_000))])]);
    assert_eq!(header(&out, "x-ratelimit-limit"), Some("20"));
    assert_eq!(w.traced(), Some(("hot", DecidedBy::Store, Some((20, 15)))));
    // Blocked: 403, no Retry-After; cached for `within` only, then the store again.
    let blocked = LimitOutcome {
        allowed: false,
        remaining: 0,
        reset_ms: 3_600_000,
        retry_after_ms: Some(3_600_000),
        overridden: Some(Overridden { limit: 0, reset: false }),
    };
    let out = w.run(&req, &[Ok(vec![blocked])]);
    let Outcome::Reply(r) = &out else { panic!("{out:?}") };
    assert_eq!((r.status, r.body.as_str()), (403, r#"{"error":"blocked","rule":"hot"}"#));
    assert_eq!(header(&out, "retry-after"), None);
    let Began::Done(Outcome::Reply(r)) = w.begin_at(&req, NOW + 1_999) else { panic!("the cached block answers") };
    assert_eq!(r.status, 403);
    assert_eq!(w.traced().map(|(r, by, _)| (r, by)), Some(("hot", DecidedBy::DenyCache)));
    assert!(matches!(w.begin_at(&req, NOW + 2_000), Began::Wait(_)), "past within: the store decides");
}
