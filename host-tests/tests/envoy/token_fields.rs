//! The IETF fields of an LLM rule on real Envoy: a request limit and a
//! token limit, `response_headers: "ietf"`. Token limits have no quota unit
//! in draft-11, so the fields name the request limit only: `RateLimit`
//! shows it even when tokens are the tightest, and a 429 in token debt
//! still names it in `RateLimit-Policy`.

use std::time::{Duration, Instant};

use host_tests::http::{agent, send, Answer};
use host_tests::llm_upstream::LlmUpstream;
use host_tests::ratelimit_fields::{parse_policy, parse_state, QuotaPolicy};
use host_tests::stack::Stack;
use host_tests::windows::{start_clear_of_boundary, HOUR};

/// 60 requests a minute and 1,000 tokens an hour per API key, both fixed
/// windows (exact counts), tokens read from the response body.
const CONFIG: &str = r#"{"domain":"t","store":{"transport":"webdis","cluster":"ratelimit_store","authority":"webdis","timeout_ms":1000},
  "response_headers":"ietf",
  "rules":[{"name":"llm","match":{"path_prefix":"/v1/"},"key":["header:x-api-key"],
    "cost":{"response_body":"usage.total_tokens","default":50,"max":100000},
    "limits":[{"algorithm":"fixed_window","limit":60,"window":"1m","counts":"requests"},
              {"algorithm":"fixed_window","limit":1000,"window":"1h"}]}]}"#;

fn chat(stack: &Stack, usage: &str) -> Answer {
    let url = format!("http://127.0.0.1:{}/v1/chat/completions", stack.envoy.port);
    send(&agent(Duration::from_secs(30)), "POST", &url, &[("x-api-key", "fields"), ("x-usage", usage)])
}

/// Waits until the rule has charged `want` tokens in all (charges land
/// after the response).
fn wait_charged(stack: &Stack, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while stack.envoy.stat("wasmcustom.ratelimit.llm.charged_units") < want {
        assert!(Instant::now() < deadline, "never charged {want} tokens");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The request limit as `RateLimit-Policy` names it: one policy, `llm/1m`.
fn request_policy(a: &Answer) -> QuotaPolicy {
    let field = a.header("ratelimit-policy").unwrap_or_else(|| panic!("no RateLimit-Policy: {a:?}"));
    let mut policies = parse_policy(field).unwrap();
    assert_eq!(policies.len(), 1, "the token limit is not named: {field}");
    let p = policies.remove(0);
    assert_eq!((p.name.as_str(), p.q, p.w, p.qu.as_deref()), ("llm/1m", 60, Some(60), None), "{field}");
    assert_eq!(p.pk.as_ref().map(Vec::len), Some(8), "{field}");
    p
}

#[test]
fn the_fields_name_the_request_limit_when_tokens_are_tightest_and_when_a_token_debt_refuses() {
    // Fixed windows: the hour's token count and the minute's request count
    // must not start again during the test.
    start_clear_of_boundary(HOUR, Duration::from_secs(90));
    start_clear_of_boundary(Duration::from_secs(60), Duration::from_secs(30));
    let upstream = LlmUpstream::start();
    let stack = Stack::start_with_upstream(CONFIG, upstream.port);
    let mut pk = None;
    // Tokens left before each response: 1000, 520, 40; requests: 59, 58, 57.
    for (i, charged_after) in [480, 960, 1440].into_iter().enumerate() {
        let a = chat(&stack, "480");
        assert_eq!(a.status, 200, "{a:?}");
        assert_eq!(a.header("x-ratelimit-remaining"), None, "ietf only");
        let policy = request_policy(&a);
        assert_eq!(*pk.get_or_insert(policy.pk.clone()), policy.pk, "one partition");
        // The third time tokens (40 left) are tighter than requests (57):
        // `RateLimit` still shows the tightest of the limits it may name.
        let state = parse_state(a.header("ratelimit").unwrap_or_else(|| panic!("no RateLimit: {a:?}"))).unwrap();
        assert_eq!(state.len(), 1);
        assert_eq!((state[0].name.as_str(), state[0].r), ("llm/1m", 59 - i as u64));
        assert!(state[0].t.is_some_and(|t| (1..=60).contains(&t)), "{state:?}");
        assert_eq!(state[0].pk, policy.pk);
        wait_charged(&stack, charged_after);
    }
    // 1,440 of 1,000 tokens: in debt until the hour ends. The charge's
    // answer puts the client in the deny cache; the first 429 may still be
    // the store's, when it comes before that answer is read (charged_units
    // counts a charge as it is sent), and the store's 429 is cached too: the
    // second comes from the deny cache either way.
    for i in 0..2 {
        let hits = stack.envoy.stat("wasmcustom.ratelimit.llm.deny_cache_hits");
        let a = chat(&stack, "480");
        if i == 1 {
            assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.llm.deny_cache_hits"), hits + 1, "from the deny cache");
        }
        assert_eq!(a.status, 429, "{a:?}");
        let retry: u64 = a.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=3600).contains(&retry), "{retry}");
        assert_eq!(request_policy(&a).pk, pk.clone().unwrap(), "the same partition");
        assert_eq!(a.header("ratelimit"), None, "no limit in the fields refused it: {a:?}");
    }
    assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.llm.charged_units"), 1440, "a refused request is not charged");
}
