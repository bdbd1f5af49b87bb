//! Requests written to break the limiter or to buy a fresh budget: bytes
//! that are not UTF-8 in every header the filter reads, a second key
//! header, a key listed twice, other spellings of one host, a lower-case
//! method, query bytes that are not UTF-8, an empty key.

use host_tests::http::Answer;
use host_tests::raw_http::{h2c_status, RawRequest};
use host_tests::stack::Stack;
use ratelimit::identity::digest;

/// Every place a request reaches the filter, one rule each, limit 2 per hour
/// (1 for /p/ and /q/), one trusted X-Forwarded-For hop.
const CONFIG: &str = r#"{"domain":"t","store":{"transport":"webdis","cluster":"ratelimit_store","authority":"webdis",
  "timeout_ms":1000,"circuit_breaker":{"failures":3,"open":"1s"}},"client_ip":{"xff_trusted_hops":1},"rules":[
  {"name":"key","match":{"path_prefix":"/k/"},"key":["header:x-api-key"],"limits":[{"algorithm":"fixed_window","limit":2,"window":"1h"}]},
  {"name":"tier","match":{"path_prefix":"/t/","headers":{"x-tier":"free"}},"key":["literal:all"],"limits":[{"algorithm":"fixed_window","limit":2,"window":"1h"}]},
  {"name":"ip","match":{"path_prefix":"/x/"},"key":["client_ip"],"limits":[{"algorithm":"fixed_window","limit":2,"window":"1h"}]},
  {"name":"post","match":{"path_prefix":"/p/","methods":["POST"]},"key":["literal:p"],"limits":[{"algorithm":"fixed_window","limit":1,"window":"1h"}]},
  {"name":"host","match":{"path_prefix":"/h/"},"key":["authority"],"limits":[{"algorithm":"fixed_window","limit":2,"window":"1h"}]},
  {"name":"user","match":{"path_prefix":"/q/"},"key":["query:user"],"limits":[{"algorithm":"fixed_window","limit":1,"window":"1h"}]},
  {"name":"path","match":{"path_prefix":"/path/"},"key":["path","method"],"limits":[{"algorithm":"fixed_window","limit":2,"window":"1h"}]}]}"#;

fn get(target: &[u8]) -> RawRequest {
    RawRequest::new("GET", target)
}

fn status(stack: &Stack, req: &RawRequest) -> Option<u16> {
    req.send(stack.envoy.port).map(|a| a.status)
}

fn answer(stack: &Stack, req: &RawRequest) -> Answer {
    req.send(stack.envoy.port).unwrap_or_else(|| panic!("no answer to {:?}", String::from_utf8_lossy(&req.bytes())))
}

/// The module never failed: nothing in Envoy's log says a VM trapped.
fn assert_no_trap(stack: &Stack) {
    let log = stack.envoy.log();
    for sign in ["panicked", "Uncaught RuntimeError", "unreachable", "Plugin configured to fail closed"] {
        assert!(!log.contains(sign), "Envoy's log shows a VM failure ({sign}):\n{log}");
    }
}

#[test]
fn bytes_that_are_not_utf8_in_any_header_the_filter_reads_are_decided_and_break_nothing() {
    let stack = Stack::start(CONFIG);
    let hostile: Vec<(&str, RawRequest)> = vec![
        ("a header key part", get(b"/k/a").header("x-api-key", b"\xff\xfe")),
        ("match.headers", get(b"/t/a").header("x-tier", b"\xfffree")),
        ("x-forwarded-for", get(b"/x/a").header("x-forwarded-for", b"\xff\xfe, 10.0.0.1")),
        ("the query", get(b"/q/a?user=%FF%FE")),
        ("a raw query byte", get(b"/q/a?user=\xff")),
        ("the path", get(b"/path/\xff\xfe")),
        ("an escaped path", get(b"/path/%FF%FE")),
        ("the authority", get(b"/h/a").header("host", b"h\xff.example")),
        ("the method", RawRequest::new("P\u{ff}ST", b"/p/a")),
    ];
    // The same bytes over h2c.
    for (name, value) in
        [("x-api-key", &b"\xfd\xfc"[..]), ("x-tier", b"\xfffree"), ("x-forwarded-for", b"\xff, 10.0.0.1")]
    {
        let got = h2c_status(stack.envoy.port, "GET", "/k/h2", &[(name, value)]);
        assert!(matches!(got, Some(200 | 400 | 429)), "h2c {name}: {got:?}");
    }
    for (what, req) in &hostile {
        // Whatever Envoy's codec makes of it (400 for bytes it refuses), the
        // filter decides or never sees it: never a reset, never a 5xx.
        let got = status(&stack, req);
        assert!(matches!(got, Some(200 | 400 | 429)), "{what}: {got:?}");
        // ... and the next ordinary request is decided exactly.
        let fresh = answer(&stack, &get(b"/k/after").header("x-api-key", what.as_bytes()));
        assert_eq!((fresh.status, fresh.header("x-ratelimit-remaining")), (200, Some("1")), "after {what}");
    }
    // The non-UTF-8 key is a client like any other: two, then 429.
    let key = get(b"/k/a").header("x-api-key", b"\xff\xfe");
    assert_eq!(status(&stack, &key), Some(200), "its second request");
    assert_eq!(status(&stack, &key), Some(429));
    let keys = scan(&stack);
    // The escaped bytes, as a digest (a header may carry a credential).
    let tag = format!("t:{{{}}}:key:fw:", digest("~FF~FE"));
    assert!(keys.iter().any(|k| k.starts_with(&tag)), "{keys:?}");
    assert_no_trap(&stack);
}

