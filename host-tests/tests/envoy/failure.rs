//! Redis down: open rules serve through the fallback share, closed rules
//! answer 503; Redis back: decisions resume; a SCRIPT FLUSH is invisible.

use std::time::{Duration, Instant};

use host_tests::stack::Stack;
use host_tests::windows::{start_clear_of_boundary, HOUR};

use crate::plugin_config;

const RULES: &str = r#"
  {"name":"open","match":{"path_prefix":"/open"},"key":["client_ip"],"fleet_size":2,"failure_mode":"open",
   "limits":[{"algorithm":"sliding_window","limit":10,"window":"1h"}]},
  {"name":"closed","match":{"path_prefix":"/closed"},"key":["client_ip"],"failure_mode":"closed",
   "limits":[{"algorithm":"fixed_window","limit":10,"window":"1h"}]}"#;

#[test]
fn redis_down_then_back() {
    // The fallback bucket and the fixed window count in one aligned hour.
    start_clear_of_boundary(HOUR, Duration::from_secs(60));
    let mut stack = Stack::start(&plugin_config(RULES));
    assert_eq!(stack.get("/open").header("x-ratelimit-remaining"), Some("9"));
    stack.redis.process.stop();

    // Open: this proxy's share, 10 / 2 = 5 per window, then 429 (never 503).
    let statuses: Vec<u16> = (0..8).map(|_| stack.get("/open").status).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429]);
    let a = stack.get("/open");
    assert_eq!(
        a.body,
        format!(r#"{{"error":"rate_limited","rule":"open","retry_after":{}}}"#, a.header("retry-after").unwrap())
    );
    // Closed: 503, never 429.
    let c = stack.get("/closed");
    assert_eq!(c.status, 503);
    assert_eq!(c.body, r#"{"error":"rate_limiter_unavailable"}"#);
    assert_eq!(c.header("retry-after"), Some("1"));
    assert!(stack.envoy.stat("wasmcustom.ratelimit.open.fallback_allowed") == 5);
    assert!(stack.envoy.stat("wasmcustom.ratelimit.closed.fail_closed") >= 1);

    // Back, empty. Within the breaker's open period plus a probe, the store
    // decides again: the full limit of 10, not the fallback share.
    stack.redis.restart(&[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let a = stack.get("/closed");
        if a.status == 200 {
            assert_eq!(a.header("x-ratelimit-limit"), Some("10"));
            assert_eq!(a.header("x-ratelimit-remaining"), Some("9"));
            break;
        }
        assert_eq!(a.status, 503);
        assert!(Instant::now() < deadline, "decisions did not resume after Redis came back");
        std::thread::sleep(Duration::from_millis(200));
    }
    let remaining: Vec<String> =
        (0..3).map(|_| stack.get("/closed").header("x-ratelimit-remaining").unwrap_or("-").to_string()).collect();
    assert_eq!(remaining, ["8", "7", "6"]);
}

#[test]
fn a_script_flush_mid_run_is_invisible_to_clients() {
    start_clear_of_boundary(HOUR, Duration::from_secs(30));
    let stack = Stack::start(&plugin_config(RULES));
    let remaining = |s: &Stack| {
        let a = s.get("/closed");
        assert_eq!(a.status, 200);
        a.header("x-ratelimit-remaining").unwrap().to_string()
    };
    assert_eq!(remaining(&stack), "9");
    assert_eq!(remaining(&stack), "8");
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut stack.redis.connect()).unwrap();
    assert_eq!(remaining(&stack), "7");
    assert_eq!(remaining(&stack), "6");
    assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.closed.store_errors"), 0);
}
