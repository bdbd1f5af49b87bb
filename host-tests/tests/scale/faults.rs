//! Store faults with one proxy: Redis paused (every decision still comes
//! back by its call's timeout, by the failure policy), Redis restarted
//! empty and webdis killed (both recover with nobody acting), and the open
//! breaker (no store calls, counted on both sides).
//!
//! How long each decision took is printed, never asserted: a loaded
//! machine stretches it. That a decision waited for one store call's
//! timeout and no more is shown by Envoy's counters instead: the calls the
//! filter made, the requests sent to the store's cluster (a retry would be
//! one more), and the ones that ended by Envoy's timeout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use host_tests::http::Answer;
use host_tests::settle::settles_at;
use host_tests::stack::{command_calls, Stack};
use host_tests::windows::{start_clear_of_boundary, DAY};

use crate::plugin_config;

const RULES: &str = r#"
  {"name":"open","match":{"path_prefix":"/open"},"key":["header:x-user"],"failure_mode":"open",
   "limits":[{"algorithm":"sliding_window","limit":1000,"window":"1d"}]},
  {"name":"closed","match":{"path_prefix":"/closed"},"key":["header:x-user"],"failure_mode":"closed",
   "limits":[{"algorithm":"fixed_window","limit":1000,"window":"1d"}]}"#;

/// The store call's timeout in these tests.
const TIMEOUT_MS: u64 = 500;
/// Store calls that ended by Envoy's timeout (its async client counts them
/// on the store's cluster): proof that a decision came from the timeout,
/// not from a fast failure or by luck.
const TIMEOUTS: &str = "cluster.ratelimit_store.upstream_rq_timeout";
/// Requests sent to the store's cluster.
const CALLS_SENT: &str = "cluster.ratelimit_store.upstream_rq_total";

fn config(failures: u32, open: &str) -> String {
    // No INFO within a test: Envoy counts it among the requests sent to the
    // store (every 10 s by default, from each worker: a test slowed past
    // 10 s by a loaded machine counted two more).
    plugin_config(
        &format!(
            r#","timeout_ms":{TIMEOUT_MS},"stats_interval":"1h","circuit_breaker":{{"failures":{failures},"open":"{open}"}}"#
        ),
        "",
        RULES,
    )
}

/// The stack with `config(failures, open)`, started clear of a day's
/// boundary: the closed rule counts in a fixed window of a day, exactly.
fn start(failures: u32, open: &str) -> Stack {
    start_clear_of_boundary(DAY, Duration::from_secs(120));
    Stack::start(&config(failures, open))
}

fn get(stack: &Stack, path: &str, user: &str) -> Answer {
    stack.send("GET", path, &[("x-user", user)])
}

/// `(answer, milliseconds)` of one request.
fn timed(stack: &Stack, path: &str, user: &str) -> (Answer, u64) {
    let start = Instant::now();
    let a = get(stack, path, user);
    (a, start.elapsed().as_millis() as u64)
}

