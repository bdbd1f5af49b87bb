//! Token budgets on NGINX: the usage read from the JSON body or the last
//! Server-Sent Event of the response, charged once, exactly. A charge goes
//! out with the client's next request or on the timer (NGINX lets a call
//! start only from a request's own callbacks or the timer).

use std::time::Duration;

use host_tests::llm_upstream::LlmUpstream;
use host_tests::nginx::NginxStack;
use host_tests::settle::settles_at;
use host_tests::windows::{start_clear_of_boundary, HOUR};

use crate::plugin;

/// The units charged to every client of the rule `llm`: its windows' counts.
fn charged(stack: &NginxStack) -> u64 {
    let mut redis = stack.redis.connect();
    let keys: Vec<String> = redis::cmd("KEYS").arg("ngx:*:llm:*").query(&mut redis).unwrap();
    keys.iter().map(|k| redis::cmd("GET").arg(k).query::<u64>(&mut redis).unwrap()).sum()
}

/// Waits until the charges come to `want` and stay there for a quiet
/// period: one charged twice shows, however late within it.
fn wait_charged(stack: &NginxStack, want: u64) {
    settles_at("charged", want, true, || charged(stack));
}

#[test]
fn usage_from_a_json_body_and_from_a_stream_is_charged_exactly_once() {
    start_clear_of_boundary(HOUR, Duration::from_secs(120));
    let upstream = LlmUpstream::start();
    let rules = r#"{"name":"llm","key":["header:x-api-key"],
        "cost":{"response_body":"usage.total_tokens","default":50,"max":100000},
        "limits":[{"algorithm":"fixed_window","limit":100000,"window":"1h"}]}"#;
    let stack = NginxStack::start_to(&plugin(rules), upstream.port);
    for usage in ["100", "200", "300"] {
        let a = stack.send("POST", "/v1/chat/completions", &[("x-api-key", "k"), ("x-usage", usage)]);
        assert_eq!(a.status, 200);
    }
    wait_charged(&stack, 600);
    let a = stack.send("POST", "/v1/chat/completions", &[("x-api-key", "k"), ("x-usage", "77"), ("x-stream", "20")]);
    assert_eq!(a.status, 200);
    assert!(a.body.contains("[DONE]"));
    wait_charged(&stack, 677);
    assert!(!stack.nginx.workers_crashed() && !stack.nginx.store_failed(), "{}", stack.nginx.log());
}
