//! After a denial the store is left alone: the deny cache answers.

use host_tests::stack::Stack;

use crate::plugin_config;

const WORKERS: u64 = 2;

#[test]
fn two_hundred_requests_after_a_denial_cost_at_most_one_store_call_per_worker() {
    let rules =
        r#"{"name":"abuse","key":["client_ip"],"limits":[{"algorithm":"sliding_window","limit":5,"window":"1h"}]}"#;
    let stack = Stack::start(&plugin_config(rules));
    for _ in 0..5 {
        assert_eq!(stack.get("/").status, 200);
    }
    assert_eq!(stack.get("/").status, 429);
    let before = stack.evalsha_calls();
    for _ in 0..200 {
        assert_eq!(stack.get("/").status, 429);
    }
    let calls = stack.evalsha_calls() - before;
    assert!(calls <= WORKERS, "{calls} store calls for 200 denied requests");
    assert!(stack.envoy.stat("wasmcustom.ratelimit.abuse.deny_cache_hits") >= 200 - WORKERS);
}
