//! A burst on one worker: thousands of requests of one client waiting at
//! once, answered slowly, then thousands of answers charging together,
//! with a healthy store. Every decision is the store's and every charge
//! reaches Redis.

use std::time::{Duration, Instant};

use host_tests::burst::keep_alive_burst;
use host_tests::envoy::Edit;
use host_tests::llm_upstream::LlmUpstream;
use host_tests::stack::Stack;
use ratelimit::identity::digest;

const CONNECTIONS: usize = 4000;
const PER_CONNECTION: usize = 3;
const USAGE: u64 = 7;

fn config() -> String {
    r#"{"domain":"t","store":{"transport":"webdis","cluster":"ratelimit_store","authority":"webdis","timeout_ms":5000,
        "batch":{"max_in_flight":8,"max_decisions":256}},"rules":[
      {"name":"llm","match":{"path_prefix":"/v1/"},"key":["header:x-api-key"],"failure_mode":"closed",
       "cost":{"response_body":"usage.total_tokens","default":1,"max":1000},
       "limits":[{"algorithm":"sliding_window","limit":1000000000,"window":"1h","counts":"requests"},
                 {"algorithm":"fixed_window","limit":1000000000,"window":"1h"}]}]}"#
        .to_string()
}

/// The hour-window token count of `key` in Redis.
fn charged(stack: &Stack, key: &str) -> u64 {
    let mut c = stack.redis.connect();
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("t:{{{}}}:llm:fw:*", digest(key))).query(&mut c).unwrap();
    keys.iter().map(|k| redis::cmd("GET").arg(k).query::<Option<u64>>(&mut c).unwrap().unwrap_or(0)).sum()
}

#[test]
fn four_thousand_slow_requests_on_one_worker_are_all_decided_and_charged_exactly() {
    let upstream = LlmUpstream::start();
    // The upstream cluster must take 4,000 requests at once (Envoy's default
    // circuit breakers stop at 1,024): the filter is what is under test.
    // And wait for it: on a loaded machine 4,000 threads each answering after
    // 2 s can take longer than the shipped 5 s route timeout.
    let edits = [
        Edit { from: "timeout: 5s", to: "timeout: 60s" },
        Edit {
        from: "connect_timeout: 1s",
        to: "connect_timeout: 10s\n    circuit_breakers: { thresholds: [ { max_connections: 100000, max_pending_requests: 100000, max_requests: 100000 } ] }",
    },
    ];
    let stack =
        Stack::start_edited_to(&config(), 1, Some(upstream.port), &edits, &[]).unwrap_or_else(|e| panic!("{}", e.log));
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: llm\r\nx-api-key: burst\r\nx-usage: {USAGE}\r\nx-delay-ms: 2000\r\ncontent-length: 0\r\n\r\n"
    );
    let started = Instant::now();
    let statuses =
        keep_alive_burst(stack.envoy.port, CONNECTIONS, PER_CONNECTION, request.as_bytes(), Duration::from_secs(60));
    let took = started.elapsed();
    let count = |s: u16| statuses.iter().filter(|x| **x == s).count();
    let mut by_status = std::collections::BTreeMap::new();
    for s in &statuses {
        *by_status.entry(*s).or_insert(0) += 1;
    }
    let stat = |e: &str| stack.envoy.stat(&format!("wasmcustom.ratelimit.llm.{e}"));
    let report = format!(
        "statuses {by_status:?} in {took:?}; store_errors {} fail_closed {} overloaded {} charge_errors {} charges {} store_calls {} store_decisions {}\n{}",
        stat("store_errors"), stat("fail_closed"), stat("overloaded"), stat("charge_errors"), stat("charges"),
        stack.envoy.stat("wasmcustom.ratelimit.store_calls"), stack.envoy.stat("wasmcustom.ratelimit.store_decisions"),
        stack.envoy.log().lines().filter(|l| l.contains("ratelimit")).collect::<Vec<_>>().join("\n")
    );
    eprintln!("{report}");
    let all = CONNECTIONS * PER_CONNECTION;
    assert_eq!(count(200), all, "{report}");
    for event in ["store_errors", "fail_closed", "overloaded", "charge_errors"] {
        assert_eq!(stat(event), 0, "{event}: {report}");
    }
    let want = USAGE * all as u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while charged(&stack, "burst") < want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(charged(&stack, "burst"), want, "{report}");
}
