//! The plugin's timer under steady traffic. Envoy starts the timer again
//! at every period set; a decision queued for a call slot shortens the
//! period and the call that takes it lengthens it again, every few ms
//! under load. Were each of those to set the period, the timer would never
//! run out: no INFO, no permit renewals, no body timeouts.

use std::time::{Duration, Instant};

use host_tests::stack::Stack;

#[test]
fn info_is_read_every_interval_while_traffic_keeps_the_queue_busy() {
    // One call in flight at a time: decisions of 16 clients queue for it.
    let config = r#"{"store":{"cluster":"ratelimit_store","authority":"webdis","stats_interval":"1s",
        "timeout_ms":1000,"batch":{"max_in_flight":1}},
        "rules":[{"name":"api","key":["client_ip"],"limits":[{"limit":100000000,"window":"1h"}]}]}"#;
    let stack = Stack::start(config);
    let mut c = stack.redis.connect();
    assert_eq!(stack.get("/").status, 200);
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
    let seconds = 8;
    let end = Instant::now() + Duration::from_secs(seconds);
    let sent: u64 = std::thread::scope(|s| {
        let clients: Vec<_> = (0..16)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0;
                    while Instant::now() < end {
                        assert_eq!(stack.get("/").status, 200);
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        clients.into_iter().map(|c| c.join().unwrap()).sum()
    });
    let info: String = redis::cmd("INFO").arg("commandstats").query(&mut c).unwrap();
    let calls = |name: &str| -> u64 {
        let line = info.lines().find_map(|l| l.strip_prefix(name)).unwrap_or("calls=0,");
        line.trim_start_matches("calls=").split(',').next().and_then(|n| n.parse().ok()).unwrap_or(0)
    };
    // One INFO a second on each of the 2 workers (this one not yet
    // counted): 16, and 12 allows two seconds' edges on each. Measured:
    // 18; before the fix, 5 and 6.
    let (infos, decided) = (calls("cmdstat_info:"), calls("cmdstat_evalsha:"));
    assert!(decided >= seconds * 50, "the traffic was not steady: {decided} calls for {sent} requests");
    assert!(infos >= 12, "INFO read {infos} times in {seconds} s of steady traffic ({sent} requests, {decided} calls)");
}
