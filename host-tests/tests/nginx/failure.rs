//! When Redis dies behind NGINX: a fail-open rule admits exactly its local
//! share (shared by both worker processes), a fail-closed rule answers
//! 503; once Redis is back, the store decides again.

use std::time::{Duration, Instant};

use host_tests::nginx::NginxStack;
use host_tests::windows::{start_clear_of_boundary, HOUR};

use crate::plugin;

#[test]
fn redis_down_fails_open_within_the_local_share_or_closed_then_recovers() {
    start_clear_of_boundary(HOUR, Duration::from_secs(300));
    let rules = r#"{"name":"open","match":{"path_prefix":"/open"},"key":["header:x-user"],"failure_mode":"open",
        "limits":[{"algorithm":"fixed_window","limit":4,"window":"1h"}]},
      {"name":"closed","match":{"path_prefix":"/closed"},"key":["header:x-user"],"failure_mode":"closed",
        "limits":[{"algorithm":"fixed_window","limit":4,"window":"1h"}]}"#;
    let mut stack = NginxStack::start(&plugin(rules));
    assert_eq!(stack.send("GET", "/open", &[("x-user", "before")]).status, 200);
    stack.redis.process.stop();
    // Each request on a connection of its own: both worker processes take
    // from the one local share in shared memory.
    let statuses: Vec<u16> = (0..10).map(|_| stack.send("GET", "/open", &[("x-user", "o")]).status).collect();
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 4, "{statuses:?}");
    assert!(statuses.iter().all(|s| *s == 200 || *s == 429), "{statuses:?}");
    for _ in 0..3 {
        assert_eq!(stack.send("GET", "/closed", &[("x-user", "c")]).status, 503);
    }
    stack.redis.restart(&[]);
    // The breaker lets a probe through within its first wait (1 s); a
    // fresh client is then decided by the store.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let a = stack.send("GET", "/closed", &[("x-user", "after")]);
        if a.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "still {} after Redis came back:\n{}", a.status, stack.nginx.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let key_count: usize = redis::cmd("DBSIZE").query(&mut stack.redis.connect()).unwrap();
    assert!(key_count >= 1, "the healed store counted it");
    assert!(!stack.nginx.workers_crashed(), "{}", stack.nginx.log());
}
