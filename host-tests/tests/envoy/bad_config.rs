//! A bad configuration is refused with one log line naming field and reason.

use host_tests::stack::Stack;

use crate::plugin_config;

fn refused_with(config: &str, line: &str) {
    match Stack::try_start(config, 1) {
        Ok(_) => panic!("Envoy accepted a bad configuration: {config}"),
        Err(e) => {
            let want = format!("ratelimit: configuration refused: {line}");
            assert!(e.log.contains(&want), "expected {want:?} in Envoy's log:\n{}", e.log);
        }
    }
}

#[test]
fn unknown_field_zero_limit_duplicate_name_and_bad_duration_are_refused() {
    let ok = r#"{"name":"a","key":["client_ip"],"limits":[{"limit":5,"window":"1s"}]}"#;
    refused_with(
        &plugin_config(r#"{"name":"a","key":["client_ip"],"limits":[{"limit":5,"window":"1s"}],"burst":3}"#),
        "rules[0].burst: unknown field (expected one of: name, match, key, limits, cost, failure_mode, fleet_size, shadow, response_headers, shadow_headers, identity, lease, error_body, request_body)",
    );
    refused_with(
        &plugin_config(r#"{"name":"a","key":["client_ip"],"limits":[{"limit":0,"window":"1s"}]}"#),
        "rules[0].limits[0].limit: must be at least 1",
    );
    refused_with(&plugin_config(&format!("{ok},{ok}")), r#"rules[1].name: "a" is used by an earlier rule"#);
    refused_with(
        &plugin_config(r#"{"name":"a","key":["client_ip"],"limits":[{"limit":5,"window":"1 hour"}]}"#),
        r#"rules[0].limits[0].window: must be a duration like "250ms", "1s", "30s", "1m", "1h" or "1d""#,
    );
}
