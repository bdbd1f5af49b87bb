//! While the store fails, a fail-open concurrency limit admits through the
//! proxy's local share, limit / fleet_size streams of a client at once
//! across every worker (shared data), released locally as they end.

use host_tests::wasm_host::{Fault, Request, State};

use crate::both_transports;
use crate::fixture::{at, Kind, Servers};

both_transports!(the_local_share_holds_streams_for_the_whole_proxy_until_they_end);

/// Open, fleet of 2, 6 streams at once: this proxy's share is 3.
const RULE: &str = r#"{"name":"cc","match":{"path_prefix":"/cc"},"key":["client_ip"],"fleet_size":2,
    "failure_mode":"open","limits":[{"algorithm":"concurrency","limit":6,"max_hold":"10s"}]}"#;

fn the_local_share_holds_streams_for_the_whole_proxy_until_they_end(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&kind.config(RULE), 3).start();
    host.fault_always(Some(Fault::ConnectFailure));
    host.advance_to(at(1_000));
    let mut open = Vec::new();
    let mut refused = 0;
    for i in 0..5 {
        let id = host.begin(i % 3, Request::get("/cc"));
        host.run_until_idle();
        if host.state(id) == State::Continued {
            open.push(id);
        } else {
            let r = host.finish(id);
            assert_eq!((r.status, r.header("retry-after")), (429, Some("1")));
            assert_eq!(r.body, r#"{"error":"rate_limited","rule":"cc","retry_after":1,"reason":"concurrency"}"#);
            refused += 1;
        }
    }
    assert_eq!((open.len(), refused), (3, 2), "the share, across the workers");
    assert_eq!(host.counter("ratelimit.cc.slots_taken_locally"), 3);
    // A stream ends on one worker: another worker admits the next.
    let first = open.remove(0);
    assert_eq!(host.finish(first).status, 200);
    host.run_until_idle();
    assert_eq!(host.counter("ratelimit.cc.slots_released"), 1);
    let next = host.begin(2, Request::get("/cc"));
    host.run_until_idle();
    assert_eq!(host.state(next), State::Continued);
    assert_refused_count(&mut host, 1);
}

/// One more request is refused.
fn assert_refused_count(host: &mut host_tests::wasm_host::Host, n: usize) {
    for _ in 0..n {
        assert_eq!(host.send(1, Request::get("/cc")).status, 429);
    }
}
