//! A concurrency limit on NGINX: at most the limit in flight across both
//! worker processes, and a slot freed whatever ends its stream (completed,
//! cut by the upstream, the client gone).

use std::time::{Duration, Instant};

use host_tests::held_streams::{open, HeldStreams};
use host_tests::nginx::NginxStack;

use crate::plugin;

/// Opens stream `tag` for `user` once a slot is free (a slot frees when
/// NGINX finishes the request that held it, then with the next call).
fn open_when_free(port: u16, user: &str, tag: &str) -> host_tests::held_streams::OpenStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match open(port, "/s", user, tag, &[]) {
            host_tests::held_streams::Opened::Streaming(s) => return s,
            host_tests::held_streams::Opened::Answered(a) => {
                assert_eq!(a.status, 429, "{}", a.body);
                assert!(Instant::now() < deadline, "no slot freed for {tag}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

#[test]
fn streams_in_flight_never_pass_the_limit_and_every_way_a_stream_ends_frees_its_slot() {
    let upstream = HeldStreams::start();
    let rules =
        r#"{"name":"cc","key":["header:x-user"],"limits":[{"algorithm":"concurrency","limit":2,"max_hold":"60s"}]}"#;
    let stack = NginxStack::start_to(&plugin(rules), upstream.port());
    let port = stack.nginx.port;
    let a = open_when_free(port, "u", "a");
    let b = open_when_free(port, "u", "b");
    assert!(upstream.wait_open("u", 2, Duration::from_secs(5)));
    let refused = open(port, "/s", "u", "c", &[]).answer();
    assert_eq!(refused.status, 429);
    assert_eq!(refused.header("retry-after"), Some("1"));
    // Completed: its slot frees.
    assert!(upstream.complete("a"));
    let _ = a.read_rest();
    let c = open_when_free(port, "u", "c");
    // Cut by the upstream.
    assert!(upstream.cut("b"));
    let _ = b.read_rest();
    let d = open_when_free(port, "u", "d");
    // The client gone.
    c.hang_up();
    let e = open_when_free(port, "u", "e");
    assert_eq!(upstream.max_open("u"), 2, "never more than the limit in flight");
    drop((d, e));
    assert!(!stack.nginx.workers_crashed() && !stack.nginx.store_failed(), "{}", stack.nginx.log());
}
