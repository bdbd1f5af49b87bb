//! The IETF fields when token limits are among the limits: which limits
//! `RateLimit-Policy` names and which `RateLimit` shows, on a 200, on a 429
//! from the store and on a 429 from the deny cache. Every field produced is
//! parsed by a real RFC 9651 parser (`sfv`).

use super::super::{begin, Env, Outcome, Start};
use crate::config::Config;
use crate::metrics::fake::FakeMetrics;
use crate::outcome::LimitOutcome;
use crate::ratelimit_fields::PartitionKey;
use crate::request::fake::FakeRequest;
use crate::shared::fake::FakeShared;
use crate::store::StoreError;
use sfv::{BareItem, List, ListEntry, Parser};
use wasm_bindgen_test::wasm_bindgen_test;

const NOW: u64 = 1_700_000_000_000;

/// An LLM rule (60 requests a minute, 100,000 tokens an hour, per API key)
/// and a rule counting requests per client address; `{style}` is the
/// plugin's `response_headers`.
const CONFIG: &str = r#"{"domain":"llm","store":{"cluster":"s"},"response_headers":"{style}","rules":[
  {"name":"llm","match":{"path_prefix":"/v1/"},"key":["header:x-api-key"],
   "cost":{"response_body":"usage.total_tokens","default":100,"max":100000},
   "limits":[{"limit":60,"window":"1m","counts":"requests"},
             {"algorithm":"token_bucket","limit":100000,"window":"1h"}]},
  {"name":"ip","match":{"path_prefix":"/v1/"},"key":["client_ip"],
   "limits":[{"limit":1000,"window":"1m"}]}]}"#;

struct World {
    config: Config,
    shared: FakeShared,
    metrics: FakeMetrics,
}

impl World {
    fn new(style: &str) -> World {
        World {
            config: Config::parse(CONFIG.replace("{style}", style).as_bytes()).unwrap(),
            shared: FakeShared::default(),
            metrics: FakeMetrics::default(),
        }
    }

    /// A chat request of `key` from 10.0.0.1, its decisions answered with
    /// `ip` (the address rule's) and `llm` (the LLM rule's: requests, tokens).
    fn chat(&self, key: &str, ip: LimitOutcome, llm: [LimitOutcome; 2]) -> Outcome {
        let env = Env { config: &self.config, shared: &self.shared, metrics: &self.metrics, random: 0 };
        let req = FakeRequest::new("POST", "/v1/chat/completions").with("x-api-key", key);
        let applied = |d: crate::pipeline::Decided| {
            let cache = crate::deny_cache::DenyCache::new(&self.shared, self.config.deny_cache.slots);
            for (fingerprint, entry) in d.effects.denials {
                cache.remember(fingerprint, entry);
            }
            d.outcome
        };
        match begin(&env, &req, || crate::time::Instant::from_ms(NOW), &mut NoClaims) {
            Start::Done(d) => applied(d),
            Start::Wait(mut p) => {
                let mut out = None;
                for i in 0..p.decisions.len() {
                    let reply: Result<Vec<LimitOutcome>, StoreError> =
                        Ok(if p.decisions[i].rules == [1] { vec![ip] } else { llm.to_vec() });
                    out = p.on_reply(&env, i, reply);
                }
                applied(out.unwrap())
            }
        }
    }
}

/// No client is hot, and every breaker is closed.
struct NoClaims;

impl crate::pipeline::Claims for NoClaims {
    fn draw(
        &mut self,
        _: &crate::pipeline::LeaseCandidate,
        _: crate::time::Instant,
    ) -> Option<crate::lease::LeaseRecord> {
        None
    }
    fn gate(&mut self, _: crate::keys::HashSlot, _: crate::time::Instant) -> crate::breaker::Gate {
        crate::breaker::Gate::Call
    }
}

fn allow(remaining: u64, reset_ms: u64) -> LimitOutcome {
    LimitOutcome { allowed: true, remaining, reset_ms, retry_after_ms: Some(0), overridden: None }
}

