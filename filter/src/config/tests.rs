use super::*;
use crate::store::Transport;
use wasm_bindgen_test::wasm_bindgen_test;

/// The example of the configuration contract.
pub const EXAMPLE: &str = r#"{ "domain": "shop",
  "store": { "transport": "webdis", "cluster": "ratelimit_store", "authority": "webdis", "timeout_ms": 25 },
  "client_ip": { "xff_trusted_hops": 0 },
  "deny_cache": { "enabled": true, "slots": 4096 },
  "response_headers": true,
  "rules": [
    { "name": "login",
      "match": { "path_prefix": "/login", "methods": ["POST"], "headers": { "x-tier": "free" } },
      "key": ["client_ip"],
      "limits": [ { "algorithm": "sliding_log", "limit": 5, "window": "1h" } ],
      "cost": 1,
      "failure_mode": "closed",
      "shadow": false },
    { "name": "api",
      "match": { "path_prefix": "/api/" },
      "key": ["header:x-api-key"],
      "limits": [ { "algorithm": "sliding_window", "limit": 100, "window": "1m" },
                  { "algorithm": "fixed_window", "limit": 10000, "window": "1d" } ],
      "failure_mode": "open",
      "fleet_size": 4 } ] }"#;

fn error_of(json: &str) -> String {
    crate::config::load(json.as_bytes()).unwrap_err().to_string()
}

/// The example with `rules[1]` replaced.
fn with_api_rule(rule: &str) -> String {
    let (head, _) = EXAMPLE.split_once(r#"{ "name": "api","#).unwrap();
    format!("{head}{rule} ] }}")
}

#[test]
#[wasm_bindgen_test]
fn the_documented_example_parses_with_its_values_and_defaults() {
    let c = Config::parse(EXAMPLE.as_bytes()).unwrap();
    assert_eq!(c.domain, "shop");
    assert_eq!(c.store.transport, Transport::Webdis);
    assert_eq!(
        (c.store.cluster.as_str(), c.store.authority.as_str(), c.store.timeout.ms()),
        ("ratelimit_store", "webdis", 25)
    );
    assert_eq!(
        c.store.breaker,
        Breaker {
            failures: 3,
            open: crate::time::Millis::of(30_000),
            slot_records: std::num::NonZeroU32::new(4096).unwrap()
        }
    );
    assert_eq!(c.deny_cache, DenyCache { enabled: true, slots: std::num::NonZeroU32::new(4096).unwrap() });
    let login = &c.rules[0];
    assert_eq!(login.matcher.methods, ["POST"]);
    assert_eq!(login.matcher.headers, [("x-tier".to_string(), "free".to_string())]);
    assert_eq!(login.key, [KeyPart::ClientIp]);
    assert_eq!(login.failure_mode, FailureMode::Closed);
    assert_eq!(login.limits[0].spec.window_ms, 3_600_000);
    let api = &c.rules[1];
    assert_eq!(api.key, [KeyPart::Header("x-api-key".into())]);
    assert_eq!((&api.cost, api.fleet_size.get(), api.shadow), (&Cost::Fixed(1), 4, false));
    assert_eq!(api.limits[1].spec.window_ms, 86_400_000);
    assert_eq!(c.groups.len(), 2, "different keys: separate calls");
}

#[test]
#[wasm_bindgen_test]
fn minimal_config_gets_every_default() {
    let c = Config::parse(
        br#"{"store":{"cluster":"s"},"rules":[{"name":"all","key":["client_ip"],"limits":[{"limit":10,"window":"1s"}]}]}"#,
    )
    .unwrap();
    assert_eq!(c.domain, "rl");
    assert_eq!((c.store.authority.as_str(), c.store.timeout.ms()), ("s", 25));
    assert_eq!(c.xff_trusted_hops, 0);
    assert_eq!(c.headers, HeaderStyle::LEGACY);
    assert_eq!(c.retry_after_jitter_ppm, 0);
    let r = &c.rules[0];
    assert_eq!(r.limits[0].spec.algorithm, crate::algorithm::Algorithm::SlidingWindow);
    assert_eq!((&r.cost, r.fleet_size.get(), r.failure_mode, r.shadow), (&Cost::Fixed(1), 1, FailureMode::Open, false));
    assert_eq!(r.matcher, Matcher::default());
}

#[test]
#[wasm_bindgen_test]
fn burst_defaults_to_the_limit_for_token_bucket_and_one_for_gcra() {
    let c = Config::parse(
        with_api_rule(
            r#"{"name":"a","key":["client_ip"],"limits":[
        {"algorithm":"token_bucket","limit":10,"window":"1s"},
        {"algorithm":"gcra","limit":10,"window":"1m"},
        {"algorithm":"gcra","limit":10,"window":"1h","burst":4}]}"#,
        )
        .as_bytes(),
    )
    .unwrap();
    let b: Vec<u64> = c.rules[1].limits.iter().map(|l| l.spec.burst).collect();
    assert_eq!(b, [10, 1, 4]);
}

