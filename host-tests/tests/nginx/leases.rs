//! Leases on NGINX: a hot client's requests admitted from a lease in
//! shared memory (both worker processes), exactly its limit, with fewer
//! store calls than requests.

use host_tests::http::{agent, send};
use host_tests::nginx::NginxStack;
use host_tests::stack::command_calls;
use host_tests::windows::{start_clear_of_boundary, HOUR};

use crate::plugin;

#[test]
fn a_hot_client_is_admitted_exactly_its_limit_with_fewer_store_calls_than_requests() {
    start_clear_of_boundary(HOUR, std::time::Duration::from_secs(120));
    let rules = r#"{"name":"hot","key":["header:x-user"],"lease":{"max_units":10,"max_age":"5s"},
        "limits":[{"algorithm":"fixed_window","limit":60,"window":"1h"}]}"#;
    let stack = NginxStack::start(&plugin(rules));
    // One kept connection: one worker process, whose heat makes it hot.
    let a = agent(std::time::Duration::from_secs(10));
    let url = format!("http://127.0.0.1:{}/x", stack.nginx.port);
    let admitted = (0..90).filter(|_| send(&a, "GET", &url, &[("x-user", "hot")]).status == 200).count();
    assert_eq!(admitted, 60, "leased units were counted before they were spent");
    let calls = command_calls(&stack.redis, "evalsha");
    assert!(calls < 60, "{calls} store calls for 90 requests of a hot client");
    assert!(!stack.nginx.workers_crashed() && !stack.nginx.store_failed(), "{}", stack.nginx.log());
}
