//! Token budgets on real Envoy and Redis, with an upstream that answers
//! like an LLM API: usage read from the JSON body, from a Server-Sent
//! Events stream and from a header, charged after the response.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use host_tests::envoy::start_from_template;
use host_tests::http::{agent, send, Answer};
use host_tests::llm_upstream::LlmUpstream;
use host_tests::stack::Stack;
use host_tests::windows::{start_clear_of_boundary, HOUR};

use crate::{charged, wait_charged};
use ratelimit::identity::digest;

/// One rule keyed by `x-api-key`: `limits` (JSON), the cost from `cost` (JSON).
fn config(cost: &str, limits: &str, mode: &str) -> String {
    format!(
        r#"{{"domain":"t","store":{{"transport":"webdis","cluster":"ratelimit_store","authority":"webdis","timeout_ms":1000,
            "circuit_breaker":{{"failures":1000,"open":"1s"}}}},"rules":[
          {{"name":"llm","match":{{"path_prefix":"/v1/"}},"key":["header:x-api-key"],"failure_mode":"{mode}",
            "cost":{cost},"limits":[{limits}]}}]}}"#
    )
}

const BODY: &str = r#"{"response_body":"usage.total_tokens","default":50,"max":100000}"#;
const HOUR_TOKENS: &str = r#"{"algorithm":"fixed_window","limit":100000,"window":"1h"}"#;

fn chat(stack: &Stack, key: &str, extra: &[(&str, &str)]) -> Answer {
    chat_at(stack.envoy.port, key, extra)
}

/// The same through the Envoy listening on `port`.
fn chat_at(port: u16, key: &str, extra: &[(&str, &str)]) -> Answer {
    let mut headers = vec![("x-api-key", key)];
    headers.extend_from_slice(extra);
    send(&agent(Duration::from_secs(60)), "POST", &format!("http://127.0.0.1:{port}/v1/chat/completions"), &headers)
}

/// Sends a slow request (answered after 1.5 s), stops Redis once the
/// upstream has it (its check passed with the store up), and returns its
/// answer: the charge finds the store gone.
fn slow_request_losing_the_store(stack: &mut Stack, upstream: &LlmUpstream, key: &str, usage: &str) -> Answer {
    let port = stack.envoy.port;
    let redis = &mut stack.redis;
    let served = || upstream.served.load(Ordering::Relaxed);
    let before = served();
    std::thread::scope(|s| {
        let t = s.spawn(move || chat_at(port, key, &[("x-usage", usage), ("x-delay-ms", "1500")]));
        let deadline = Instant::now() + Duration::from_secs(20);
        while served() == before {
            assert!(Instant::now() < deadline, "the request never reached the upstream");
            std::thread::sleep(Duration::from_millis(5));
        }
        redis.process.stop();
        t.join().unwrap()
    })
}

/// Every test here counts in hour windows: all of it in one.
fn in_one_hour() {
    start_clear_of_boundary(HOUR, Duration::from_secs(120));
}