fn deny(remaining: u64, reset_ms: u64, retry: u64) -> LimitOutcome {
    LimitOutcome { allowed: false, remaining, reset_ms, retry_after_ms: Some(retry), overridden: None }
}

fn header<'a>(o: &'a Outcome, name: &str) -> Option<&'a str> {
    let headers = match o {
        Outcome::Continue(h, _, _) => h,
        Outcome::Reply(r) => &r.headers,
    };
    headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
}

fn status(o: &Outcome) -> u32 {
    match o {
        Outcome::Continue(..) => 200,
        Outcome::Reply(r) => r.status,
    }
}

/// `value` parsed as an RFC 9651 List: each item's String value and its
/// parameters, Integers in decimal and Byte Sequences in hex. Panics if the
/// field is not valid structured-field syntax, or not a List of Items named
/// by a String.
fn items(value: &str) -> Vec<(String, Vec<(String, String)>)> {
    let list: List = Parser::new(value).parse().unwrap_or_else(|e| panic!("{value:?}: {e}"));
    assert!(!list.is_empty(), "{value:?}: an empty List");
    list.into_iter()
        .map(|entry| {
            let ListEntry::Item(item) = entry else { panic!("{value:?}: an inner list") };
            let BareItem::String(name) = item.bare_item else { panic!("{value:?}: a name that is no String") };
            let params = item
                .params
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        BareItem::Integer(n) => n.to_string(),
                        BareItem::String(s) => format!("{:?}", s.as_str()),
                        BareItem::ByteSequence(b) => hex(b),
                        other => panic!("{value:?}: {k:?} is {other:?}"),
                    };
                    (k.as_str().to_owned(), v)
                })
                .collect();
            (name.as_str().to_owned(), params)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One parsed item: `name` with `params` (`pk` given as the key itself).
fn item(name: &str, params: &[(&str, &str)], pk: PartitionKey) -> (String, Vec<(String, String)>) {
    let mut p: Vec<(String, String)> = params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    p.push(("pk".into(), hex(pk.as_bytes())));
    (name.to_owned(), p)
}

/// The key header's identity is its digest (a header may be a credential).
fn key_pk() -> PartitionKey {
    PartitionKey::of(&crate::identity::digest("k1"))
}

fn ip_pk() -> PartitionKey {
    PartitionKey::of("10.0.0.1")
}

#[test]
#[wasm_bindgen_test]
fn a_200_whose_tightest_limit_counts_tokens_shows_the_tightest_request_limit() {
    let w = World::new("both");
    // Tokens are the tightest (10 left); of the request limits, llm/1m (59).
    let out = w.chat("k1", allow(990, 60_000), [allow(59, 1_000), allow(10, 3_600_000)]);
    assert_eq!(status(&out), 200);
    // The legacy fields show the overall tightest, the token limit.
    assert_eq!(
        (header(&out, "x-ratelimit-limit"), header(&out, "x-ratelimit-remaining")),
        (Some("100000"), Some("10"))
    );
    let policy = items(header(&out, "ratelimit-policy").unwrap());
    assert_eq!(
        policy,
        [item("llm/1m", &[("q", "60"), ("w", "60")], key_pk()), item("ip/1m", &[("q", "1000"), ("w", "60")], ip_pk())],
        "both request limits, no token limit"
    );
    let state = items(header(&out, "ratelimit").unwrap());
    assert_eq!(state, [item("llm/1m", &[("r", "59"), ("t", "1")], key_pk())]);
}

#[test]
#[wasm_bindgen_test]
fn with_request_and_token_limits_mixed_ratelimit_is_the_tightest_of_those_named() {
    let w = World::new("ietf");
    // The address limit (5 left) is tighter than llm/1m (59); tokens (3) tighter still.
    let out = w.chat("k1", allow(5, 42_000), [allow(59, 1_000), allow(3, 3_600_000)]);
    assert_eq!(header(&out, "x-ratelimit-remaining"), None, "ietf only");
    let policy = items(header(&out, "ratelimit-policy").unwrap());
    assert_eq!(policy.iter().map(|p| p.0.as_str()).collect::<Vec<_>>(), ["llm/1m", "ip/1m"], "in rule order");
    let state = items(header(&out, "ratelimit").unwrap());
    assert_eq!(state, [item("ip/1m", &[("r", "5"), ("t", "42")], ip_pk())]);
}