/// Polls `/closed` as `user` until the store decides again; the answer.
fn until_decided(stack: &Stack, user: &str, within: Duration) -> Answer {
    let deadline = Instant::now() + within;
    loop {
        let a = get(stack, "/closed", user);
        if a.status == 200 {
            return a;
        }
        assert_eq!(a.status, 503, "{a:?}");
        assert!(Instant::now() < deadline, "decisions did not resume within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn remaining(a: &Answer) -> Option<&str> {
    a.header("x-ratelimit-remaining")
}

#[test]
fn a_paused_redis_never_holds_a_decision_longer_than_the_timeout() {
    // The breaker never opens here: every request really waits on the store.
    let stack = Arc::new(start(1000, "1s"));
    assert_eq!(remaining(&get(&stack, "/closed", "warm")), Some("999"));
    let timeouts_before = stack.envoy.stat(TIMEOUTS);
    let sent_before = stack.envoy.stat(CALLS_SENT);
    let calls_before = stack.envoy.stat("wasmcustom.ratelimit.store_calls");
    let decisions_before = stack.envoy.stat("wasmcustom.ratelimit.store_decisions");
    stack.redis.process.signal("STOP");
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let stack = stack.clone();
            std::thread::spawn(move || {
                let user = format!("client{t}");
                (0..6).map(|i| timed(&stack, if i % 2 == 0 { "/open" } else { "/closed" }, &user)).collect::<Vec<_>>()
            })
        })
        .collect();
    let answers: Vec<(Answer, u64)> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    stack.redis.process.signal("CONT");
    let mut ms: Vec<u64> = answers.iter().map(|(_, ms)| *ms).collect();
    ms.sort_unstable();
    eprintln!(
        "paused Redis, timeout {TIMEOUT_MS} ms: {} decisions, min {} ms, median {} ms, max {} ms",
        ms.len(),
        ms[0],
        ms[ms.len() / 2],
        ms[ms.len() - 1]
    );
    // Every decision waited for its store call's timeout, and no longer:
    // 36 decisions, in as many calls as batching made, each sent once (no
    // retry) and ended by Envoy's timeout; each answered by its rule's
    // failure policy (below), not by a store that came back.
    let calls = stack.envoy.stat("wasmcustom.ratelimit.store_calls") - calls_before;
    assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.store_decisions") - decisions_before, 36);
    assert!((1..=36).contains(&calls), "{calls} calls");
    assert_eq!(stack.envoy.stat(CALLS_SENT) - sent_before, calls, "requests sent to the store");
    assert_eq!(stack.envoy.stat(TIMEOUTS) - timeouts_before, calls, "store calls that timed out");
    for (a, _) in &answers {
        match a.header("x-ratelimit-limit") {
            // Open: the local fallback bucket (fleet_size 1: the whole limit).
            Some("1000") => assert_eq!(a.status, 200, "{a:?}"),
            // Closed: 503, never 429.
            _ => assert_eq!((a.status, a.body.as_str()), (503, r#"{"error":"rate_limiter_unavailable"}"#)),
        }
    }
    assert_eq!(answers.iter().filter(|(a, _)| a.status == 200).count(), 18);
    assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.open.fallback_allowed"), 18);
    assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.closed.fail_closed"), 18);
    // Back: the store decides again (once webdis has run what it queued).
    assert_eq!(until_decided(&stack, "after", Duration::from_secs(30)).header("x-ratelimit-limit"), Some("1000"));
    // The calls that timed out had reached Redis's socket: they ran when it
    // resumed, so each client's 3 stalled requests per rule count against its
    // limit although the failure policy answered them (stricter, never looser).
    for t in 0..6 {
        for path in ["/closed", "/open"] {
            let a = get(&stack, path, &format!("client{t}"));
            assert_eq!(remaining(&a), Some("996"), "client{t} on {path} after the pause: {a:?}");
        }
    }
}

/// How many probes the breaker's schedule fits in `ms` after it opened:
/// waits of 1 s doubling up to `open_ms`, each probe failing at once.
fn schedule_instants(ms: u64, open_ms: u64) -> u64 {
    let (mut at, mut wait, mut n) = (1_000, 1_000, 0);
    while at <= ms {
        n += 1;
        wait = (wait * 2).min(open_ms);
        at += wait;
    }
    n
}

#[test]
fn while_the_breaker_is_open_a_hundred_requests_make_only_its_probes() {
    let stack = start(3, "5s");
    assert_eq!(get(&stack, "/closed", "warm").status, 200);
    let calls_before = stack.envoy.stat("wasmcustom.ratelimit.store_calls");
    let evalsha_before = stack.evalsha_calls();
    let timeouts_before = stack.envoy.stat(TIMEOUTS);
    stack.redis.process.signal("STOP");
    // Three timeouts open the breaker: once the third call's timeout has
    // run, which is at least TIMEOUT_MS after the third request was sent.
    let mut opened = Instant::now();
    for i in 0..3 {
        if i == 2 {
            opened = Instant::now() + Duration::from_millis(TIMEOUT_MS);
        }
        let (a, ms) = timed(&stack, "/closed", "abuser");
        eprintln!("store paused, call {i}: 503 after {ms} ms (timeout {TIMEOUT_MS} ms)");
        assert_eq!(a.status, 503);
    }
    assert_eq!(stack.envoy.stat(TIMEOUTS) - timeouts_before, 3);
    let calls_open = stack.envoy.stat("wasmcustom.ratelimit.store_calls");
    let sent_open = stack.envoy.stat(CALLS_SENT);
    assert_eq!(calls_open - calls_before, 3);
    // 100 requests over 6 s or more: answered by the policy, without a
    // store call, except the probes of the breaker's schedule (1 s after it
    // opened, then 2 s, 4 s and 5 s, the open period, after each failure).
    let mut ms_all = Vec::new();
    for i in 0..100 {
        std::thread::sleep(Duration::from_millis(60));
        let open = i % 2 == 0;
        let (a, ms) = timed(&stack, if open { "/open" } else { "/closed" }, &format!("c{}", i % 7));
        assert_eq!(a.status, if open { 200 } else { 503 }, "{a:?}");
        ms_all.push(ms);
    }
    // At least as long as the breaker has been open (it opened no earlier
    // than `opened`).
    let open_for = opened.elapsed();
    let probes = stack.envoy.stat("wasmcustom.ratelimit.store_calls") - calls_open;
    ms_all.sort_unstable();
    let waited = ms_all.iter().filter(|ms| **ms >= TIMEOUT_MS).count();
    eprintln!(
        "breaker open {open_for:?}: 100 requests, {probes} store calls (probes), median {} ms, max {} ms, \
         {waited} took {TIMEOUT_MS} ms or more",
        ms_all[50], ms_all[99]
    );
    // No more probes than the schedule has instants in that time (each wait
    // counts from the failure of the previous probe, so a probe's own
    // timeout only delays the next)...
    let allowed = schedule_instants(open_for.as_millis() as u64, 5_000);
    assert!((1..=allowed).contains(&probes), "{probes} store calls in {open_for:?}; the schedule allows {allowed}");
    // ...which are the only requests that left Envoy for the store, and the
    // only calls that waited for a timeout: every other request was answered
    // without a store call, so without waiting for one.
    assert_eq!(stack.envoy.stat(CALLS_SENT) - sent_open, probes, "requests sent to the store");
    assert_eq!(stack.envoy.stat(TIMEOUTS) - timeouts_before, 3 + probes, "store calls that timed out");
    stack.redis.process.signal("CONT");
    // Redis side: the EVALSHAs webdis had queued ran when it resumed; they
    // are exactly the three that opened the breaker and the probes, and no
    // more come after them.
    settles_at("EVALSHA run for the calls of the outage", 3 + probes, true, || stack.evalsha_calls() - evalsha_before);
    // The breaker closes on its next probe.
    let a = until_decided(&stack, "later", Duration::from_secs(30));
    assert_eq!(a.header("x-ratelimit-limit"), Some("1000"));
}

#[test]
fn redis_restarted_empty_is_used_again_without_anyone_acting() {
    let mut stack = start(3, "1s");
    for expect in ["999", "998"] {
        assert_eq!(remaining(&get(&stack, "/closed", "alice")), Some(expect));
    }
    stack.redis.restart(&[]);
    // Empty: no counters, no script. The filter's EVALSHA gets NOSCRIPT,
    // loads the script and retries; the budget starts again.
    let a = until_decided(&stack, "alice", Duration::from_secs(30));
    assert_eq!(remaining(&a), Some("999"), "{a:?}");
    assert_eq!(remaining(&get(&stack, "/closed", "alice")), Some("998"));
    assert_eq!(remaining(&get(&stack, "/open", "bob")), Some("999"));
    assert!(command_calls(&stack.redis, "script|load") >= 1, "the filter did not load the script");
    let without_ttl = {
        let mut c = stack.redis.connect();
        crate::scan_keys(&mut c).iter().filter(|k| redis::cmd("PTTL").arg(*k).query::<i64>(&mut c).unwrap() < 0).count()
    };
    assert_eq!(without_ttl, 0);
}

#[test]
fn webdis_killed_and_restarted_is_used_again_without_anyone_acting() {
    let mut stack = start(3, "1s");
    for expect in ["999", "998"] {
        assert_eq!(remaining(&get(&stack, "/closed", "alice")), Some(expect));
    }
    stack.webdis.process.signal("KILL");
    // Down: closed → 503, open → the fallback bucket.
    let down = get(&stack, "/closed", "alice");
    assert_eq!(down.status, 503, "{down:?}");
    let open = get(&stack, "/open", "bob");
    assert_eq!((open.status, open.header("x-ratelimit-limit")), (200, Some("1000")));
    assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.open.fallback_allowed"), 1);
    stack.webdis.restart();
    // Back: Redis kept the counters, so alice continues where she was.
    let a = until_decided(&stack, "alice", Duration::from_secs(30));
    assert_eq!(remaining(&a), Some("997"), "{a:?}");
    assert_eq!(remaining(&get(&stack, "/closed", "alice")), Some("996"));
}