#[test]
fn the_usage_each_response_reports_is_charged_exactly() {
    in_one_hour();
    let upstream = LlmUpstream::start();
    let stack = Stack::start_with_upstream(&config(BODY, HOUR_TOKENS, "open"), upstream.port);
    for _ in 0..5 {
        let a = chat(&stack, "json", &[("x-usage", "123")]);
        assert_eq!(a.status, 200);
        assert!(a.body.contains(r#""total_tokens":123"#), "the body passes unchanged: {}", a.body);
    }
    wait_charged(&stack, "json", 5 * 123, true);
    for _ in 0..5 {
        let a = chat(&stack, "sse", &[("x-usage", "77"), ("x-stream", "100")]);
        assert_eq!(a.status, 200);
        let tail = a.body.get(a.body.len().saturating_sub(300)..).unwrap_or(&a.body);
        assert_eq!(
            a.body.matches("data: ").count(),
            101,
            "every event and [DONE] pass: {} bytes, headers {:?}, ending {tail:?}",
            a.body.len(),
            a.headers
        );
    }
    wait_charged(&stack, "sse", 5 * 77, true);
    // A response without usage: what it delivered, at least the default
    // (a short body, 3 events); a body that is not JSON: the max.
    chat(&stack, "missing", &[("x-usage", "missing")]);
    chat(&stack, "missing", &[("x-usage", "missing"), ("x-stream", "3")]);
    wait_charged(&stack, "missing", 50 + 50, true);
    // (A 5xx from Envoy instead would be charged as an answer without usage.)
    assert_eq!(chat(&stack, "missing", &[("x-usage", "garbled")]).status, 200);
    wait_charged(&stack, "missing", 50 + 100_000 + 50, true);
    assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.llm.usage_missing"), 2);
    assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.llm.usage_unreadable"), 1);
    assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.llm.charges"), 13);
    assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.llm.charged_units"), 5 * 123 + 5 * 77 + 50 + 100_000 + 50);
}

#[test]
fn usage_from_a_response_header_is_charged() {
    in_one_hour();
    let upstream = LlmUpstream::start();
    let cost = r#"{"response_header":"x-usage-tokens","default":9,"max":1000}"#;
    let stack = Stack::start_with_upstream(&config(cost, HOUR_TOKENS, "open"), upstream.port);
    chat(&stack, "h", &[("x-usage", "5"), ("x-usage-header", "40")]);
    chat(&stack, "h", &[("x-usage", "5"), ("x-usage-header", "99999")]);
    chat(&stack, "h", &[("x-usage", "5"), ("x-usage-header", "4x")]);
    // 99999 is capped at max; "4x" is unreadable: max too.
    wait_charged(&stack, "h", 40 + 1000 + 1000, true);
}

#[test]
fn a_spent_budget_denies_with_the_tokens_remaining_until_the_debt_is_repaid() {
    in_one_hour();
    let upstream = LlmUpstream::start();
    let limit = r#"{"algorithm":"fixed_window","limit":1000,"window":"1h"}"#;
    let stack = Stack::start_with_upstream(&config(BODY, limit, "open"), upstream.port);
    for (remaining, charged_after) in [("1000", 400), ("600", 800), ("200", 1200)] {
        let a = chat(&stack, "k", &[("x-usage", "400")]);
        assert_eq!((a.status, a.header("x-ratelimit-limit")), (200, Some("1000")));
        assert_eq!(a.header("x-ratelimit-remaining"), Some(remaining), "tokens left before this response");
        wait_charged(&stack, "k", charged_after, true);
    }
    // 1200 of 1000: in debt until the window ends.
    let a = chat(&stack, "k", &[("x-usage", "400")]);
    assert_eq!(a.status, 429);
    assert_eq!(a.header("x-ratelimit-remaining"), Some("0"));
    let retry: u64 = a.header("retry-after").unwrap().parse().unwrap();
    let reset: u64 = a.header("ratelimit-reset").unwrap().parse().unwrap();
    assert_eq!(retry, reset, "the debt of a fixed window ends with the window");
    assert!(retry <= 3600);
    assert_eq!(charged(&stack, "k"), 1200, "a refused request is not charged");
    // The charge that spent the budget put the client in the deny cache.
    assert!(stack.envoy.stat("wasmcustom.ratelimit.llm.deny_cache_hits") >= 1);
}

#[test]
fn two_proxies_share_one_budget() {
    in_one_hour();
    let upstream = LlmUpstream::start();
    let limit = r#"{"algorithm":"sliding_window","limit":1000,"window":"1h"}"#;
    let stack = Stack::start_with_upstream(&config(BODY, limit, "open"), upstream.port);
    let other = start_from_template(upstream.port, stack.webdis.port, Some(&config(BODY, limit, "open")), 2).unwrap();
    let via = |port: u16| chat_at(port, "shared", &[("x-usage", "300")]);
    let mut statuses = Vec::new();
    for i in 0..6 {
        let port = if i % 2 == 0 { stack.envoy.port } else { other.port };
        statuses.push(via(port).status);
        if statuses.last() == Some(&200) {
            let want = 300 * statuses.iter().filter(|s| **s == 200).count() as u64;
            wait_sliding(&stack, "shared", want);
        }
    }
    assert_eq!(statuses, [200, 200, 200, 200, 429, 429], "1200 of 1000 after the fourth, whichever proxy");
}

/// Waits until `key`'s sliding-window counters hold `want`.
fn wait_sliding(stack: &Stack, key: &str, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut c = stack.redis.connect();
    loop {
        let keys: Vec<String> =
            redis::cmd("KEYS").arg(format!("t:{{{}}}:llm:sw:*", digest(key))).query(&mut c).unwrap();
        let got: u64 =
            keys.iter().map(|k| redis::cmd("GET").arg(k).query::<Option<u64>>(&mut c).unwrap().unwrap_or(0)).sum();
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{key}: {got}, never {want}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_budget_running_out_is_overshot_by_the_requests_in_flight_and_no_more() {
    in_one_hour();
    let upstream = LlmUpstream::start();
    let limit = r#"{"algorithm":"fixed_window","limit":1000,"window":"1h"}"#;
    let stack = Stack::start_with_upstream(&config(BODY, limit, "open"), upstream.port);
    let port = stack.envoy.port;
    // 900 of 1000 spent, one charge at a time.
    for spent in 1..=9 {
        assert_eq!(chat(&stack, "burst", &[("x-usage", "100")]).status, 200);
        wait_charged(&stack, "burst", 100 * spent, true);
    }
    // Eight at once, answered 3 s after they reach the upstream, 200 ms
    // apart: each passes its check (100 left) before any usage is known.
    let served = || upstream.served.load(Ordering::Relaxed);
    let before = served();
    let in_flight = AtomicU64::new(8);
    let (wave, probes) = std::thread::scope(|s| {
        let threads: Vec<_> = (0..8u64)
            .map(|i| {
                let delay = (3_000 + 200 * i).to_string();
                let in_flight = &in_flight;
                s.spawn(move || {
                    let a = chat_at(port, "burst", &[("x-usage", "100"), ("x-delay-ms", &delay)]);
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    a.status
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        while served() < before + 8 {
            let answered = 8 - in_flight.load(Ordering::SeqCst);
            assert_eq!(answered, 0, "answered before the upstream had all eight: refused with 100 left");
            assert!(Instant::now() < deadline, "the eight never all reached the upstream");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(charged(&stack, "burst"), 900, "all eight checked before any of them was charged");
        // The first charge spends the budget (1000): from then on, while
        // the other seven are in flight, every request is refused.
        while charged(&stack, "burst") < 1000 {
            assert!(Instant::now() < deadline, "the first of the eight was never charged");
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut probes = Vec::new();
        while in_flight.load(Ordering::SeqCst) > 0 {
            probes.push(chat_at(port, "burst", &[("x-usage", "100")]).status);
            std::thread::sleep(Duration::from_millis(20));
        }
        (threads.into_iter().map(|t| t.join().unwrap()).collect::<Vec<u16>>(), probes)
    });
    assert_eq!(wave, [200; 8]);
    let admitted = probes.iter().filter(|s| **s == 200).count();
    assert!(!probes.is_empty(), "no request was sent while the seven were in flight");
    assert!(probes.iter().all(|s| matches!(s, 200 | 429)), "{probes:?}");
    assert_eq!(
        admitted,
        0,
        "{admitted} of {} requests admitted past the spent budget while seven were in flight",
        probes.len()
    );
    // The overshoot is the cost of the seven in flight when it ran out.
    wait_charged(&stack, "burst", 1000 + 7 * 100, true);
    // Spent: 32 more at once are refused whole, and charged nothing.
    let refused: Vec<u16> = std::thread::scope(|s| {
        let threads: Vec<_> =
            (0..32).map(|_| s.spawn(move || chat_at(port, "burst", &[("x-usage", "100")]).status)).collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert_eq!(refused, [429; 32]);
    wait_charged(&stack, "burst", 1700, true);
    assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.llm.charges"), 9 + 8, "one charge per admitted response");
}

#[test]
fn a_twenty_megabyte_stream_passes_through_in_flat_memory() {
    in_one_hour();
    let upstream = LlmUpstream::start();
    let stack = Stack::start_with_upstream(&config(BODY, HOUR_TOKENS, "open"), upstream.port);
    chat(&stack, "warm", &[("x-usage", "1"), ("x-stream", "10")]);
    let rss = || -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", stack.envoy.process.pid())).unwrap();
        status.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap().trim().trim_end_matches(" kB").parse().unwrap()
    };
    let before = rss();
    // 1000 events of 20 KB: 20 MB through the filter, usage in the last event.
    let a = chat(&stack, "big", &[("x-usage", "4321"), ("x-stream", "1000"), ("x-pad-bytes", "20000")]);
    assert_eq!(a.status, 200);
    assert!(a.body.len() > 20_000_000, "{} bytes", a.body.len());
    wait_charged(&stack, "big", 4321, true);
    let grown_kb = rss().saturating_sub(before);
    assert!(grown_kb < 8 * 1024, "Envoy grew by {grown_kb} kB for a 20 MB stream");
}

#[test]
fn a_stream_reset_before_the_usage_charges_at_least_the_default() {
    in_one_hour();
    let upstream = LlmUpstream::start();
    let stack = Stack::start_with_upstream(&config(BODY, HOUR_TOKENS, "open"), upstream.port);
    let raw = host_tests::raw_http::RawRequest::new("POST", b"/v1/chat/completions")
        .header("x-api-key", b"reset")
        .header("x-usage", b"500")
        .header("x-stream", b"10")
        .header("x-reset-after", b"5");
    let _ = raw.send(stack.envoy.port);
    // 5 events delivered: an estimate of 5, below the default of 50.
    wait_charged(&stack, "reset", 50, true);
}

#[test]
fn a_charge_the_store_cannot_take_spends_the_fallback_share_and_never_blocks_the_response() {
    in_one_hour();
    let upstream = LlmUpstream::start();
    let limit = r#"{"algorithm":"fixed_window","limit":1000,"window":"1h"}"#;
    let mut stack = Stack::start_with_upstream(&config(BODY, limit, "open"), upstream.port);
    let a = slow_request_losing_the_store(&mut stack, &upstream, "down", "900");
    assert_eq!(a.status, 200, "the response is never blocked by a charge");
    let deadline = Instant::now() + Duration::from_secs(20);
    while stack.envoy.stat("wasmcustom.ratelimit.llm.charge_errors") < 1 {
        assert!(Instant::now() < deadline, "the failed charge was not counted");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Open: the local fallback share (1000 here) has the 900 charged: one more
    // request passes its check (reserve 1), is charged 900 too, and then the
    // share is spent.
    assert_eq!(chat(&stack, "down", &[("x-usage", "900")]).status, 200);
    while stack.envoy.stat("wasmcustom.ratelimit.llm.charge_errors") < 2 {
        assert!(Instant::now() < deadline, "the second failed charge was not counted");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(chat(&stack, "down", &[("x-usage", "900")]).status, 429);
}

#[test]
fn a_fail_closed_rule_answers_503_once_the_store_is_gone_even_after_a_charge_failed() {
    in_one_hour();
    let upstream = LlmUpstream::start();
    let limit = r#"{"algorithm":"fixed_window","limit":1000,"window":"1h"}"#;
    let mut stack = Stack::start_with_upstream(&config(BODY, limit, "closed"), upstream.port);
    let a = slow_request_losing_the_store(&mut stack, &upstream, "closed", "10");
    assert_eq!(a.status, 200, "already let through: the charge cannot refuse it");
    let deadline = Instant::now() + Duration::from_secs(20);
    while stack.envoy.stat("wasmcustom.ratelimit.llm.charge_errors") < 1 {
        assert!(Instant::now() < deadline, "the failed charge was not counted");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(chat(&stack, "closed", &[("x-usage", "10")]).status, 503);
}
