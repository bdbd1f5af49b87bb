//! A hot client that went over its limit in one window is leased again in
//! the next: the store's view that sized its asks at 0 ("nothing left")
//! held only until that window ended.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use host_tests::stack::Stack;
use host_tests::windows::start_clear_of_boundary;

use crate::plugin_config;

const WINDOW: Duration = Duration::from_secs(10);
const LIMIT: usize = 30;

/// Sleeps until just past the next multiple of `WINDOW`.
fn until_next_window() {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis();
    let left = WINDOW.as_millis() - now % WINDOW.as_millis();
    std::thread::sleep(Duration::from_millis(u64::try_from(left).unwrap() + 100));
}

#[test]
fn a_client_over_its_limit_in_one_window_is_leased_again_in_the_next() {
    let rules = format!(
        r#"{{"name":"hot","key":["header:x-user"],"lease":{{"max_units":10,"max_age":"5s"}},
            "limits":[{{"algorithm":"fixed_window","limit":{LIMIT},"window":"10s"}}]}}"#
    );
    // One worker: every request meets the same heat.
    let stack = Stack::try_start(&plugin_config(&rules), 1).unwrap_or_else(|e| panic!("{}", e.log));
    let leased = || stack.envoy.stat("wasmcustom.ratelimit.hot.lease_allowed");
    let offer = |n: usize| (0..n).filter(|_| stack.send("GET", "/", &[("x-user", "u")]).status == 200).count();
    // A window in which the client asks for more than its limit.
    start_clear_of_boundary(WINDOW, Duration::from_secs(6));
    assert_eq!(offer(40), LIMIT, "exactly the limit of 40 offered");
    let over_limit_leased = leased();
    assert!(over_limit_leased > 0, "the hot client was leased before it reached its limit");
    // The next window: below its limit, and hot from its first requests.
    until_next_window();
    assert_eq!(offer(20), 20);
    let again = leased() - over_limit_leased;
    assert!(again >= 10, "{again} of 20 requests from leases in the window after the denial");
}
