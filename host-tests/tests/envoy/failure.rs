//! Redis down: open rules serve through the fallback share, closed rules
//! answer 503; Redis back: decisions resume; a SCRIPT FLUSH is invisible.

use std::time::{Duration, Instant, SystemTime};

use host_tests::stack::Stack;
use host_tests::windows::{start_clear_of_boundary, start_of_next_window, HOUR};

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

/// Each window of the fallback share: 10 s.
const SHARE_WINDOW: Duration = Duration::from_secs(10);
/// Requests a worker must receive in one window: more than the share, so
/// that a share counted per worker would admit more than the proxy's.
const PER_WORKER: u64 = 6;

#[test]
fn while_redis_is_down_the_share_is_the_proxys_across_both_workers_in_each_window() {
    // Open, fleet of 2, 10 per 10 s: this proxy's share is 5 per window,
    // whichever of its two workers the requests reach.
    let rules = r#"{"name":"open","match":{"path_prefix":"/open"},"key":["client_ip"],"fleet_size":2,
        "failure_mode":"open","limits":[{"algorithm":"sliding_window","limit":10,"window":"10s"}]}"#;
    let mut stack = Stack::start(&plugin_config(rules));
    stack.redis.process.stop();
    for window in 0..2u64 {
        let start = start_of_next_window(SHARE_WINDOW);
        let before = stack.envoy.connections_per_worker();
        assert_eq!(before.len(), 2, "Envoy runs two workers");
        // Fresh connections, until each worker had more than the share.
        let mut answers = Vec::new();
        let reached = loop {
            let per_worker: Vec<u64> =
                stack.envoy.connections_per_worker().iter().zip(&before).map(|(n, b)| n - b).collect();
            if per_worker.iter().all(|n| *n >= PER_WORKER) {
                break per_worker;
            }
            assert!(answers.len() < 200, "200 connections and a worker had fewer than {PER_WORKER}: {per_worker:?}");
            answers.push(stack.get_fresh("/open"));
        };
        let now = SystemTime::now();
        assert!(now < start + SHARE_WINDOW, "window {window}: the requests took past the window's end");
        let remaining: Vec<&str> =
            answers.iter().filter(|a| a.status == 200).map(|a| a.header("x-ratelimit-remaining").unwrap()).collect();
        assert_eq!(
            remaining,
            ["4", "3", "2", "1", "0"],
            "window {window}: the proxy's share, once, across workers that had {reached:?} of {} requests",
            answers.len()
        );
        assert!(answers.iter().all(|a| matches!(a.status, 200 | 429)), "window {window}: only 200 and 429");
        assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.open.fallback_allowed"), 5 * (window + 1));
    }
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
