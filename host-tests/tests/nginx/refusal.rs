//! A bad configuration is refused on NGINX as on Envoy: one line naming
//! the field and the reason, in NGINX's error log.

use host_tests::nginx::NginxStack;

use crate::plugin;

#[test]
fn a_bad_configuration_is_refused_with_one_line_naming_the_field() {
    let bad = plugin(r#"{"name":"a","key":["client_ip"],"limits":[{"limit":0,"window":"1s"}]}"#);
    let Err(e) = NginxStack::try_start(Some(&bad)) else { panic!("a limit of 0 was accepted") };
    assert!(
        e.log.contains("ratelimit: configuration refused: rules[0].limits[0].limit: must be at least 1"),
        "{}",
        e.log
    );
}
