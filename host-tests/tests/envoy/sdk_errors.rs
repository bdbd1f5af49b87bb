//! The official OpenAI and Anthropic Python SDKs (in the project's
//! virtualenv) through real Envoy: a rule with `"error_body": "openai"` or
//! `"anthropic"` makes their `RateLimitError` carry the limit and the wait,
//! and `"response_headers": "openai"` gives them OpenAI's fields.

use host_tests::llm_upstream::LlmUpstream;
use host_tests::sdk::python;
use host_tests::stack::Stack;
use host_tests::windows::{start_clear_of_boundary, HOUR};

use crate::plugin_config;

#[test]
fn the_openai_sdk_raises_rate_limit_error_with_the_limit_and_the_wait() {
    start_clear_of_boundary(HOUR, std::time::Duration::from_secs(120));
    let upstream = LlmUpstream::start();
    let rules = r#"{"name":"llm","key":["header:authorization"],"error_body":"openai","response_headers":"openai",
        "cost":{"response_body":"usage.total_tokens","default":50,"max":100000},
        "limits":[{"algorithm":"fixed_window","limit":2,"window":"1h","counts":"requests"},
                  {"algorithm":"token_bucket","limit":1000,"window":"1h"}]}"#;
    let stack = Stack::start_with_upstream(&plugin_config(rules), upstream.port);
    let out = python(
        r#"
import os, openai
c = openai.OpenAI(base_url="http://127.0.0.1:%s/v1" % os.environ["PORT"], api_key="sk-test", max_retries=0,
                  default_headers={"x-usage": "5"})
ask = lambda: c.chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": "hi"}])
fields = lambda h: " ".join("%s=%s" % (n, h.get("x-ratelimit-%s" % n)) for n in
    ["limit-requests", "remaining-requests", "reset-requests", "limit-tokens", "remaining-tokens"])
print(fields(ask().headers))
ask()
try:
    ask()
    print("admitted")
except openai.RateLimitError as e:
    print(fields(e.response.headers))
    print(e.status_code, e.body["code"], e.body["type"], "|", e.body["message"])
"#,
        stack.envoy.port,
    );
    let lines: Vec<&str> = out.lines().collect();
    let [first, denied_fields, denied] = lines[..] else { panic!("{out}") };
    // Go-style durations, as OpenAI writes them: under an hour, `59m59s`.
    let reset =
        |line: &str| line.split("reset-requests=").nth(1).and_then(|r| r.split(' ').next()).unwrap().to_string();
    assert!(reset(first).ends_with('s') && reset(first).contains('m'), "{first}");
    assert!(first.starts_with("limit-requests=2 remaining-requests=1 reset-requests="), "{first}");
    assert!(first.ends_with("limit-tokens=1000 remaining-tokens=1000"), "{first}");
    assert!(denied_fields.starts_with("limit-requests=2 remaining-requests=0 "), "{denied_fields}");
    let (head, message) = denied.split_once(" | ").unwrap();
    assert_eq!(head, "429 rate_limit_exceeded requests");
    let wait = message
        .strip_prefix("Rate limit reached for rule llm: limit 2 requests per 1h. Please try again in ")
        .and_then(|m| m.strip_suffix("s."))
        .unwrap_or_else(|| panic!("{message}"));
    let wait: u64 = wait.parse().unwrap();
    assert!((1..=3600).contains(&wait), "{wait}");
}

#[test]
fn the_anthropic_sdk_raises_rate_limit_error_with_the_limit_and_the_wait() {
    start_clear_of_boundary(HOUR, std::time::Duration::from_secs(120));
    let upstream = LlmUpstream::start();
    // This SDK sends its key as `Authorization: Bearer` (older ones: `x-api-key`).
    let rules = r#"{"name":"claude","key":["header:authorization"],"error_body":"anthropic",
        "limits":[{"algorithm":"fixed_window","limit":1,"window":"1h"}]}"#;
    let stack = Stack::start_with_upstream(&plugin_config(rules), upstream.port);
    // The one request the limit allows, spent outside the SDK.
    let spent = stack.send("POST", "/v1/messages", &[("authorization", "Bearer sk-ant-test")]);
    assert_eq!((spent.status, spent.header("ratelimit-remaining")), (200, Some("0")), "{:?}", spent.headers);
    let out = python(
        r#"
import os, anthropic
c = anthropic.Anthropic(base_url="http://127.0.0.1:%s" % os.environ["PORT"], api_key="sk-ant-test", max_retries=0)
try:
    c.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    print("admitted")
except anthropic.RateLimitError as e:
    print(e.status_code, e.body["type"], e.body["error"]["type"], "|", e.body["error"]["message"])
"#,
        stack.envoy.port,
    );
    let (head, message) = out.split_once(" | ").unwrap_or_else(|| panic!("{out}"));
    assert_eq!(head, "429 error rate_limit_error");
    assert!(
        message.starts_with("Rate limit reached for rule claude: limit 1 requests per 1h. Please try again in "),
        "{message}"
    );
}
