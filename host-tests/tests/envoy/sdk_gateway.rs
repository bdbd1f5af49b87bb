//! The official OpenAI Python SDK through `envoy-config/llm-gateway.yaml`
//! as shipped (reservation, per API key per model): its retries wait what
//! Retry-After says, each model has its own budget, 50 concurrent calls
//! never take a budget past its limit, and a stream with
//! `stream_options.include_usage` is settled to its usage exactly.

use std::sync::Arc;
use std::time::{Duration, Instant};

use host_tests::envoy::Edit;
use host_tests::llm_gateway::{LlmGateway, TEST_TIMEOUT};
use host_tests::sdk::{python, python_after};
use host_tests::settle::settles_at;
use host_tests::windows::{start_clear_of_boundary, HOUR};

/// The SDK's client on the gateway; `seen` lists every HTTP answer it got
/// (monotonic seconds, status, retry-after).
const CLIENT: &str = r#"
import os, time, threading, openai
import httpx2 as httpx  # the SDK's own HTTP client (openai 3.x)
seen = []
def hook(r):
    seen.append((time.monotonic(), r.status_code, r.headers.get("retry-after")))
def client(retries, usage, **headers):
    headers["x-usage"] = str(usage)
    return openai.OpenAI(base_url="http://127.0.0.1:%s/v1" % os.environ["PORT"], api_key="sk-gateway",
                         max_retries=retries, default_headers=headers,
                         http_client=httpx.Client(event_hooks={"response": [hook]}))
hi = [{"role": "user", "content": "hi"}]
"#;

fn wait_stat(gw: &LlmGateway, event: &str, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while gw.stat(event) < want {
        assert!(Instant::now() < deadline, "{event}: {} of {want}", gw.stat(event));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(gw.stat(event), want, "{event}");
}

/// What rule `llm`'s fixed hour windows hold in Redis, every key summed.
fn window_held(gw: &LlmGateway) -> u64 {
    let held = gw.redis_dump().into_iter().filter(|(k, _)| k.contains(":llm:fw:3600000:"));
    held.map(|(_, v)| v.parse::<u64>().unwrap()).sum()
}

#[test]
fn each_model_has_its_own_budget_and_the_sdk_says_which_limit_and_how_long() {
    start_clear_of_boundary(HOUR, Duration::from_secs(120));
    let gw = LlmGateway::start(&[TEST_TIMEOUT]);
    let out = python(
        &format!(
            "{CLIENT}{}",
            r#"
c = client(0, 100000)
c.chat.completions.create(model="gpt-4o", messages=hi)
for model in ["gpt-4o", "gpt-4o-mini"]:
    try:
        c.chat.completions.create(model=model, messages=hi)
        print(model, "admitted")
    except openai.RateLimitError as e:
        print(model, e.status_code, e.body["code"], e.body["type"], "|", e.body["message"])
"#
        ),
        gw.envoy.port,
    );
    let lines: Vec<&str> = out.lines().collect();
    let [spent, other] = lines[..] else { panic!("{out}") };
    let (head, message) = spent.split_once(" | ").unwrap();
    assert_eq!(head, "gpt-4o 429 rate_limit_exceeded tokens");
    assert!(
        message.starts_with("Rate limit reached for rule llm: limit 100000 tokens per 1h. Please try again in "),
        "{message}"
    );
    assert_eq!(other, "gpt-4o-mini admitted", "another model, another budget");
}

#[test]
fn the_sdk_retries_a_429_no_sooner_than_its_retry_after() {
    let gw = Arc::new(LlmGateway::start(&[TEST_TIMEOUT]));
    let mut slow = Vec::new();
    // The SDK set up first (its imports take seconds on a loaded machine);
    // then eight completions of one key and model hold every slot for 3 s,
    // and only then does it call: refused at once, whatever it took to start.
    let out = python_after(
        &format!(
            "{CLIENT}{}",
            r#"
import sys
c = client(8, 10)
print("ready", flush=True)
sys.stdin.readline()
c.chat.completions.create(model="gpt-4o-mini", messages=hi)
for t, status, retry in seen:
    print("%.3f %d %s" % (t, status, retry))
"#
        ),
        gw.envoy.port,
        || {
            slow = (0..8)
                .map(|_| {
                    let gw = gw.clone();
                    std::thread::spawn(move || {
                        gw.chat(&[("authorization", "Bearer sk-gateway"), ("x-usage", "10"), ("x-delay-ms", "3000")])
                    })
                })
                .collect();
            wait_stat(&gw, "slots_taken", 8);
        },
    );
    for t in slow {
        assert_eq!(t.join().unwrap().status, 200);
    }
    let answers: Vec<(f64, u16, Option<f64>)> = out
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].parse().unwrap(), f[1].parse().unwrap(), f[2].parse().ok())
        })
        .collect();
    assert!(answers.len() >= 2 && answers[0].1 == 429, "refused while the eight run: {out}");
    assert_eq!(answers.last().unwrap().1, 200, "{out}");
    for pair in answers.windows(2) {
        let ((t0, status, retry), (t1, _, _)) = (pair[0], pair[1]);
        assert_eq!(status, 429, "{out}");
        let retry = retry.unwrap_or_else(|| panic!("a 429 without Retry-After: {out}"));
        assert!((1.0..=2.0).contains(&retry), "{out}");
        assert!(t1 - t0 >= retry, "retried {:.3} s after a Retry-After of {retry}: {out}", t1 - t0);
    }
}

