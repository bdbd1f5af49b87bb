//! Recovery with the breaker a user gets by default (3 failures, open
//! 30 s): once the breaker has opened and a probe has failed, a Redis that
//! comes back is used again at the breaker's next probe, within the wait
//! its failed probes set (seconds), not after the open period.

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

/// The breaker's wait after `failed` probes failed in a row (the
/// defaults: 1 s doubling, at most the open period, 30 s).
fn wait_after(failed: u64) -> Duration {
    Duration::from_secs((1u64 << failed.min(5)).min(30))
}

#[test]
fn a_redis_that_comes_back_is_used_again_at_the_breakers_next_probe_with_the_default_breaker() {
    let mut stack = Stack::start(CONFIG);
    assert_eq!(stack.get("/closed").status, 200);
    let sent_before = stack.envoy.stat(CALLS_SENT);
    stack.redis.process.stop();
    let port = stack.envoy.port;
    // A client asking every 50 ms, recording when each answer came and
    // how long it took.
    let answers: Mutex<Vec<(Instant, u16, Duration)>> = Mutex::new(Vec::new());
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let agent = agent(Duration::from_secs(10));
            while !done.load(Ordering::Relaxed) {
                let asked = Instant::now();
                let a = send(&agent, "GET", &format!("http://127.0.0.1:{port}/closed"), &[]);
                answers.lock().unwrap().push((Instant::now(), a.status, asked.elapsed()));
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
        // `restart` returns once the new server answers. Every call sent
        // before then failed but the three that opened the breaker: its
        // probes, as many as the restart took (a slow one, more). The next
        // probe comes within the wait they set.
        let back = Instant::now();
        let failed_probes = stack.envoy.stat(CALLS_SENT) - sent_before - 3;
        let deadline = back + Duration::from_secs(40);
        let first_200 = loop {
            let found =
                answers.lock().unwrap().iter().find(|(at, status, _)| *at > back && *status == 200).map(|a| a.0);
            if let Some(at) = found {
                break at;
            }
            assert!(Instant::now() < deadline, "no 200 within 40 s of Redis answering again");
            std::thread::sleep(Duration::from_millis(20));
        };
        done.store(true, Ordering::Relaxed);
        let after = first_200 - back;
        // What an answer took here while the breaker answered: the
        // machine's pace, for the probe's own trip and the client's.
        let slowest = answers.lock().unwrap().iter().map(|a| a.2).max().unwrap();
        let wait = wait_after(failed_probes);
        eprintln!(
            "first 200 {after:?} after Redis answered again; {failed_probes} probes had failed (a wait of {wait:?}); slowest answer {slowest:?}"
        );
        assert!(wait < Duration::from_secs(30), "{failed_probes} failed probes: the restart took the open period");
        // A probe out when Redis came back fails at most one call timeout
        // (1 s) later, and sets the wait from then.
        let bound = wait + Duration::from_secs(1) + 2 * slowest + Duration::from_millis(500);
        assert!(
            after <= bound,
            "the first 200 came {after:?} after Redis answered again, past the next probe ({bound:?})"
        );
        let statuses: Vec<u16> = answers.lock().unwrap().iter().map(|a| a.1).collect();
        let last_503 = statuses.iter().rposition(|s| *s == 503).unwrap();
        assert!(
            statuses[..last_503].iter().all(|s| *s == 503) && statuses[last_503 + 1..].iter().all(|s| *s == 200),
            "503 while the store was down, 200 once it was used again, never anything else: {statuses:?}"
        );
    });
}
