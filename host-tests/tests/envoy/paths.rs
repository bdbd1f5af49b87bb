//! Paths on the shipped envoy.yaml (its connection manager and rules as
//! shipped):
//! every spelling of an `/api/` path meets the `api` rule, and a path with
//! an escaped slash, which the rule could not see as one, never reaches the
//! upstream.

use std::sync::atomic::Ordering;
use std::time::Duration;

use host_tests::envoy::template_text;
use host_tests::raw_http::RawRequest;
use host_tests::stack::Stack;
use host_tests::windows::start_clear_of_boundary;

/// Spellings of `/api/x` a client may send: Envoy resolves dot segments
/// (plain and escaped) and merges slashes; the filter decodes escapes of
/// unreserved characters, drops a segment's `;` parameters (a servlet
/// upstream serves `/api;p=1/x` as `/api/x`) and, as the shipped rule asks
/// (`path_ignore_case`), compares without case (a case-insensitive upstream
/// serves `/API/x` as `/api/x`).
const SPELLINGS: [&str; 14] = [
    "/api/./x",
    "//api/x",
    "/api/x",
    "/x/../api/x",
    "/api/%2E/x",
    "/x/%2e%2e/api/x",
    "/%61pi/x",
    "///api//x?q=1",
    "/API/x",
    "/Api/x",
    "/%41PI/x",
    "/api;p=1/x",
    "/api;/x",
    "/api%3B/x",
];

/// Requests sent: every spelling, then two more (10 admitted, then 429).
const SENT: usize = SPELLINGS.len() + 2;

/// Escaped slashes and backslashes, anywhere in the path.
const ESCAPED: [&str; 5] = ["/api%2Fx", "/api%2fx", "/api%5Cx", "/%2Fapi/x", "/x/..%2Fapi/x"];

/// The plugin configuration shipped in envoy.yaml, with a store timeout of
/// 1 s instead of 25 ms: on a loaded machine a call that took longer would
/// be decided by the fallback bucket, which counts apart from Redis.
fn shipped_rules_patient_store() -> String {
    let v: serde_norway::Value = serde_norway::from_str(&template_text()).unwrap();
    let shipped = v["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        ["http_filters"][0]["typed_config"]["config"]["configuration"]["value"]
        .as_str()
        .unwrap();
    assert!(shipped.contains(r#""timeout_ms": 25"#), "{shipped}");
    shipped.replace(r#""timeout_ms": 25"#, r#""timeout_ms": 1000"#)
}

#[test]
fn every_spelling_of_an_api_path_meets_the_api_rule_and_escaped_slashes_are_refused() {
    // The shipped `api` rule: 10 a minute per client address, sliding window.
    start_clear_of_boundary(Duration::from_secs(60), Duration::from_secs(30));
    let stack = Stack::try_start(&shipped_rules_patient_store(), 2)
        .unwrap_or_else(|e| panic!("envoy refused the shipped config:\n{}", e.log));
    let served = || stack.backend.served.load(Ordering::Relaxed);
    let mut admitted = Vec::new();
    for (i, path) in SPELLINGS.iter().cycle().take(SENT).enumerate() {
        let a = RawRequest::new("GET", path.as_bytes()).send(stack.envoy.port).unwrap();
        admitted.push((*path, a.status, a.header("x-ratelimit-remaining").map(str::to_owned)));
        // Between any two of them, an escaped slash: refused by Envoy, so
        // neither counted by the rule nor seen by the upstream.
        let before = served();
        let refused = ESCAPED[i % ESCAPED.len()];
        let r = RawRequest::new("GET", refused.as_bytes()).send(stack.envoy.port).unwrap();
        assert_eq!((r.status, r.body.as_str(), r.header("x-ratelimit-remaining")), (400, "", None), "{refused}: {r:?}");
        assert_eq!(served(), before, "{refused} reached the upstream");
    }
    let expected: Vec<(&str, u16, Option<String>)> = SPELLINGS
        .iter()
        .cycle()
        .take(SENT)
        .enumerate()
        .map(|(i, p)| match i {
            0..=9 => (*p, 200, Some((9 - i).to_string())),
            _ => (*p, 429, Some("0".to_string())),
        })
        .collect();
    assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.api.store_errors"), 0, "every decision was the store's");
    assert_eq!(admitted, expected, "one budget of 10 for every spelling");
    assert_eq!(served(), 10, "only the admitted requests reached the upstream");
    assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.api.allowed"), 10);
    assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.api.denied"), SENT as u64 - 10);
    assert_eq!(stack.envoy.stat("http.ingress.downstream_rq_failed_path_normalization"), SENT as u64);
}
