//! What a client sees from NGINX: the 429 with Retry-After and its JSON
//! body, the rate-limit headers on allowed responses, and denials served
//! from the deny cache (shared memory, both worker processes) with no
//! store call.

use host_tests::nginx::NginxStack;
use host_tests::stack::command_calls;
use host_tests::windows::{start_clear_of_boundary, HOUR};

use crate::plugin;

#[test]
fn a_denial_is_a_429_with_retry_after_and_the_allowed_carry_the_rate_limit_headers() {
    start_clear_of_boundary(HOUR, std::time::Duration::from_secs(120));
    let stack = NginxStack::start(&plugin(
        r#"{"name":"api","key":["header:x-user"],"limits":[{"algorithm":"fixed_window","limit":2,"window":"1h"}]}"#,
    ));
    let first = stack.send("GET", "/a", &[("x-user", "h")]);
    assert_eq!(first.status, 200);
    assert_eq!(first.header("x-ratelimit-limit"), Some("2"));
    assert_eq!(first.header("x-ratelimit-remaining"), Some("1"));
    assert_eq!(first.header("ratelimit-limit"), Some("2"));
    assert_eq!(first.header("ratelimit-remaining"), Some("1"));
    assert_eq!(stack.send("GET", "/a", &[("x-user", "h")]).header("ratelimit-remaining"), Some("0"));
    let denied = stack.send("GET", "/a", &[("x-user", "h")]);
    assert_eq!(denied.status, 429);
    let retry: u64 = denied.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=3600).contains(&retry), "{retry}");
    // ngx_wasm_module ends a local response's body with a line feed.
    assert_eq!(denied.body, format!("{{\"error\":\"rate_limited\",\"rule\":\"api\",\"retry_after\":{retry}}}\n"));
    assert_eq!(denied.header("content-type"), Some("application/json"));
    assert_eq!(denied.header("ratelimit-remaining"), Some("0"));
    // Known denied: the next denials, on either worker process, come from
    // the deny cache in shared memory, with no store call.
    let calls = command_calls(&stack.redis, "evalsha");
    for _ in 0..20 {
        assert_eq!(stack.send("GET", "/a", &[("x-user", "h")]).status, 429);
    }
    assert_eq!(command_calls(&stack.redis, "evalsha"), calls, "denials answered without the store");
    assert!(!stack.nginx.workers_crashed() && !stack.nginx.store_failed(), "{}", stack.nginx.log());
    // The access log's fields (proxy_set_property) cost NGINX no error line.
    assert!(!stack.nginx.log().contains("property"), "{}", stack.nginx.log());
}
