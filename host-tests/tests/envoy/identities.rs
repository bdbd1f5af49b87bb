//! Separate budgets per identity, several rules at once, and client_ip that
//! X-Forwarded-For cannot reset.

use std::time::{Duration, Instant};

use host_tests::stack::Stack;
use host_tests::windows::{start_clear_of_boundary, HOUR};

use crate::plugin_config;

#[test]
fn two_identities_keep_separate_budgets_and_two_rules_both_apply() {
    let rules = r#"
      {"name":"per-key","match":{"path_prefix":"/api/"},"key":["header:x-api-key"],
       "limits":[{"algorithm":"sliding_log","limit":3,"window":"1h"}]},
      {"name":"per-ip","match":{"path_prefix":"/api/"},"key":["client_ip"],
       "limits":[{"algorithm":"fixed_window","limit":6,"window":"1h"}]}"#;
    // per-ip counts in a fixed window: all of it in one.
    start_clear_of_boundary(HOUR, Duration::from_secs(30));
    let stack = Stack::start(&plugin_config(rules));
    let call = |key: &str| stack.send("GET", "/api/items", &[("x-api-key", key)]);
    let first = Instant::now();
    for remaining in ["2", "1", "0"] {
        let a = call("alice");
        assert_eq!(a.status, 200);
        assert_eq!(a.header("x-ratelimit-remaining"), Some(remaining), "per-key is the most restrictive");
    }
    let a = call("alice");
    assert_eq!(a.status, 429);
    // Until alice's first request leaves the hour: 3600 s, less the whole
    // seconds that passed since (none on a quiet machine).
    let passed = first.elapsed().as_secs() + 1;
    let retry: u64 = a.header("retry-after").unwrap().parse().unwrap();
    assert!((3600 - passed..=3600).contains(&retry), "retry-after {retry} after {passed} s");
    assert_eq!(a.body, format!(r#"{{"error":"rate_limited","rule":"per-key","retry_after":{retry}}}"#));
    // bob has his own per-key budget but shares the client address. The two
    // identities were decided in parallel calls, so alice's denied request
    // still spent per-ip: 4 of 6 are gone.
    let b = call("bob");
    assert_eq!((b.status, b.header("x-ratelimit-remaining")), (200, Some("1")));
    let b = call("bob");
    assert_eq!((b.status, b.header("x-ratelimit-remaining")), (200, Some("0")));
    let c = call("carol");
    assert_eq!(c.status, 429);
    assert!(c.body.contains(r#""rule":"per-ip""#), "{}", c.body);
}

#[test]
fn client_ip_with_no_trusted_hops_cannot_be_reset_by_forwarded_for() {
    let rules =
        r#"{"name":"ip","key":["client_ip"],"limits":[{"algorithm":"sliding_window","limit":3,"window":"1h"}]}"#;
    let stack = Stack::start(&plugin_config(rules));
    let statuses: Vec<u16> =
        (0..6).map(|i| stack.send("GET", "/", &[("x-forwarded-for", &format!("203.0.113.{i}"))]).status).collect();
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);
}