/// Every key in the store.
fn scan(stack: &Stack) -> Vec<String> {
    let mut c = stack.redis.connect();
    redis::cmd("KEYS").arg("*").query(&mut c).unwrap()
}

#[test]
fn rewriting_a_request_never_buys_a_fresh_budget() {
    let stack = Stack::start(CONFIG);
    // Spend k1's budget.
    for want in [200, 200, 429] {
        assert_eq!(status(&stack, &get(b"/k/").header("x-api-key", b"k1")), Some(want));
    }
    // A second key header, either order: which one the upstream reads is unknown.
    for (first, second) in [(&b"fresh"[..], &b"k1"[..]), (b"k1", b"fresh")] {
        let a = answer(&stack, &get(b"/k/").header("x-api-key", first).header("x-api-key", second));
        assert_eq!(a.status, 400);
        assert_eq!(
            a.body,
            r#"{"error":"ambiguous_identity","rule":"key","detail":"header:x-api-key has several different values"}"#
        );
    }
    assert_eq!(status(&stack, &get(b"/k/").header("x-api-key", b"fresh, k1")), Some(400));
    // The key listed twice is the key.
    assert_eq!(status(&stack, &get(b"/k/").header("x-api-key", b"k1, k1")), Some(429));
    assert_eq!(status(&stack, &get(b"/k/").header("x-api-key", b" k1")), Some(429));

    // Spellings of one host are one budget.
    let hosts: [&[u8]; 4] = [b"api.example", b"API.example:80", b"api.example.", b"api.example:0080"];
    let got: Vec<Option<u16>> = hosts.iter().map(|h| status(&stack, &get(b"/h/").header("host", h))).collect();
    assert_eq!(got, [Some(200), Some(200), Some(429), Some(429)]);

    // A lower-case post is a POST: over h2c it reaches the filter (Envoy's
    // HTTP/1.1 codec refuses it with its own 400).
    assert_eq!(status(&stack, &RawRequest::new("POST", b"/p/")), Some(200));
    assert_eq!(h2c_status(stack.envoy.port, "post", "/p/", &[]), Some(429));
    assert_eq!(status(&stack, &RawRequest::new("post", b"/p/")), Some(400));

    // Query bytes that are not UTF-8 stay distinct clients.
    assert_eq!(status(&stack, &get(b"/q/?user=%FF")), Some(200));
    assert_eq!(status(&stack, &get(b"/q/?user=%FE")), Some(200), "%FE is not %FF");
    assert_eq!(status(&stack, &get(b"/q/?user=%FF")), Some(429));
    assert_eq!(status(&stack, &get(b"/q/?user=a&user=b")), Some(400), "two values of the key parameter");

    // An empty key is a client too, with a non-empty hash tag.
    for want in [200, 200, 429] {
        assert_eq!(status(&stack, &get(b"/k/").header("x-api-key", b"")), Some(want));
    }
    let keys = scan(&stack);
    let empty = format!("t:{{{}}}:key:fw:", digest("~_"));
    assert!(keys.iter().any(|k| k.starts_with(&empty)), "{keys:?}");
    assert!(!keys.iter().any(|k| k.contains("{}")), "no empty hash tag: {keys:?}");
    assert_no_trap(&stack);
}
