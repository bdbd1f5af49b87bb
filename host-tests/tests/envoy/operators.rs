//! What clients and operators read: the IETF RateLimit fields (parsed as
//! structured fields), Retry-After spread by jitter but never early, fixed
//! windows staggered per client, shadow rules' headers.

use std::collections::BTreeMap;

use host_tests::ratelimit_fields::{parse_policy, parse_state};
use host_tests::stack::Stack;

fn config(top: &str, rules: &str) -> String {
    format!(
        r#"{{"domain":"t","store":{{"transport":"webdis","cluster":"ratelimit_store","authority":"webdis","timeout_ms":1000,
            "circuit_breaker":{{"failures":3,"open":"1s"}}}}{top},"rules":[{rules}]}}"#
    )
}

#[test]
fn the_ietf_fields_parse_and_say_what_the_legacy_fields_say() {
    let rules = r#"{"name":"api","key":["header:x-api-key"],"response_headers":"both",
        "limits":[{"limit":5,"window":"1m"},{"algorithm":"fixed_window","limit":100,"window":"1d"}]}"#;
    let stack = Stack::start(&config("", rules));
    for remaining in [4u64, 3, 2, 1, 0] {
        let a = stack.send("GET", "/", &[("x-api-key", "alice")]);
        assert_eq!(a.status, 200);
        let policies = parse_policy(a.header("ratelimit-policy").unwrap()).unwrap();
        let names: Vec<(&str, u64, Option<u64>)> = policies.iter().map(|p| (p.name.as_str(), p.q, p.w)).collect();
        assert_eq!(names, [("api/1m", 5, Some(60)), ("api/1d", 100, Some(86_400))]);
        let pk = policies[0].pk.clone().expect("a partition key");
        assert_eq!(pk.len(), 8);
        assert!(!String::from_utf8_lossy(&pk).contains("alice"), "a digest, never the identity");
        let state = parse_state(a.header("ratelimit").unwrap()).unwrap();
        assert_eq!((state[0].name.as_str(), state[0].r, state[0].pk.as_ref()), ("api/1m", remaining, Some(&pk)));
        let legacy_reset: u64 = a.header("ratelimit-reset").unwrap().parse().unwrap();
        assert_eq!(state[0].t, Some(legacy_reset), "t is the legacy RateLimit-Reset");
        assert_eq!(a.header("x-ratelimit-remaining"), Some(remaining.to_string().as_str()));
    }
    let denied = stack.send("GET", "/", &[("x-api-key", "alice")]);
    assert_eq!(denied.status, 429);
    let state = parse_state(denied.header("ratelimit").unwrap()).unwrap();
    let retry: u64 = denied.header("retry-after").unwrap().parse().unwrap();
    assert_eq!((state[0].r, state[0].t), (0, Some(retry)), "a 429's t is when the request could succeed");
    // Another client: another partition.
    let b = stack.send("GET", "/", &[("x-api-key", "bob")]);
    let bob_pk = parse_policy(b.header("ratelimit-policy").unwrap()).unwrap()[0].pk.clone();
    let alice_pk = parse_policy(denied.header("ratelimit-policy").unwrap()).unwrap()[0].pk.clone();
    assert_ne!(bob_pk, alice_pk);
}

