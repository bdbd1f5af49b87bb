//! After a denial the store is left alone: the deny cache, in the proxy's
//! shared data, answers on every worker until the store's retry instant,
//! and from that instant the store decides again.

use std::time::{Duration, SystemTime};

use host_tests::stack::Stack;
use host_tests::windows::start_of_next_window;

use crate::plugin_config;

/// The limit's window: a denial's retry instant is its end.
const WINDOW: Duration = Duration::from_secs(6);

#[test]
fn a_denial_is_answered_by_the_cache_on_every_worker_until_its_retry_instant_and_no_longer() {
    let rules =
        r#"{"name":"abuse","key":["client_ip"],"limits":[{"algorithm":"fixed_window","limit":5,"window":"6s"}]}"#;
    let stack = Stack::start(&plugin_config(rules));
    let start = start_of_next_window(WINDOW);
    let end = start + WINDOW;
    let statuses: Vec<u16> = (0..6).map(|_| stack.get_fresh("/").status).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429]);
    assert!(SystemTime::now() < end - Duration::from_secs(3), "the window ended before the test could use it");
    // Until shortly before the window ends, fresh connections (both
    // workers): every one denied by the cache, none by a store call. A
    // request whose calls were counted before the retry instant was
    // answered before it.
    let calls_before = stack.evalsha_calls();
    let workers_before = stack.envoy.connections_per_worker();
    let mut denied: u64 = 0;
    while SystemTime::now() + Duration::from_millis(1_500) < end {
        let a = stack.get_fresh("/");
        assert_eq!(a.status, 429);
        let retry: u64 = a.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=6).contains(&retry), "the wait until the window ends: {retry}");
        denied += 1;
        let calls = stack.evalsha_calls();
        if SystemTime::now() < end {
            assert_eq!(calls, calls_before, "request {denied} went to the store before the retry instant");
        }
    }
    let per_worker: Vec<u64> =
        stack.envoy.connections_per_worker().iter().zip(&workers_before).map(|(n, b)| n - b).collect();
    assert!(per_worker.len() == 2 && per_worker.iter().all(|n| *n > 0), "both workers answered: {per_worker:?}");
    assert!(denied >= 20, "{denied} denied requests");
    assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.abuse.deny_cache_hits"), denied);
    // From the retry instant on, the store decides: the next window's 5.
    std::thread::sleep(end.duration_since(SystemTime::now()).unwrap_or_default() + Duration::from_millis(50));
    let statuses: Vec<u16> = (0..6).map(|_| stack.get_fresh("/").status).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429], "the cache held the denial past its retry instant");
    assert_eq!(stack.evalsha_calls(), calls_before + 6);
}
