//! Reservation mode on real Envoy and Redis: each request takes its worst
//! case (the output bound its body states, plus its bytes) at admission,
//! all or nothing, and the response settles it. Concurrent requests
//! against a nearly spent budget cannot take it past its limit together.

use std::time::Duration;

use host_tests::envoy::Edit;
use host_tests::http::{agent, send_body, Answer};
use host_tests::llm_upstream::LlmUpstream;
use host_tests::stack::Stack;
use host_tests::windows::{start_clear_of_boundary, HOUR};

use crate::{charged, plugin_config, wait_charged};

/// 1,000 tokens an hour per API key; a request reserves its `max_tokens`
/// (or 300) plus one token per body byte.
const RESERVED: &str = r#"{"name":"llm","match":{"path_prefix":"/v1/"},"key":["header:x-api-key"],
    "cost":{"response_body":"usage.total_tokens","default":0,"max":100000,"reservation":{"default_output":300}},
    "limits":[{"algorithm":"fixed_window","limit":1000,"window":"1h"}]}"#;

/// Lets the body reach the filter while the headers wait.
const STOP_ITERATION: Edit<'static> = Edit {
    from: "failure_policy: FAIL_RELOAD",
    to: "failure_policy: FAIL_RELOAD\n                allow_on_headers_stop_iteration: true",
};

fn start(rules: &str) -> (Stack, LlmUpstream) {
    start_clear_of_boundary(HOUR, Duration::from_secs(120));
    let upstream = LlmUpstream::start();
    let stack = Stack::start_edited_to(&plugin_config(rules), 2, Some(upstream.port), &[STOP_ITERATION], &[])
        .unwrap_or_else(|e| panic!("{}", e.log));
    (stack, upstream)
}

/// A chat request of `key` with `body`, its answer read whole; `asks`
/// are the upstream's instructions (`x-usage`, `x-stream`, `x-delay-ms`).
fn chat(port: u16, key: &str, body: &str, asks: &[(&str, &str)]) -> Answer {
    let mut headers = vec![("x-api-key", key), ("content-type", "application/json")];
    headers.extend_from_slice(asks);
    let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
    send_body(&agent(Duration::from_secs(60)), "POST", &url, &headers, body.as_bytes())
}

#[test]
fn fifty_concurrent_requests_never_take_a_nearly_spent_budget_past_its_limit() {
    let (stack, _upstream) = start(RESERVED);
    let port = stack.envoy.port;
    let body = r#"{"model":"m","max_tokens":60,"messages":[]}"#;
    let worst = 60 + body.len() as u64; // 104
                                        // Spent down to 3.5 worst cases.
    let spent = 1000 - 3 * worst - worst / 2;
    assert_eq!(chat(port, "k", body, &[("x-usage", &spent.to_string())]).status, 200);
    wait_charged(&stack, "k", spent, false);
    // 50 at once, each using all it reserved and holding it 300 ms.
    let usage = worst.to_string();
    let answers: Vec<Answer> = std::thread::scope(|s| {
        let asks = [("x-usage", usage.as_str()), ("x-delay-ms", "300")];
        let threads: Vec<_> = (0..50).map(|_| s.spawn(move || chat(port, "k", body, &asks))).collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let admitted = answers.iter().filter(|a| a.status == 200).count();
    let denied = answers.iter().filter(|a| a.status == 429).count();
    assert_eq!((admitted, denied), (3, 47), "3.5 worst cases left: 3 fit, whatever the interleaving");
    wait_charged(&stack, "k", spent + 3 * worst, false);
    assert!(spent + 3 * worst <= 1000);
}

#[test]
fn each_response_settles_its_reservation_to_what_it_used() {
    let (stack, _upstream) = start(&RESERVED.replace(r#""limit":1000,"#, r#""limit":100000,"#));
    let port = stack.envoy.port;
    // Used less than reserved: the rest comes back.
    let bounded = r#"{"model":"m","max_tokens":500}"#;
    assert_eq!(chat(port, "k", bounded, &[("x-usage", "37")]).status, 200);
    wait_charged(&stack, "k", 37, false);
    // A stream (stream_options.include_usage): its last event's usage.
    let streamed = r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":90}"#;
    let a = chat(port, "k", streamed, &[("x-usage", "41"), ("x-stream", "20")]);
    assert_eq!((a.status, a.body.matches("data: ").count()), (200, 22), "read whole: 20 chunks, the usage, [DONE]");
    wait_charged(&stack, "k", 37 + 41, false);
    // No bound stated: 300 reserved; the upstream used more: charged all of it.
    assert_eq!(chat(port, "k", r#"{"model":"m"}"#, &[("x-usage", "2000")]).status, 200);
    wait_charged(&stack, "k", 37 + 41 + 2000, false);
    // A bound that is no count is refused before anything is reserved.
    let a = chat(port, "k", r#"{"model":"m","max_tokens":"many"}"#, &[]);
    assert_eq!(
        (a.status, a.body.as_str()),
        (400, r#"{"error":"bad_request_body","rule":"llm","detail":"body:max_tokens must be a non-negative integer"}"#)
    );
    // More than what is left: 429, nothing taken.
    let a = chat(port, "k", r#"{"model":"m","max_tokens":100000}"#, &[]);
    assert_eq!(a.status, 429);
    assert_eq!(charged(&stack, "k"), 37 + 41 + 2000);
}