#[test]
fn fifty_concurrent_sdk_calls_never_take_the_budget_past_its_limit() {
    start_clear_of_boundary(HOUR, Duration::from_secs(120));
    let gw = LlmGateway::start(&[TEST_TIMEOUT]);
    // Each reserves 30,000 tokens plus its body's bytes and uses 30,000:
    // three fit in 100,000, whatever the interleaving.
    let out = python(
        &format!(
            "{CLIENT}{}",
            r#"
c = client(0, 30000, **{"x-delay-ms": "300"})
results = []
def call():
    try:
        c.chat.completions.create(model="gpt-4o", messages=hi, max_tokens=30000)
        results.append("ok")
    except openai.RateLimitError:
        results.append("limited")
threads = [threading.Thread(target=call) for _ in range(50)]
[t.start() for t in threads]
[t.join() for t in threads]
print(results.count("ok"), results.count("limited"))
"#
        ),
        gw.envoy.port,
    );
    assert_eq!(out, "3 47");
    settles_at("charged_units", 3 * 30_000, true, || gw.stat("charged_units"));
}

#[test]
fn a_stream_with_include_usage_is_settled_to_its_usage_exactly() {
    start_clear_of_boundary(HOUR, Duration::from_secs(120));
    // Tokens in a fixed window, so the store's count is exact to the unit.
    let window = Edit {
        from: r#"{ "algorithm": "token_bucket", "limit": 100000, "window": "1h" }"#,
        to: r#"{ "algorithm": "fixed_window", "limit": 100000, "window": "1h" }"#,
    };
    let gw = LlmGateway::start(&[TEST_TIMEOUT, window]);
    let out = python(
        &format!(
            "{CLIENT}{}",
            r#"
c = client(0, 321, **{"x-stream": "10"})
stream = c.chat.completions.create(model="gpt-4o", messages=hi, max_tokens=2000, stream=True,
                                   stream_options={"include_usage": True})
print([chunk.usage.total_tokens for chunk in stream if chunk.usage][-1])
"#
        ),
        gw.envoy.port,
    );
    assert_eq!(out, "321");
    settles_at("charged_units", 321, true, || gw.stat("charged_units"));
    // Reservation 2,000 and more; settled: the window holds exactly 321.
    settles_at("the window", 321, false, || window_held(&gw));
}

