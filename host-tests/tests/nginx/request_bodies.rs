//! Rules reading the request body on NGINX: ngx_wasm_module does not hand
//! the body to the filter while the headers wait, so such a rule refuses
//! the requests it applies to with a 501, never passes them undecided; the
//! other rules decide as ever.

use host_tests::body_upstream::BodyUpstream;
use host_tests::nginx::NginxStack;
use host_tests::raw_http::RawRequest;

use crate::plugin;

#[test]
fn a_rule_reading_the_body_fails_closed_with_501_and_other_rules_still_decide() {
    let upstream = BodyUpstream::start();
    let stack = NginxStack::start_to(
        &plugin(
            r#"{"name":"llm","match":{"path_prefix":"/v1/"},"key":["header:authorization","body:model"],
                "limits":[{"algorithm":"sliding_log","limit":2,"window":"1h"}]},
               {"name":"other","match":{"path_prefix":"/other/"},"key":["header:authorization"],
                "limits":[{"algorithm":"sliding_log","limit":1,"window":"1h"}]}"#,
        ),
        upstream.server.port,
    );
    let post = |path: &[u8], chunks: usize| {
        RawRequest::new("POST", path)
            .header("authorization", b"Bearer k1")
            .send_body(stack.nginx.port, br#"{"model":"gpt-4o"}"#, chunks)
            .map(|a| (a.status, a.body))
    };
    // ngx_wasm_module ends a local response's body with a line feed.
    let unsupported = r#"{"error":"request_body_unsupported","rule":"llm","detail":"this host does not hand the request body to the filter: rules reading it refuse the requests they apply to"}"#;
    for chunks in [0, 5, 0] {
        assert_eq!(post(b"/v1/chat/completions", chunks), Some((501, format!("{unsupported}\n"))));
    }
    assert_eq!(post(b"/other/x", 0).map(|a| a.0), Some(200));
    assert_eq!(post(b"/other/x", 0).map(|a| a.0), Some(429));
    assert_eq!(upstream.bodies(), [br#"{"model":"gpt-4o"}"#.to_vec()], "only the other rule's admitted request");
    assert!(!stack.nginx.workers_crashed(), "{}", stack.nginx.log());
    assert!(stack.nginx.log().contains("ratelimit: this host does not hand request bodies to the filter"));
}