#[test]
fn ten_thousand_denials_spread_retry_after_over_the_jitter_and_none_comes_early() {
    let rules =
        r#"{"name":"api","key":["header:x-api-key"],"limits":[{"algorithm":"fixed_window","limit":1,"window":"1h"}]}"#;
    let stack = Stack::start(&config(r#","retry_after_jitter":0.5"#, rules));
    assert_eq!(stack.send("GET", "/", &[("x-api-key", "k")]).status, 200);
    let answers: Vec<(u64, u64)> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    (0..1250)
                        .map(|_| {
                            let a = stack.send("GET", "/", &[("x-api-key", "k")]);
                            assert_eq!(a.status, 429);
                            let exact: u64 = a.header("ratelimit-reset").unwrap().parse().unwrap();
                            (a.header("retry-after").unwrap().parse().unwrap(), exact)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
    });
    assert_eq!(answers.len(), 10_000);
    // Never earlier than the exact instant (the window's end), never later
    // than the exact wait plus half of it.
    for &(retry, exact) in &answers {
        assert!(retry >= exact, "Retry-After {retry} before the exact {exact}");
        assert!(retry <= exact + exact.div_ceil(2) + 1, "Retry-After {retry} past 1.5 x {exact}");
    }
    // Spread uniformly over the extra: each quarter of it holds about a quarter.
    let mut quarters = [0usize; 4];
    for &(retry, exact) in &answers {
        let extra = (retry - exact) as f64 / (exact as f64 / 2.0);
        quarters[((extra * 4.0) as usize).min(3)] += 1;
    }
    for q in quarters {
        assert!((2000..=3000).contains(&q), "quarters {quarters:?}");
    }
    // Deny-cache answers stay exact: every denial but the store's came from it.
    assert!(stack.envoy.stat("wasmcustom.ratelimit.api.deny_cache_hits") >= 9_000);
}

#[test]
fn staggered_fixed_windows_spread_resets_and_still_admit_exactly_the_limit() {
    let rules = r#"{"name":"quota","key":["header:x-api-key"],
        "limits":[{"algorithm":"fixed_window","limit":3,"window":"1h","staggered":true}]}"#;
    let stack = Stack::start(&config("", rules));
    let resets: Vec<u64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let stack = &stack;
                s.spawn(move || {
                    (0..125)
                        .map(|i| {
                            // A window may end between a client's requests (in
                            // about 1 run of 100 here, more on a loaded
                            // machine): then its answer before said so, and a
                            // fresh key starts again.
                            (0..3)
                                .find_map(|attempt| one_client(stack, &format!("client-{t}-{i}-{attempt}")))
                                .unwrap_or_else(|| panic!("client-{t}-{i}: three windows ended mid-test"))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
    });
    assert_eq!(resets.len(), 1000);
    // Aligned windows would all reset together; staggered ones spread over
    // the hour: every tenth of it holds between 5% and 15% of the clients.
    let mut tenths: BTreeMap<u64, usize> = BTreeMap::new();
    for r in &resets {
        assert!(*r <= 3600);
        *tenths.entry((r.saturating_sub(1)) / 360).or_default() += 1;
    }
    assert_eq!(tenths.len(), 10, "{tenths:?}");
    assert!(tenths.values().all(|n| (50..=150).contains(n)), "{tenths:?}");
}

/// Four requests of a fresh client of the staggered 3-an-hour rule, then a
/// fifth for its reset: exactly three admitted, and the refusal's
/// Retry-After is its own window's end. `None` if its window ended between
/// two of them, which the answer before the change shows (its reset no
/// further away than the time that passed since, rounded up).
fn one_client(stack: &Stack, key: &str) -> Option<u64> {
    let mut statuses = Vec::new();
    let (mut last_reset, mut answered) = (u64::MAX, std::time::Instant::now());
    for _ in 0..5 {
        let a = stack.send("GET", "/", &[("x-api-key", key)]);
        let reset: u64 = a.header("ratelimit-reset").unwrap().parse().unwrap();
        statuses.push(a.status);
        let expected = if statuses.len() <= 3 { 200 } else { 429 };
        if a.status != expected {
            let waited = answered.elapsed().as_secs() + 1;
            assert!(last_reset <= waited, "{key}: {statuses:?} with its window {last_reset} s from its end");
            return None;
        }
        if a.status == 429 {
            let retry: u64 = a.header("retry-after").unwrap().parse().unwrap();
            assert_eq!(retry, reset, "{key}: Retry-After is its own window's end");
        }
        (last_reset, answered) = (reset, std::time::Instant::now());
    }
    Some(last_reset)
}

#[test]
fn a_shadow_rule_shows_what_it_would_have_said_under_other_names() {
    let rules = r#"{"name":"watch","key":["client_ip"],"shadow":true,"shadow_headers":true,
        "limits":[{"algorithm":"fixed_window","limit":2,"window":"1h"}]}"#;
    let stack = Stack::start(&config("", rules));
    let remaining: Vec<(u16, Option<String>, Option<String>)> = (0..4)
        .map(|_| {
            let a = stack.get("/");
            (
                a.status,
                a.header("x-ratelimit-shadow-remaining").map(str::to_string),
                a.header("x-ratelimit-remaining").map(str::to_string),
            )
        })
        .collect();
    assert_eq!(
        remaining,
        [
            (200, Some("1".into()), None),
            (200, Some("0".into()), None),
            (200, Some("0".into()), None),
            (200, Some("0".into()), None)
        ],
        "never rejected, never the real names"
    );
    assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.watch.shadow_denied"), 2);
}
