//! While the store fails, a fail-open rule admits limit / fleet_size per
//! window for the whole proxy: the bucket is in shared data, so every
//! worker spends the same budget.

use host_tests::wasm_host::{Fault, Request};

use crate::both_transports;
use crate::fixture::{at, Kind, Servers};

both_transports!(the_fallback_share_is_for_the_whole_proxy_not_per_worker);

/// Open, fleet of 2, 10 per 10 s: this proxy's share is 5.
const RULE: &str = r#"{"name":"open","match":{"path_prefix":"/open"},"key":["client_ip"],"fleet_size":2,
    "failure_mode":"open","limits":[{"algorithm":"sliding_window","limit":10,"window":"10s"}]}"#;

fn the_fallback_share_is_for_the_whole_proxy_not_per_worker(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&kind.config(RULE), 3).start();
    host.fault_always(Some(Fault::ConnectFailure));
    host.advance_to(at(1_000));
    let mut remaining = Vec::new();
    for i in 0..8 {
        let r = host.send(i % 3, Request::get("/open"));
        if r.status == 200 {
            assert_eq!(r.header("x-ratelimit-limit"), Some("5"), "the share, not the limit");
            remaining.push(r.header("x-ratelimit-remaining").unwrap().to_string());
        } else {
            assert_eq!((r.status, r.header("retry-after")), (429, Some("9")), "request {i}: until the window ends");
            assert_eq!(r.body, r#"{"error":"rate_limited","rule":"open","retry_after":9}"#);
        }
    }
    assert_eq!(remaining, ["4", "3", "2", "1", "0"]);
    assert_eq!(host.counter("ratelimit.open.fallback_allowed"), 5);
    assert_eq!(host.counter("ratelimit.open.fallback_denied"), 3);
    // Another client has its own bucket.
    assert_eq!(host.send(1, Request::get("/open").from("10.9.9.9:1")).header("x-ratelimit-remaining"), Some("4"));
    // The breaker opened after 3 failures: the rest made no call.
    assert_eq!(host.calls().len(), 3);
    // The next window: 5 more, across the workers again.
    host.advance_to(at(10_000));
    let statuses: Vec<u32> = (0..6).map(|i| host.send(i % 3, Request::get("/open")).status).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429]);
}