#[test]
fn a_budget_in_money_across_models_is_charged_to_the_micro_dollar() {
    start_clear_of_boundary(HOUR, Duration::from_secs(120));
    // $50 an hour per key across models, in micro-dollars: prices per
    // million tokens (gpt-4o $2.50 in, $10 out, cached input $1.25 off the
    // input price; gpt-4o-mini $0.15, $0.60, $0.075).
    let edits = [
        TEST_TIMEOUT,
        Edit { from: r#""key": ["header:authorization", "body:model"],"#, to: r#""key": ["header:authorization"],"# },
        Edit {
            from: r#""cost": { "response_body": [["usage.total_tokens", "response.usage.total_tokens"]],
                                    "default": 1000, "max": 200000, "hang_up": "max", "include_usage": true,"#,
            to: r#""cost": { "response_body": ["usage.prompt_tokens", "usage.completion_tokens", "usage.prompt_tokens_details.cached_tokens"],
                                    "default": 1000, "max": 200000, "hang_up": "max",
                                    "prices": { "model": "model", "per": 1000000, "models": {
                                      "gpt-4o": { "usage.prompt_tokens": 2500000, "usage.completion_tokens": 10000000, "usage.prompt_tokens_details.cached_tokens": -1250000 },
                                      "gpt-4o-mini": { "usage.prompt_tokens": 150000, "usage.completion_tokens": 600000, "usage.prompt_tokens_details.cached_tokens": -75000 } } },"#,
        },
        Edit {
            from: r#"{ "algorithm": "token_bucket", "limit": 100000, "window": "1h" }"#,
            to: r#"{ "algorithm": "fixed_window", "limit": 50000000, "window": "1h" }"#,
        },
    ];
    let gw = LlmGateway::start(&edits);
    let out = python(
        &format!(
            "{CLIENT}{}",
            r#"
client(0, 500, **{"x-prompt": "1000", "x-cached": "400"}).chat.completions.create(model="gpt-4o", messages=hi)
client(0, 333, **{"x-prompt": "1000"}).chat.completions.create(model="gpt-4o-mini", messages=hi)
try:
    client(0, 1).chat.completions.create(model="gpt-5-unpriced", messages=hi)
    print("admitted")
except openai.BadRequestError as e:
    # The SDK keeps the body's "error" member as e.body.
    print(e.status_code, e.body, "|", e.response.json()["detail"])
"#
        ),
        gw.envoy.port,
    );
    assert_eq!(out, "400 model_not_priced | the model the request names has no price");
    // gpt-4o: 1,000 × 2.5 + 500 × 10 - 400 × 1.25 = 7,000 µ$; gpt-4o-mini:
    // 1,000 × 0.15 + 333 × 0.6 = 349.8, rounded up: 350.
    settles_at("charged_units", 7_000 + 350, true, || gw.stat("charged_units"));
    // Both reservations settled to the micro-dollar.
    settles_at("the window", 7_350, false, || window_held(&gw));
}

#[test]
fn a_stream_with_the_sdks_default_options_is_charged_its_usage_and_shows_none() {
    let gw = LlmGateway::start(&[TEST_TIMEOUT]);
    let out = python(
        &format!(
            "{CLIENT}{}",
            r#"
chunks = list(client(0, 321, **{"x-stream": "4"}).chat.completions.create(model="gpt-4o", messages=hi, stream=True))
print(len(chunks), [c.usage for c in chunks].count(None), sum(1 for c in chunks if not c.choices))
"#
        ),
        gw.envoy.port,
    );
    assert_eq!(out, "4 4 0", "four chunks, none with a usage, none without choices: what OpenAI sends");
    wait_stat(&gw, "charges", 1);
    assert_eq!(gw.stat("charged_units"), 321);
}

#[test]
fn a_responses_api_stream_is_charged_the_usage_of_its_completed_event() {
    let gw = LlmGateway::start(&[TEST_TIMEOUT]);
    let out = python(
        &format!(
            "{CLIENT}{}",
            r#"
events = list(client(0, 60400, **{"x-stream": "3", "x-prompt": "400"}).responses.create(model="gpt-4o", input="hi", stream=True))
print(events[-1].type, events[-1].response.usage.total_tokens)
"#
        ),
        gw.envoy.port,
    );
    assert_eq!(out, "response.completed 60400");
    wait_stat(&gw, "charges", 1);
    assert_eq!(gw.stat("charged_units"), 60_400, "past its reservation: the rest charged");
}