#[test]
#[wasm_bindgen_test]
fn a_429_in_token_debt_names_the_request_limits_and_shows_no_state() {
    let w = World::new("ietf");
    // The token bucket is in debt: 30 s until it has a token again. The
    // request limits would admit the request (the script is all or
    // nothing: nothing was consumed).
    let out = w.chat("k1", allow(990, 60_000), [allow(59, 1_000), deny(0, 3_600_000, 30_000)]);
    assert_eq!(status(&out), 429);
    assert_eq!(header(&out, "retry-after"), Some("30"));
    let policy = items(header(&out, "ratelimit-policy").unwrap());
    assert_eq!(
        policy,
        [item("llm/1m", &[("q", "60"), ("w", "60")], key_pk()), item("ip/1m", &[("q", "1000"), ("w", "60")], ip_pk())]
    );
    // ip/1m would reset in 60 s, after the Retry-After: no RateLimit.
    assert_eq!(header(&out, "ratelimit"), None);
}

#[test]
#[wasm_bindgen_test]
fn a_429_from_a_request_limit_alongside_token_debt_shows_that_limit() {
    let w = World::new("ietf");
    let out = w.chat("k1", allow(990, 60_000), [deny(0, 60_000, 20_000), deny(0, 3_600_000, 30_000)]);
    assert_eq!((status(&out), header(&out, "retry-after")), (429, Some("30")), "the longest denial");
    let state = items(header(&out, "ratelimit").unwrap());
    assert_eq!(state, [item("llm/1m", &[("r", "0"), ("t", "20")], key_pk())], "t no later than Retry-After");
    assert_eq!(items(header(&out, "ratelimit-policy").unwrap()).len(), 2);
}

#[test]
#[wasm_bindgen_test]
fn a_429_in_token_debt_from_the_deny_cache_names_the_rules_request_limit() {
    let w = World::new("ietf");
    assert_eq!(status(&w.chat("k1", allow(990, 60_000), [allow(59, 1_000), deny(0, 3_600_000, 30_000)])), 429);
    // The denial is cached: the next request makes no store call.
    let out = w.chat("k1", allow(0, 0), [allow(0, 0), allow(0, 0)]);
    assert_eq!(w.metrics.get(0, crate::metrics::Event::DenyCacheHit), 1);
    assert_eq!((status(&out), header(&out, "retry-after")), (429, Some("30")));
    let policy = items(header(&out, "ratelimit-policy").unwrap());
    assert_eq!(policy, [item("llm/1m", &[("q", "60"), ("w", "60")], key_pk())], "the refusing rule's request limit");
    assert_eq!(header(&out, "ratelimit"), None, "no state of a request limit is known");
}

#[test]
#[wasm_bindgen_test]
fn a_429_from_the_deny_cache_for_a_request_limit_names_and_shows_it() {
    let w = World::new("ietf");
    assert_eq!(status(&w.chat("k1", allow(990, 60_000), [deny(0, 45_000, 45_000), allow(500, 60_000)])), 429);
    let out = w.chat("k1", allow(0, 0), [allow(0, 0), allow(0, 0)]);
    assert_eq!(w.metrics.get(0, crate::metrics::Event::DenyCacheHit), 1);
    assert_eq!(
        items(header(&out, "ratelimit-policy").unwrap()),
        [item("llm/1m", &[("q", "60"), ("w", "60")], key_pk())]
    );
    assert_eq!(items(header(&out, "ratelimit").unwrap()), [item("llm/1m", &[("r", "0"), ("t", "45")], key_pk())]);
}