#[test]
#[wasm_bindgen_test]
fn each_bad_config_is_refused_with_its_field_and_reason() {
    let cases: &[(&str, &str)] = &[
        ("{", "configuration: not valid JSON at byte 1: expected a member name"),
        (
            r#"{"store":{"cluster":"s"},"rules":[{"name":"a","key":["path"],"limits":[{"limit":5,"limit":1000000,"window":"1s"}]}]}"#,
            "rules[0].limits[0].limit: appears twice in its object",
        ),
        (
            r#"{"store":{"cluster":"s"},"rules":[],"extra":1}"#,
            "extra: unknown field (expected one of: domain, store, client_ip, deny_cache, response_headers, retry_after_jitter, overrides, rules)",
        ),
        (r#"{"rules":[]}"#, "store: is required"),
        (r#"{"store":{"cluster":"s"},"rules":[]}"#, "rules: must hold 1 to 64 rules"),
        (
            r#"{"store":{"cluster":"s","transport":"redis"},"rules":[]}"#,
            "store.transport: \"redis\" needs the Redis-call build (ratelimit-redis.wasm); this module speaks webdis",
        ),
        (r#"{"store":{"cluster":"s","timeout_ms":0},"rules":[]}"#, "store.timeout_ms: must be at least 1"),
        (
            r#"{"store":{"cluster":"s","password":"x"},"rules":[]}"#,
            "store.password: webdis's basic auth needs store.username too",
        ),
        (
            r#"{"store":{"cluster":"s","circuit_breaker":{"open":"soon"}},"rules":[]}"#,
            "store.circuit_breaker.open: must be a duration like \"250ms\", \"1s\", \"30s\", \"1m\", \"1h\" or \"1d\"",
        ),
        (
            r#"{"domain":"A B","store":{"cluster":"s"},"rules":[]}"#,
            "domain: must be 1 to 32 characters of a-z, 0-9, _, - and .",
        ),
        (
            r#"{"store":{"cluster":"s"},"client_ip":{"xff_trusted_hops":-1},"rules":[]}"#,
            "client_ip.xff_trusted_hops: must be at least 0",
        ),
        (r#"{"store":{"cluster":"s","batch":{"max_in_flight":0}},"rules":[]}"#, "store.batch.max_in_flight: must be at least 1"),
        (r#"{"store":{"cluster":"s","batch":{"max_decisions":257}},"rules":[]}"#, "store.batch.max_decisions: must be at most 256"),
        (r#"{"store":{"cluster":"s","redis_cluster":1},"rules":[]}"#, "store.redis_cluster: must be true or false"),
        (r#"{"store":{"cluster":"s"},"retry_after_jitter":1.5,"rules":[]}"#, "retry_after_jitter: must be a number from 0 to 1"),
    ];
    for (json, want) in cases {
        assert_eq!(error_of(json), *want, "{json}");
    }
}

#[test]
#[wasm_bindgen_test]
fn each_bad_rule_is_refused_with_its_path_and_reason() {
    let cases: &[(&str, &str)] = &[
        (r#"{"name":"api","key":["client_ip"],"limits":[{"limit":0,"window":"1s"}]}"#, "rules[1].limits[0].limit: must be at least 1"),
        (r#"{"name":"api","key":["client_ip"],"limits":[{"limit":5,"window":"1s","burstt":2}]}"#, "rules[1].limits[0].burstt: unknown field (expected one of: algorithm, limit, window, burst, counts, staggered, max_hold)"),
        (r#"{"name":"api","key":["client_ip"],"limits":[{"limit":5,"window":"5 minutes"}]}"#, "rules[1].limits[0].window: must be a duration like \"250ms\", \"1s\", \"30s\", \"1m\", \"1h\" or \"1d\""),
        (r#"{"name":"api","key":["client_ip"],"limits":[{"limit":5.5,"window":"1s"}]}"#, "rules[1].limits[0].limit: must be an integer"),
        (r#"{"name":"api","key":["client_ip"],"limits":[{"limit":5,"window":"1s","algorithm":"leaky"}]}"#, "rules[1].limits[0].algorithm: must be one of sliding_window, fixed_window, token_bucket, sliding_log, gcra, concurrency"),
        (r#"{"name":"api","key":["client_ip"],"limits":[{"limit":5,"window":"1s","burst":3}]}"#, "rules[1].limits[0].burst: applies to token_bucket and gcra only"),
        (r#"{"name":"api","key":["client_ip"],"limits":[{"limit":5,"window":"1s"},{"limit":9,"window":"1s"}]}"#, "rules[1].limits[1]: repeats the algorithm and window of an earlier limit of this rule"),
        (r#"{"name":"api","key":["client_ip"],"limits":[{"algorithm":"sliding_log","limit":10001,"window":"1s"}]}"#, "rules[1].limits[0].limit: sliding_log keeps one entry per request: at most 10000"),
        (r#"{"name":"api","key":["client_ip"],"limits":[{"limit":100000000000,"window":"1d"}]}"#, "rules[1].limits[0]: limit (or burst) times the window in ms must stay below 2^53"),
        (r#"{"name":"api","key":["client_ip"],"limits":[]}"#, "rules[1].limits: must hold 1 to 16 limits"),
        (r#"{"name":"login","key":["client_ip"],"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].name: \"login\" is used by an earlier rule"),
        (r#"{"name":"Api","key":["client_ip"],"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].name: must be 1 to 64 characters of a-z, 0-9, _ and -"),
        (r#"{"name":"api","key":["cookie"],"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].key[0]: must be client_ip, path, method, authority, header:<name>, header_raw:<name>, query:<name>, literal:<text> or body:<JSON field path>"),
        (r#"{"name":"api","key":["body:messages[0].role"],"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].key[0]: \"messages[0].role\": keys may hold only A-Z a-z 0-9 _ -"),
        (r#"{"name":"api","key":["body:"],"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].key[0]: \"\" has an empty key (keys are joined by single dots)"),
        (r#"{"name":"api","match":{"body":{"model":5}},"key":["path"],"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].match.body.model: must be a string"),
        (r#"{"name":"api","match":{"body":["model"]},"key":["path"],"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].match.body: must be an object of JSON field path to value"),
        (r#"{"name":"api","match":{"body":{"a..b":"x"}},"key":["path"],"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].match.body.a..b: \"a..b\" has an empty key (keys are joined by single dots)"),
        (r#"{"name":"api","key":["path"],"request_body":{"max_bytes":10},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].request_body: applies to rules whose key or match reads the body (body:<path>)"),
        (r#"{"name":"api","key":["body:model"],"request_body":{"max_bytes":9000000},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].request_body.max_bytes: must be at most 8388608"),
        (r#"{"name":"api","key":[],"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].key: must name at least one part"),
        (r#"{"name":"api","key":["header:bad name"],"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].key[0]: names an invalid header"),
        (r#"{"name":"api","match":{"path_prefix":"api"},"key":["path"],"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].match.path_prefix: must start with /"),
        (r#"{"name":"api","match":{"path_prefix":"/api;v=1/"},"key":["path"],"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].match.path_prefix: holds ';', which never matches: paths are compared without their segments' ;parameters"),
        (r#"{"name":"api","match":{"path_prefix":"/api%3b/"},"key":["path"],"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].match.path_prefix: holds ';', which never matches: paths are compared without their segments' ;parameters"),
        (r#"{"name":"api","match":{"path_ignore_case":1},"key":["path"],"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].match.path_ignore_case: must be true or false"),
        (r#"{"name":"api","key":["path"],"cost":{"response_header":"x-u","default":1,"hang_up":"min"},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.hang_up: must be \"default\" or \"max\""),
        (r#"{"name":"api","key":["path"],"cost":{"request_header":"x-c","hang_up":"max"},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.hang_up: applies to a cost known after the response only"),
        (r#"{"name":"api","match":{"methods":["post"]},"key":["path"],"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].match.methods[0]: must be an HTTP method in upper case, like \"POST\""),
        (r#"{"name":"api","match":{"headers":{"x-a":1}},"key":["path"],"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].match.headers.x-a: must be a string"),
        (r#"{"name":"api","key":["path"],"cost":6,"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost: 6 can never be admitted by limits[0], which holds at most 5"),
        (r#"{"name":"api","key":["path"],"cost":2,"limits":[{"algorithm":"gcra","limit":50,"window":"1s"}]}"#, "rules[1].cost: 2 can never be admitted by limits[0], which holds at most 1"),
        (r#"{"name":"api","key":["path"],"fleet_size":6,"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].fleet_size: 6 leaves limits[0] a fallback share below the cost (limit / fleet_size must be at least 1)"),
        (r#"{"name":"api","key":["path"],"failure_mode":"maybe","limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].failure_mode: must be \"open\" or \"closed\""),
        (r#"{"name":"api","key":["path"],"shadow":"yes","limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].shadow: must be true or false"),
        (r#"{"name":"api","key":["path"],"cost":{"response_body":"usage.total_tokens"},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.default: is required: what to charge when the response reports no usage"),
        (r#"{"name":"api","key":["path"],"cost":{"response_body":"usage..x","default":1},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.response_body: \"usage..x\" has an empty key (keys are joined by single dots)"),
        (r#"{"name":"api","key":["path"],"cost":{"response_header":"x-usage","request_header":"x-cost","default":1},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost: must name exactly one of request_header, response_header, response_body (or be an integer)"),
        (r#"{"name":"api","key":["path"],"cost":{"response_header":"x-usage","default":1},"limits":[{"algorithm":"sliding_log","limit":5,"window":"1s"}]}"#, "rules[1].limits[0]: sliding_log cannot carry a debt: a cost known after the response needs fixed_window, sliding_window, token_bucket or gcra (or counts \"requests\")"),
        (r#"{"name":"api","key":["path"],"cost":{"request_header":"x-cost","max":10},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost: max (10) can never be admitted by limits[0], which holds at most 5"),
        (r#"{"name":"api","key":["path"],"cost":{"request_header":"x-cost","reserve":2},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.reserve: applies to a cost known after the response only"),
        (r#"{"name":"api","key":["path"],"cost":{"response_header":":status","default":1},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.response_header: is not a valid header name"),
        (r#"{"name":"api","key":["path"],"cost":{"response_header":"x-u","default":1,"reserve":2,"reservation":{"default_output":1}},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.reserve: applies to the check-then-charge mode only: a reservation takes the request's worst case"),
        (r#"{"name":"api","key":["path"],"cost":{"response_header":"x-u","default":1,"reservation":{}},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.reservation.default_output: is required: the output reserved for a request that states no bound"),
        (r#"{"name":"api","key":["path"],"cost":{"response_header":"x-u","default":1,"reservation":{"default_output":1,"output_fields":[]}},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.reservation.output_fields: must list 1 to 8 request body fields"),
        (r#"{"name":"api","key":["path"],"cost":{"response_header":"x-u","default":1,"reservation":{"default_output":1,"output_fields":["a..b"]}},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.reservation.output_fields: \"a..b\" has an empty key (keys are joined by single dots)"),
        (r#"{"name":"api","key":["path"],"cost":{"response_header":"x-u","default":1,"include_usage":true},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.include_usage: applies to a response_body cost read from event streams only"),
        (r#"{"name":"api","key":["path"],"cost":{"response_body":{"json":"usage.total_tokens"},"default":1,"include_usage":true},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.include_usage: applies to a response_body cost read from event streams only"),
        (r#"{"name":"api","key":["path"],"cost":{"request_header":"x-c","include_usage":true},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.include_usage: applies to a cost known after the response only"),
        (r#"{"name":"api","key":["path"],"cost":{"response_body":"usage.total_tokens","default":1,"include_usage":1},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.include_usage: must be true or false"),
        (r#"{"name":"api","key":["path"],"cost":{"response_header":"x-u","default":1,"reservation":{"default_output":1,"choices_fields":[]}},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.reservation.choices_fields: must list 1 to 8 request body fields"),
        (r#"{"name":"api","key":["path"],"cost":{"response_header":"x-u","default":1,"reservation":{"default_output":1,"choices_fields":[8]}},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.reservation.choices_fields: must list JSON field paths as strings"),
        (r#"{"name":"api","key":["path"],"cost":{"response_header":"x-u","default":1,"reservation":{"default_output":1,"input_bytes_per_unit":0}},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.reservation.input_bytes_per_unit: must be at least 1"),
        (r#"{"name":"api","key":["path"],"cost":{"request_header":"x-cost","reservation":{"default_output":1}},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.reservation: applies to a cost known after the response only"),
        (r#"{"name":"api","key":["path"],"cost":{"response_header":"x-u","default":1,"prices":{"model":"model","models":{"a":{}}}},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.prices: applies to a response_body cost only"),
        (r#"{"name":"api","key":["path"],"cost":{"response_body":[["usage.total_tokens","response.usage.total_tokens"]],"default":1,"prices":{"model":"model","models":{"a":{"usage.total_tokens":1}}}},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.prices: weighs each field's one path: a field with alternative paths cannot be priced"),
        (r#"{"name":"api","key":["path"],"cost":{"response_body":[["usage.total_tokens",7]],"default":1},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.response_body: must list JSON field paths as strings (or arrays of alternative paths)"),
        (r#"{"name":"api","key":["path"],"cost":{"response_body":[[]],"default":1},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.response_body: must list 1 to 8 field paths, not 0"),
        (r#"{"name":"api","key":["path"],"cost":{"response_body":"usage.total_tokens","default":1,"prices":{"model":"model","models":{"a":{"usage.x":1}}}},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.prices.models.a.usage.x: is not one of the cost's response_body fields"),
        (r#"{"name":"api","key":["path"],"cost":{"response_body":"usage.total_tokens","default":1,"prices":{"model":"model","models":{"a":{"usage.total_tokens":1000000000001}}}},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.prices.models.a.usage.total_tokens: must be an integer from -1000000000000 to 1000000000000"),
        (r#"{"name":"api","key":["path"],"cost":{"response_body":"usage.total_tokens","default":1,"prices":{"model":"model","models":{}}},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.prices.models: must price 1 to 256 models"),
        (r#"{"name":"api","key":["path"],"cost":{"response_body":"usage.total_tokens","default":1,"prices":{"models":{"a":{}}}},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.prices.model: is required"),
        (r#"{"name":"api","key":["path"],"cost":{"response_body":"usage.total_tokens","default":1,"prices":{"model":"model","models":{"a":{}},"default":[]}},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.prices.default: must be an object of usage field paths and integer weights"),
        (r#"{"name":"api","key":["path"],"cost":{"response_body":"usage.total_tokens","default":1,"prices":{"model":"model","per":0,"models":{"a":{}}}},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.prices.per: must be at least 1"),
        (r#"{"name":"api","key":["path"],"cost":{"response_header":"x-u","default":1,"max":10,"reservation":{"default_output":1}},"limits":[{"algorithm":"sliding_log","limit":5,"window":"1s"}]}"#, "rules[1].limits[0]: sliding_log cannot carry a debt: a cost known after the response needs fixed_window, sliding_window, token_bucket or gcra (or counts \"requests\")"),
        (r#"{"name":"api","key":["path"],"cost":{"response_header":"x-u","default":1,"reserve":6},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost: reserve (6) can never be admitted by limits[0], which holds at most 5"),
        (r#"{"name":"api","key":["path"],"lease":{"max_units":10,"max_age":"5s"},"limits":[{"algorithm":"sliding_log","limit":5,"window":"1s"}]}"#, "rules[1].lease: limits[0] is a sliding_log, which keeps each admitted request with the time it came: a leased unit has no time until it is spent (use another algorithm, or no lease)"),
        (r#"{"name":"api","key":["path"],"lease":{"max_units":10,"max_age":"5s"},"cost":{"request_header":"x-cost","max":5},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].lease: needs a cost known at request time and the same for every request (an integer): a lease counts each request's units before the request comes"),
        (r#"{"name":"api","key":["path"],"lease":{"max_units":10,"max_age":"5s"},"cost":{"response_body":"u","default":1},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].lease: needs a cost known at request time and the same for every request (an integer): a lease counts each request's units before the request comes"),
        (r#"{"name":"api","key":["path"],"shadow":true,"lease":{"max_units":10,"max_age":"5s"},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].lease: a shadow rule admits nothing, so it takes no lease"),
        (r#"{"name":"api","key":["path"],"lease":{"max_age":"5s"},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].lease.max_units: is required: the most requests one lease admits"),
        (r#"{"name":"api","key":["path"],"lease":{"max_units":10,"max_age":"2h"},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].lease.max_age: must be from 10ms to 1h"),
        (r#"{"name":"api","key":["path"],"lease":{"max_units":10,"max_age":"5s","share":2},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].lease.share: unknown field (expected one of: max_units, max_age)"),
        (r#"{"name":"api","key":["path"],"identity":"plain","limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].identity: must be \"digest\" or \"clear\""),
        (r#"{"name":"api","key":["path"],"cost":{"response_body":"u","default":1,"unreadable":"min"},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.unreadable: must be \"max\" or \"default\""),
        (r#"{"name":"api","key":["path"],"cost":{"response_header":"x-u","default":1,"bytes_per_unit":4},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.bytes_per_unit: applies to a response_body cost only"),
        (r#"{"name":"api","key":["path"],"cost":{"response_body":"u","default":1,"bytes_per_unit":0},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.bytes_per_unit: must be at least 1"),
        (r#"{"name":"api","key":["path"],"cost":{"request_header":"x-cost","unreadable":"max"},"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].cost.unreadable: applies to a cost known after the response only"),
        (r#"{"name":"api","key":["path"],"limits":[{"limit":5,"window":"1s","counts":"tokens"}]}"#, "rules[1].limits[0].counts: must be \"cost\" or \"requests\""),
        (r#"{"name":"api","key":["path"],"limits":[{"limit":5,"window":"1s","staggered":true}]}"#, "rules[1].limits[0].staggered: applies to fixed_window only"),
        (r#"{"name":"api","key":["path"],"shadow_headers":true,"limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].shadow_headers: applies to shadow rules only"),
        (r#"{"name":"api","key":["path"],"response_headers":"some","limits":[{"limit":5,"window":"1s"}]}"#, "rules[1].response_headers: must be true, false, \"legacy\", \"ietf\", \"both\", \"none\", \"openai\" or \"anthropic\""),
        (r#"{"name":"api","key":["path"],"limits":[{"algorithm":"concurrency","limit":5,"window":"1s"}]}"#, "rules[1].limits[0].window: does not apply to concurrency (it counts streams in flight)"),
        (r#"{"name":"api","key":["path"],"limits":[{"algorithm":"concurrency","limit":5,"counts":"cost"}]}"#, "rules[1].limits[0].counts: does not apply to concurrency (it counts streams in flight)"),
        (r#"{"name":"api","key":["path"],"limits":[{"algorithm":"concurrency"}]}"#, "rules[1].limits[0].limit: is required"),
        (r#"{"name":"api","key":["path"],"limits":[{"algorithm":"concurrency","limit":5,"max_hold":"500ms"}]}"#, "rules[1].limits[0].max_hold: must be a duration from 1s to 24h"),
        (r#"{"name":"api","key":["path"],"limits":[{"limit":5,"window":"1s","max_hold":"5s"}]}"#, "rules[1].limits[0].max_hold: applies to concurrency only"),
        (r#"{"name":"api","key":["path"],"limits":[{"algorithm":"concurrency","limit":5},{"algorithm":"concurrency","limit":9,"max_hold":"5s"}]}"#, "rules[1].limits[1]: a rule has at most one concurrency limit"),
        (r#"{"name":"api","key":["path"],"lease":{"max_units":10,"max_age":"5s"},"limits":[{"limit":50,"window":"1s"},{"algorithm":"concurrency","limit":5}]}"#, "rules[1].lease: limits[1] is a concurrency limit, whose slot is held by one stream until it ends: a slot cannot be leased ahead of its stream (use no lease on this rule)"),
        (r#"{"name":"api","key":["path"],"fleet_size":6,"limits":[{"algorithm":"concurrency","limit":5}]}"#, "rules[1].fleet_size: 6 leaves limits[0] a fallback share below the cost (limit / fleet_size must be at least 1)"),
    ];
    for (rule, want) in cases {
        assert_eq!(error_of(&with_api_rule(rule)), *want, "{rule}");
    }
}

#[test]
#[wasm_bindgen_test]
fn a_store_call_too_big_for_webdis_is_refused_at_load() {
    let name = "r".repeat(60);
    let limits: Vec<String> =
        (1..=16).map(|i| format!(r#"{{"algorithm":"sliding_window","limit":5,"window":"{i}s"}}"#)).collect();
    let rule = format!(r#"{{"name":"{name}","key":["client_ip"],"limits":[{}]}}"#, limits.join(","));
    let err = error_of(&with_api_rule(&rule));
    assert!(
        err.starts_with("rules[1]: with the rules before it that share its key, one store call could need "),
        "{err}"
    );
}

#[test]
#[wasm_bindgen_test]
fn the_breaker_keeps_as_many_hash_slot_records_as_the_deny_cache_has_slots() {
    let json = r#"{"store":{"cluster":"s","circuit_breaker":{"failures":5}},"deny_cache":{"slots":16},
        "rules":[{"name":"a","key":["client_ip"],"limits":[{"limit":5,"window":"1s"}]}]}"#;
    let c = Config::parse(json.as_bytes()).unwrap();
    assert_eq!((c.store.breaker.failures, c.store.breaker.slot_records.get()), (5, 16));
}

#[test]
#[wasm_bindgen_test]
fn rules_with_the_same_key_and_shadow_flag_share_one_call() {
    let json = r#"{"store":{"cluster":"s"},"rules":[
        {"name":"a","key":["client_ip"],"limits":[{"limit":5,"window":"1s"}]},
        {"name":"b","key":["header:x"],"limits":[{"limit":5,"window":"1s"}]},
        {"name":"c","key":["client_ip"],"limits":[{"limit":5,"window":"1m"}]},
        {"name":"d","key":["client_ip"],"shadow":true,"limits":[{"limit":5,"window":"1s"}]}]}"#;
    let c = Config::parse(json.as_bytes()).unwrap();
    let groups: Vec<Vec<usize>> = c.groups.iter().map(|g| g.rules.clone()).collect();
    assert_eq!(groups, [vec![0, 2], vec![1], vec![3]]);
}

#[test]
#[wasm_bindgen_test]
fn changing_a_limit_changes_its_fingerprint_and_nothing_else_does() {
    // Limit `api`'s first, in a configuration around it; each case edits
    // one thing (`from` becomes `to` once) and says whether the limit's
    // entries (denials, fallback counts, leases) must start afresh.
    let base = r#"{"domain":"d","store":{"cluster":"s","timeout_ms":25},"deny_cache":{"slots":64},"rules":[
        {"name":"api","match":{"path_prefix":"/a"},"key":["client_ip"],"failure_mode":"closed",
         "limits":[{"algorithm":"fixed_window","limit":5,"window":"1s"}]}]}"#;
    let fp = |json: &str| {
        let c = Config::parse(json.as_bytes()).unwrap_or_else(|e| panic!("{e}: {json}"));
        let api = c.rules.iter().find(|r| r.name == "api").unwrap_or(&c.rules[0]);
        api.limits.iter().find(|l| l.spec.window_ms == 1_000).unwrap().fingerprint
    };
    let before = fp(base);
    let keeps = [
        (r#""path_prefix":"/a""#, r#""path_prefix":"/b""#),
        (r#""key":["client_ip"]"#, r#""key":["header:x-user"]"#),
        (r#""failure_mode":"closed""#, r#""failure_mode":"open","fleet_size":3"#),
        (r#""timeout_ms":25"#, r#""timeout_ms":900"#),
        (r#""cluster":"s""#, r#""cluster":"other""#),
        (r#""slots":64"#, r#""slots":4096"#),
        (r#""rules":["#, r#""response_headers":"both","rules":["#),
        (r#""rules":["#, r#""rules":[{"name":"first","key":["client_ip"],"limits":[{"limit":9,"window":"1m"}]},"#),
        (r#""window":"1s"}"#, r#""window":"1s"},{"algorithm":"fixed_window","limit":50,"window":"1m"}"#),
    ];
    for (from, to) in keeps {
        assert_eq!(fp(&base.replacen(from, to, 1)), before, "{from} -> {to} must keep the limit's entries");
    }
    let changes = [
        (r#""limit":5"#, r#""limit":6"#),
        (r#""window":"1s""#, r#""window":"1000ms","staggered":true"#),
        (r#""fixed_window""#, r#""sliding_window""#),
        (r#""algorithm":"fixed_window""#, r#""algorithm":"fixed_window","counts":"requests""#),
        (r#""name":"api""#, r#""name":"api2""#),
        (r#""name":"api""#, r#""name":"api","cost":2"#),
        (r#""domain":"d""#, r#""domain":"e""#),
        (r#""limits":["#, r#""limits":[{"algorithm":"fixed_window","limit":50,"window":"1m"},"#),
    ];
    for (from, to) in changes {
        let json = base.replacen(from, to, 1);
        assert_ne!(json, base);
        assert_ne!(fp(&json), before, "{from} -> {to} must start the limit's entries afresh");
    }
}

#[test]
#[wasm_bindgen_test]
fn costs_limits_and_headers_take_every_documented_form() {
    let json = r#"{"store":{"cluster":"s","redis_cluster":true,"batch":{"max_in_flight":8,"max_decisions":16}},
      "response_headers":"both","retry_after_jitter":0.25,"rules":[
      {"name":"llm","key":["header:x-api-key"],
       "cost":{"response_body":["usage.input_tokens","usage.output_tokens"],"default":500,"max":100000,"reserve":10,"hang_up":"max"},
       "limits":[{"limit":60,"window":"1m","counts":"requests"},{"algorithm":"token_bucket","limit":100000,"window":"1h"}]},
      {"name":"internal","key":["header_raw:user-agent"],"cost":{"request_header":"x-cost","max":5},"response_headers":false,
       "limits":[{"algorithm":"fixed_window","limit":100,"window":"1d","staggered":true}]},
      {"name":"watch","key":["client_ip"],"shadow":true,"shadow_headers":true,"limits":[{"limit":5,"window":"1s"}]}]}"#;
    let c = Config::parse(json.as_bytes()).unwrap();
    assert!(c.store.redis_cluster);
    assert_eq!((c.store.batching.max_in_flight.get(), c.store.batching.max_decisions.get()), (8, 16));
    assert_eq!(c.headers, HeaderStyle { legacy: true, ietf: true, vendor: None });
    assert_eq!(c.retry_after_jitter_ppm, 250_000);
    let llm = &c.rules[0];
    assert_eq!(
        llm.cost,
        Cost::Response {
            source: UsageSource::Body {
                json: Some(crate::usage::UsageFields::parse(&["usage.input_tokens", "usage.output_tokens"]).unwrap()),
                event_stream: Some(
                    crate::usage::UsageFields::parse(&["usage.input_tokens", "usage.output_tokens"]).unwrap()
                ),
            },
            default: 500,
            max: 100_000,
            reserve: 10,
            unreadable: Unreadable::Max,
            hang_up: HangUp::Max,
            bytes_per_unit: BYTES_PER_UNIT,
            reservation: None,
            prices: None,
            include_usage: false,
        }
    );
    assert_eq!((llm.limits[0].counts, llm.limits[1].counts), (Counts::Requests, Counts::Cost));
    assert_eq!((llm.request_amount(&llm.limits[0]), llm.request_amount(&llm.limits[1])), (1, 10));
    let internal = &c.rules[1];
    assert_eq!(internal.cost, Cost::RequestHeader { name: "x-cost".into(), max: 5, default: 1 });
    assert_eq!(internal.key, [KeyPart::HeaderRaw("user-agent".into())]);
    assert_eq!(internal.headers, Some(HeaderStyle { legacy: false, ietf: false, vendor: None }));
    assert!(internal.limits[0].staggered);
    assert!(c.rules[2].shadow_headers);
}

#[test]
#[wasm_bindgen_test]
fn a_body_cost_can_name_other_fields_for_streamed_bodies() {
    let doc = r#"{"store":{"cluster":"s"},"rules":[{"name":"claude","key":["header:x-api-key"],
      "cost":{"response_body":{"json":["usage.input_tokens","usage.output_tokens"],
                               "event_stream":["message.usage.input_tokens","usage.output_tokens"]},"default":1},
      "limits":[{"limit":1000,"window":"1h"}]}]}"#;
    let c = Config::parse(doc.as_bytes()).unwrap();
    let Cost::Response { source: UsageSource::Body { json, event_stream }, .. } = &c.rules[0].cost else { panic!() };
    assert_ne!(json, event_stream);
    let only_sse = doc.replace(r#""json":["usage.input_tokens","usage.output_tokens"],"#, "");
    let c = Config::parse(only_sse.as_bytes()).unwrap();
    assert!(matches!(
        &c.rules[0].cost,
        Cost::Response { source: UsageSource::Body { json: None, event_stream: Some(_) }, .. }
    ));
    let neither = r#"{"store":{"cluster":"s"},"rules":[{"name":"c","key":["path"],"cost":{"response_body":{},"default":1},"limits":[{"limit":9,"window":"1h"}]}]}"#;
    assert_eq!(
        Config::parse(neither.as_bytes()).unwrap_err().to_string(),
        "rules[0].cost.response_body: must name the fields of a json body, of an event_stream body, or both"
    );
}

#[test]
#[wasm_bindgen_test]
fn identities_a_client_can_choose_are_digested_unless_the_rule_asks_for_clear_text() {
    let rules = r#"[
      {"name":"a","key":["header:x-api-key"],"limits":[{"limit":5,"window":"1s"}]},
      {"name":"b","key":["query:k"],"limits":[{"limit":5,"window":"1s"}]},
      {"name":"c","key":["client_ip","method","authority","literal:x"],"limits":[{"limit":5,"window":"1s"}]},
      {"name":"d","key":["client_ip","path"],"limits":[{"limit":5,"window":"1s"}]},
      {"name":"e","key":["header:x-api-key"],"identity":"clear","limits":[{"limit":5,"window":"1s"}]},
      {"name":"f","key":["client_ip"],"identity":"digest","limits":[{"limit":5,"window":"1s"}]}]"#;
    let c = Config::parse(format!(r#"{{"store":{{"cluster":"s"}},"rules":{rules}}}"#).as_bytes()).unwrap();
    let forms: Vec<IdentityForm> = c.rules.iter().map(|r| r.identity).collect();
    use IdentityForm::{Clear, Digest};
    assert_eq!(forms, [Digest, Digest, Clear, Digest, Clear, Digest]);
    // a and e share key parts but not the form: two decisions, two identities.
    let groups: Vec<Vec<usize>> = c.groups.iter().map(|g| g.rules.clone()).collect();
    assert_eq!(groups, [vec![0], vec![1], vec![2], vec![3], vec![4], vec![5]]);
}

#[test]
#[wasm_bindgen_test]
fn a_rule_that_ignores_the_paths_case_keys_the_path_in_lower_case() {
    let rules = r#"[
      {"name":"a","match":{"path_prefix":"/api/","path_ignore_case":true},"key":["client_ip","path"],"limits":[{"limit":5,"window":"1s"}]},
      {"name":"b","match":{"path_prefix":"/api/"},"key":["client_ip","path"],"limits":[{"limit":5,"window":"1s"}]}]"#;
    let c = Config::parse(format!(r#"{{"store":{{"cluster":"s"}},"rules":{rules}}}"#).as_bytes()).unwrap();
    assert!(c.rules[0].matcher.path_ignore_case);
    assert!(!c.rules[1].matcher.path_ignore_case, "case counts by default");
    assert_eq!(c.rules[0].key, [KeyPart::ClientIp, KeyPart::PathIgnoreCase]);
    assert_eq!(c.rules[1].key, [KeyPart::ClientIp, KeyPart::Path]);
    assert_eq!(c.groups.len(), 2, "two readings of the path, two identities");
}

#[test]
#[wasm_bindgen_test]
fn a_body_cost_sums_at_most_eight_fields() {
    let with = |n: usize| {
        let paths: Vec<String> = (0..n).map(|i| format!("\"usage.f{i}\"")).collect();
        format!(
            r#"{{"store":{{"cluster":"s"}},"rules":[{{"name":"c","key":["path"],"cost":{{"response_body":[{}],"default":1}},"limits":[{{"limit":9,"window":"1h"}}]}}]}}"#,
            paths.join(",")
        )
    };
    let c = Config::parse(with(8).as_bytes()).unwrap();
    let Cost::Response { source: UsageSource::Body { json: Some(json), .. }, .. } = &c.rules[0].cost else { panic!() };
    assert_eq!(json.len(), 8);
    assert_eq!(
        Config::parse(with(9).as_bytes()).unwrap_err().to_string(),
        "rules[0].cost.response_body: must list 1 to 8 field paths, not 9"
    );
    let streamed = with(9)
        .replace(r#""response_body":["#, r#""response_body":{"event_stream":["#)
        .replace(r#"],"default""#, r#"]},"default""#);
    assert_eq!(
        Config::parse(streamed.as_bytes()).unwrap_err().to_string(),
        "rules[0].cost.response_body.event_stream: must list 1 to 8 field paths, not 9"
    );
}

#[test]
#[wasm_bindgen_test]
fn a_lease_is_read_with_its_units_and_age() {
    let json = r#"{"store":{"cluster":"s"},"rules":[{"name":"hot","key":["header:k"],"lease":{"max_units":50,"max_age":"2s"},
        "limits":[{"limit":100,"window":"1m"},{"algorithm":"token_bucket","limit":10,"window":"1s"}]}]}"#;
    let c = Config::parse(json.as_bytes()).unwrap();
    assert_eq!(c.rules[0].lease, Some(LeaseSettings { max_units: 50, max_age_ms: 2_000 }));
}

#[test]
#[wasm_bindgen_test]
fn a_concurrency_limit_is_read_with_its_hold_and_counts_streams() {
    let json = r#"{"store":{"cluster":"s"},"rules":[{"name":"llm","key":["header:k"],
        "limits":[{"algorithm":"concurrency","limit":5},{"algorithm":"concurrency","limit":3,"max_hold":"10s"}]}]}"#;
    assert_eq!(error_of(json), "rules[0].limits[1]: a rule has at most one concurrency limit");
    let json = r#"{"store":{"cluster":"s"},"rules":[{"name":"llm","key":["header:k"],
        "limits":[{"limit":100,"window":"1m"},{"algorithm":"concurrency","limit":5,"max_hold":"10s"}]}]}"#;
    let c = Config::parse(json.as_bytes()).unwrap();
    let l = &c.rules[0].limits[1];
    assert_eq!(
        l.spec,
        crate::spec::LimitSpec {
            algorithm: crate::algorithm::Algorithm::Concurrency,
            limit: 5,
            window_ms: 10_000,
            burst: 1
        }
    );
    assert_eq!((l.counts, l.policy.as_str()), (Counts::Requests, "llm/concurrency"));
    let default = r#"{"store":{"cluster":"s"},"rules":[{"name":"llm","key":["header:k"],
        "limits":[{"algorithm":"concurrency","limit":5}]}]}"#;
    assert_eq!(Config::parse(default.as_bytes()).unwrap().rules[0].limits[0].spec.window_ms, 60_000);
}

#[test]
#[wasm_bindgen_test]
fn plugins_share_shared_data_only_with_the_same_domain_and_store() {
    let of = |domain: &str, cluster: &str, rules: &str| {
        let json = format!(r#"{{"domain":"{domain}","store":{{"cluster":"{cluster}"}},"rules":[{rules}]}}"#);
        Config::parse(json.as_bytes()).unwrap().shared_scope()
    };
    let rule = r#"{"name":"a","key":["client_ip"],"limits":[{"limit":5,"window":"1s"}]}"#;
    let other_rule = r#"{"name":"b","key":["path"],"limits":[{"limit":9,"window":"1m"}]}"#;
    let scope = of("shop", "store", rule);
    assert_eq!(scope.len(), 17);
    assert!(scope.starts_with('@') && scope[1..].bytes().all(|b| b.is_ascii_hexdigit()), "{scope}");
    assert_eq!(of("shop", "store", other_rule), scope, "rules do not change it");
    assert_ne!(of("blog", "store", rule), scope);
    assert_ne!(of("shop", "other", rule), scope);
    assert_ne!(of("sho", "pstore", rule), of("shop", "store", rule), "fields never run together");
}

#[test]
#[wasm_bindgen_test]
fn a_rule_per_key_per_model_reads_the_body_with_its_defaults() {
    let c = Config::parse(
        with_api_rule(
            r#"{"name":"api","match":{"path_prefix":"/v1/","body":{"metadata.tier":"free"}},
                "key":["header:authorization","body:model"],"limits":[{"limit":3,"window":"1m"}]},
               {"name":"small","key":["body:model"],"request_body":{"max_bytes":1024,"invalid":"absent"},
                "limits":[{"limit":3,"window":"1m"}]},
               {"name":"same","key":["body:model"],"request_body":{"max_bytes":1024,"invalid":"absent"},
                "limits":[{"limit":3,"window":"1h"}]}"#,
        )
        .as_bytes(),
    )
    .unwrap();
    let api = &c.rules[1];
    let model = BodyPath::parse("model").unwrap();
    assert_eq!(api.key, [KeyPart::Header("authorization".into()), KeyPart::Body(model.clone())]);
    assert_eq!(api.matcher.body, [(BodyPath::parse("metadata.tier").unwrap(), "free".to_string())]);
    assert_eq!(api.request_body, Some(BodySettings::default()));
    assert_eq!(api.identity, IdentityForm::Digest, "a body value is the client's choice");
    assert_eq!(c.rules[0].request_body, None, "a rule reading no body waits for none");
    let small = BodySettings { max_bytes: 1024, timeout_ms: 30_000, invalid: BodyInvalid::Absent };
    assert_eq!(c.rules[2].request_body, Some(small));
    assert_eq!(c.groups.len(), 3, "one key read within two bounds is two identities; the same bound, one");
    assert_eq!(c.groups[2].rules, [2, 3]);
    assert_eq!(c.groups[2].body, Some(small));
    assert_eq!(c.groups[1].body, Some(BodySettings::default()));
}

#[test]
#[wasm_bindgen_test]
fn overrides_are_off_unless_asked_for_and_within_is_bounded() {
    let with = |overrides: &str| {
        format!(
            r#"{{"store":{{"cluster":"s"}},"overrides":{overrides},"rules":[{{"name":"a","key":["client_ip"],"limits":[{{"limit":1,"window":"1s"}}]}}]}}"#
        )
    };
    let parse = |json: &str| Config::parse(json.as_bytes()).map(|c| c.overrides.map(|o| o.within.ms()));
    assert_eq!(Config::parse(EXAMPLE.as_bytes()).unwrap().overrides, None, "off by default");
    assert_eq!(parse(&with("{}")), Ok(Some(1_000)), "given: on, within 1 s");
    assert_eq!(parse(&with(r#"{"within":"250ms"}"#)), Ok(Some(250)));
    assert_eq!(parse(&with(r#"{"enabled":false,"within":"5s"}"#)), Ok(None));
    assert_eq!(parse(&with("null")), Ok(None));
    let refused = [
        (r#"{"within":"99ms"}"#, "overrides.within: must be from 100ms to 1h"),
        (r#"{"within":"61m"}"#, "overrides.within: must be from 100ms to 1h"),
        (
            r#"{"within":"1.5s"}"#,
            r#"overrides.within: must be a duration like "250ms", "1s", "30s", "1m", "1h" or "1d""#,
        ),
        (r#"{"within":1}"#, "overrides.within: must be a string"),
        (r#"{"enabled":"yes"}"#, "overrides.enabled: must be true or false"),
        (r#"{"within":"1s","bound":"1s"}"#, "overrides.bound: unknown field (expected one of: enabled, within)"),
        ("true", "overrides: must be an object"),
    ];
    for (overrides, want) in refused {
        assert_eq!(error_of(&with(overrides)), want, "{overrides}");
    }
}
