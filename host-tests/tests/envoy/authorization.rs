//! One bearer token is one budget, however the client spells its scheme
//! and the space after it (RFC 9110 §11.1: an upstream that follows it
//! takes every spelling as the same token).

use host_tests::raw_http::RawRequest;
use host_tests::stack::Stack;

use crate::plugin_config;

/// Every case mix of `bearer` (64), `Bearer` with 2 to 11 spaces (10), and
/// `Bearer<TAB>`: 75 spellings of one token.
fn spellings(token: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for mask in 0u32..64 {
        let scheme: String = "bearer"
            .chars()
            .enumerate()
            .map(|(i, c)| if mask >> i & 1 == 1 { c.to_ascii_uppercase() } else { c })
            .collect();
        out.push(format!("{scheme} {token}").into_bytes());
    }
    for spaces in 2..=11 {
        out.push(format!("Bearer{}{token}", " ".repeat(spaces)).into_bytes());
    }
    out.push(format!("Bearer\t{token}").into_bytes());
    out
}

#[test]
fn every_spelling_of_one_bearer_token_spends_one_budget() {
    let rules = r#"{"name":"llm","key":["header:authorization"],
        "limits":[{"algorithm":"sliding_window","limit":2,"window":"1h"}]}"#;
    let stack = Stack::start(&plugin_config(rules));
    let spellings = spellings("sk-one-token");
    assert_eq!(spellings.len(), 75);
    let mut admitted = 0;
    let mut denied = 0;
    for spelling in spellings.iter().chain(&spellings) {
        let answer = RawRequest::new("GET", b"/v1/chat").header("authorization", spelling).send(stack.envoy.port);
        match answer.map(|a| a.status) {
            Some(200) => admitted += 1,
            Some(429) => denied += 1,
            other => panic!("{:?} answered {other:?}", String::from_utf8_lossy(spelling)),
        }
    }
    assert_eq!((admitted, denied), (2, 148), "150 requests of one token, a limit of 2");
    // Another token keeps a budget of its own.
    let other = RawRequest::new("GET", b"/v1/chat").header("authorization", b"Bearer sk-other").send(stack.envoy.port);
    assert_eq!(other.map(|a| a.status), Some(200));
}
