//! Exact admitted counts and header values for each algorithm.

use std::time::Duration;

use host_tests::stack::Stack;
use host_tests::windows::{start_clear_of_boundary, HOUR};

use crate::plugin_config;

#[test]
fn each_algorithm_admits_exactly_five_with_exact_headers_then_429() {
    let rules: Vec<String> = ["sliding_window", "fixed_window", "token_bucket", "sliding_log", "gcra"]
        .iter()
        .map(|a| {
            let burst = if *a == "gcra" { r#","burst":5"# } else { "" };
            format!(r#"{{"name":"{a}","match":{{"path_prefix":"/{a}"}},"key":["client_ip"],"limits":[{{"algorithm":"{a}","limit":5,"window":"1h"{burst}}}]}}"#)
        })
        .collect();
    // fixed_window counts in one aligned hour: all of it in one.
    start_clear_of_boundary(HOUR, Duration::from_secs(30));
    let stack = Stack::start(&plugin_config(&rules.join(",")));
    for algo in ["sliding_window", "fixed_window", "token_bucket", "sliding_log", "gcra"] {
        for expect_remaining in [4, 3, 2, 1, 0] {
            let a = stack.get(&format!("/{algo}/x"));
            assert_eq!(a.status, 200, "{algo}: {a:?}");
            assert_eq!(a.header("x-ratelimit-limit"), Some("5"), "{algo}");
            assert_eq!(a.header("ratelimit-limit"), Some("5"), "{algo}");
            assert_eq!(a.header("x-ratelimit-remaining"), Some(expect_remaining.to_string().as_str()), "{algo}");
            assert_eq!(a.header("ratelimit-remaining"), Some(expect_remaining.to_string().as_str()), "{algo}");
            let reset: u64 = a.header("ratelimit-reset").unwrap().parse().unwrap();
            assert!((1..=7200).contains(&reset), "{algo}: RateLimit-Reset {reset}");
            let unix: u64 = a.header("x-ratelimit-reset").unwrap().parse().unwrap();
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
            assert!(unix >= now && unix <= now + 7201, "{algo}: X-RateLimit-Reset {unix} is Unix seconds");
            assert_eq!(a.header("retry-after"), None);
        }
        let denied = stack.get(&format!("/{algo}/x"));
        assert_eq!(denied.status, 429, "{algo}");
        assert_eq!(denied.header("content-type"), Some("application/json"));
        let retry: u64 = denied.header("retry-after").unwrap().parse().unwrap();
        assert!(retry >= 1, "{algo}");
        assert_eq!(denied.body, format!(r#"{{"error":"rate_limited","rule":"{algo}","retry_after":{retry}}}"#));
        assert_eq!(denied.header("x-ratelimit-remaining"), Some("0"));
        assert_eq!(stack.envoy.stat(&format!("wasmcustom.ratelimit.{algo}.allowed")), 5, "{algo} allowed metric");
        assert_eq!(stack.envoy.stat(&format!("wasmcustom.ratelimit.{algo}.denied")), 1, "{algo} denied metric");
    }
    assert_eq!(stack.backend.served.load(std::sync::atomic::Ordering::Relaxed), 25, "429s never reach the upstream");
}

#[test]
fn response_headers_off_keeps_only_retry_after() {
    let rules =
        r#"{"name":"quiet","key":["client_ip"],"limits":[{"algorithm":"fixed_window","limit":1,"window":"1h"}]}"#;
    let config = plugin_config(rules).replace(r#""domain":"t","#, r#""domain":"t","response_headers":false,"#);
    start_clear_of_boundary(HOUR, Duration::from_secs(30));
    let stack = Stack::start(&config);
    let ok = stack.get("/");
    assert_eq!((ok.status, ok.header("x-ratelimit-limit")), (200, None));
    let denied = stack.get("/");
    assert_eq!(denied.status, 429);
    assert_eq!(denied.header("ratelimit-remaining"), None);
    assert!(denied.header("retry-after").is_some());
}
