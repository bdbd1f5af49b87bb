//! HTTP/2 requests whose body is followed by trailers, on real Envoy: the
//! body's last frame does not end the stream, the trailers do, and Envoy
//! resumes a paused stream when the filter's trailers callback answers
//! Continue. Every such request is decided, and none reaches the upstream
//! before its decision.

use std::time::Duration;

use host_tests::body_upstream::BodyUpstream;
use host_tests::h2_client::{send_all, H2Request};
use host_tests::llm_gateway::{LlmGateway, TEST_TIMEOUT};
use host_tests::stack::Stack;
use host_tests::windows::start_clear_of_boundary;

use crate::plugin_config;
use crate::request_bodies::STOP_ITERATION;

const WITHIN: Duration = Duration::from_secs(60);

fn chat(key: &str, body: &str) -> H2Request {
    H2Request::post("/v1/chat/completions", body.as_bytes(), &[("x-t", "1")])
        .header("authorization", &format!("Bearer {key}"))
        .header("content-type", "application/json")
}

fn statuses(port: u16, requests: &[H2Request]) -> Vec<u16> {
    send_all(port, requests, WITHIN).into_iter().map(|a| a.expect("an answer").status).collect()
}

fn count(statuses: &[u16], status: u16) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}

/// The shipped gateway (per API key and model: 60 requests a minute, 8 at
/// once, a token bucket) reads each body at its trailers: exactly 60 of 70
/// requests in a row go up, and of 20 at once held by the upstream exactly
/// 8; each admitted request took its reservation in the store.
#[test]
fn the_shipped_gateway_decides_every_request_ended_by_trailers() {
    start_clear_of_boundary(Duration::from_secs(60), Duration::from_secs(40));
    let gateway = LlmGateway::start(&[TEST_TIMEOUT]);
    let port = gateway.envoy.port;
    let small = r#"{"model":"gpt-4o-mini","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut in_turn = Vec::new();
    for _ in 0..70 {
        in_turn.extend(statuses(port, &[chat("sk-in-turn", small)]));
    }
    assert_eq!((count(&in_turn, 200), count(&in_turn, 429)), (60, 10), "{in_turn:?}");
    assert_eq!(gateway.upstream.served.load(std::sync::atomic::Ordering::Relaxed), 60);
    let held: Vec<H2Request> = (0..20).map(|_| chat("sk-at-once", small).header("x-delay-ms", "3000")).collect();
    let at_once = statuses(port, &held);
    assert_eq!((count(&at_once, 200), count(&at_once, 429)), (8, 12), "{at_once:?}");
    assert_eq!(gateway.upstream.served.load(std::sync::atomic::Ordering::Relaxed), 68);
    let buckets = gateway.redis_dump().into_iter().filter(|(k, _)| k.contains(":llm:tb:")).count();
    assert_eq!(buckets, 2, "each key's token bucket was written");
}

/// A rule deciding on the headers alone: the body and the trailers reach
/// the filter while the decision is out (allow_on_headers_stop_iteration),
/// and nothing goes up before it.
#[test]
fn a_headers_rule_lets_no_request_up_before_its_decision() {
    let rule = r#"{"name":"per-key","match":{"path_prefix":"/v1/"},"key":["header:x-api-key"],
        "failure_mode":"closed","limits":[{"algorithm":"sliding_log","limit":2,"window":"1h"}]}"#;
    let upstream = BodyUpstream::start();
    let stack = Stack::start_edited_to(&plugin_config(rule), 2, Some(upstream.server.port), &[STOP_ITERATION], &[])
        .unwrap_or_else(|e| panic!("{}", e.log));
    let one = || chat("k", "{}").header("x-api-key", "abc");
    let mut got = Vec::new();
    for _ in 0..6 {
        got.extend(statuses(stack.envoy.port, &[one()]));
    }
    assert_eq!(got, [200, 200, 429, 429, 429, 429]);
    assert_eq!(upstream.server.served.load(std::sync::atomic::Ordering::Relaxed), 2);
}
