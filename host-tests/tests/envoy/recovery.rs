//! Recovery with the breaker a user gets by default (3 failures, open
//! 30 s): once the breaker has opened and a probe has failed, a Redis that
//! comes back is used again within seconds, not after the open period.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use host_tests::http::{agent, send};
use host_tests::stack::Stack;

/// Requests the filter sent to the store's cluster (Envoy counts them).
const CALLS_SENT: &str = "cluster.ratelimit_store.upstream_rq_total";

/// One fail-closed rule; no `circuit_breaker`: the defaults.
const CONFIG: &str = r#"{"domain":"t","store":{"transport":"webdis","cluster":"ratelimit_store","authority":"webdis","timeout_ms":1000},
  "rules":[{"name":"closed","match":{"path_prefix":"/closed"},"key":["client_ip"],"failure_mode":"closed",
            "limits":[{"algorithm":"fixed_window","limit":100000,"window":"1h"}]}]}"#;

/// Waits until Envoy's count of `stat` is at least `want`; its value.
fn wait_stat(stack: &Stack, stat: &str, want: u64, within: Duration) -> u64 {
    let deadline = Instant::now() + within;
    loop {
        let n = stack.envoy.stat(stat);
        if n >= want {
            return n;
        }
        assert!(Instant::now() < deadline, "{stat} is {n}, never {want} within {within:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_redis_that_comes_back_is_used_again_within_three_seconds_with_the_default_breaker() {
    let mut stack = Stack::start(CONFIG);
    assert_eq!(stack.get("/closed").status, 200);
    let sent_before = stack.envoy.stat(CALLS_SENT);
    stack.redis.process.stop();
    let port = stack.envoy.port;
    // A client asking every 50 ms, recording when each answer came.
    let answers: Mutex<Vec<(Instant, u16)>> = Mutex::new(Vec::new());
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let agent = agent(Duration::from_secs(10));
            while !done.load(Ordering::Relaxed) {
                let a = send(&agent, "GET", &format!("http://127.0.0.1:{port}/closed"), &[]);
                answers.lock().unwrap().push((Instant::now(), a.status));
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        // Three failed calls open the breaker; 1 s later one probe goes,
        // and fails (Redis is still down): the wait is now 2 s. Three more
        // answers come meanwhile, from the breaker, without a call.
        wait_stat(&stack, CALLS_SENT, sent_before + 4, Duration::from_secs(20));
        let probed = answers.lock().unwrap().len();
        let deadline = Instant::now() + Duration::from_secs(20);
        while answers.lock().unwrap().len() < probed + 3 {
            assert!(Instant::now() < deadline, "the client got no answer with the breaker open");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(stack.envoy.stat(CALLS_SENT), sent_before + 4, "with the breaker open only its probe was sent");
        stack.redis.restart(&[]);
        // `restart` returns once the new server answers.
        let back = Instant::now();
        let deadline = back + Duration::from_secs(40);
        let first_200 = loop {
            let found = answers.lock().unwrap().iter().find(|(at, status)| *at > back && *status == 200).map(|a| a.0);
            if let Some(at) = found {
                break at;
            }
            assert!(Instant::now() < deadline, "no 200 within 40 s of Redis answering again");
            std::thread::sleep(Duration::from_millis(20));
        };
        done.store(true, Ordering::Relaxed);
        let after = first_200 - back;
        eprintln!("first 200 {after:?} after Redis answered again");
        assert!(after <= Duration::from_secs(3), "the first 200 came {after:?} after Redis answered again");
        let statuses: Vec<u16> = answers.lock().unwrap().iter().map(|a| a.1).collect();
        let last_503 = statuses.iter().rposition(|s| *s == 503).unwrap();
        assert!(
            statuses[..last_503].iter().all(|s| *s == 503) && statuses[last_503 + 1..].iter().all(|s| *s == 200),
            "503 while the store was down, 200 once it was used again, never anything else: {statuses:?}"
        );
    });
}
