//! The access log of the shipped envoy.yaml: why each request was decided
//! as it was, one JSON line per request.

use std::time::{Duration, Instant};

use host_tests::access_log::{fields as owned, wait_for, wait_until};
use host_tests::llm_gateway::{LlmGateway, TEST_TIMEOUT};
use host_tests::stack::Stack;

#[test]
fn the_access_log_of_a_429_names_its_rule_limit_decider_and_retry_after() {
    let stack = Stack::start_shipped(2).unwrap_or_else(|e| panic!("envoy refused to start:\n{}", e.log));
    let statuses: Vec<u16> = (0..10).map(|_| stack.get("/api/items").status).collect();
    assert_eq!(statuses, [200; 10]);
    let started = Instant::now();
    let refused = stack.get("/api/items");
    assert_eq!(refused.status, 429);
    let again = stack.get("/api/items");
    let again_at = started.elapsed();
    assert_eq!(again.status, 429);
    let other = stack.get("/static/app.css");
    let lines = wait_for(&stack.envoy, 13);
    let fields = |i: usize| lines[i].ratelimit();
    // Each admitted request: the sliding window, what it left, the store.
    for (i, remaining) in (0..10).zip((0..10).rev()) {
        assert_eq!(lines[i].status(), 200);
        let remaining = remaining.to_string();
        let want = [("rule", "api"), ("limit", "10/1m"), ("remaining", remaining.as_str()), ("decided_by", "store")];
        assert_eq!(fields(i), owned(&want), "request {i}");
    }
    // The 429: its rule, limit, decider and the Retry-After the client got.
    let retry = refused.header("retry-after").unwrap();
    assert_eq!(lines[10].status(), 429);
    let want =
        [("rule", "api"), ("limit", "10/1m"), ("remaining", "0"), ("decided_by", "store"), ("retry_after", retry)];
    assert_eq!(fields(10), owned(&want));
    // The next, from the deny cache (trusted for `overrides.within`, 1 s,
    // after the store decided: a request later than that asks the store).
    let by = lines[11].get("ratelimit_decided_by");
    if again_at < Duration::from_millis(900) {
        assert_eq!(by.as_deref(), Some("deny_cache"));
    } else {
        assert!(matches!(by.as_deref(), Some("deny_cache" | "store")), "{by:?}");
    }
    assert_eq!(lines[11].get("ratelimit_retry_after").as_deref(), again.header("retry-after"));
    // A request no rule applies to: nothing told.
    assert_eq!((lines[12].status(), other.status), (200, 200));
    assert_eq!(lines[12].get("path").as_deref(), Some("/static/app.css"));
    assert!(fields(12).is_empty(), "{:?}", lines[12]);
}

#[test]
fn the_llm_gateways_access_log_tells_a_requests_reservation_and_charge() {
    let gw = LlmGateway::start(&[TEST_TIMEOUT]);
    let a = gw.chat(&[("authorization", "Bearer sk-log"), ("x-usage", "321")]);
    assert_eq!(a.status, 200, "{a:?}");
    let lines = wait_until(&gw.envoy, |l| l.get("ratelimit_charge").is_some());
    let got = lines.last().unwrap().ratelimit();
    // The tightest rate limit of the two rules: llm's 60 requests a minute.
    // Reserved: 4,096 (default_output) plus the body's 67 bytes; charged
    // the usage the response reported.
    let want = [
        ("rule", "llm"),
        ("limit", "60/1m"),
        ("remaining", "59"),
        ("decided_by", "store"),
        ("reservation", "4163"),
        ("charge", "321"),
    ];
    assert_eq!(got, owned(&want));
}
