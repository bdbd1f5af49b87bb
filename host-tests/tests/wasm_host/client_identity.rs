//! Every request has a client: an address Envoy prints with an IPv6 scope
//! id, or one that is no IP address at all (a Unix socket's peer, an
//! internal listener's), is still the identity of a `client_ip` rule; a
//! header list the filter cannot read whole meets every rule's failure
//! policy. None of them is "no rule applies".

use host_tests::wasm_host::Request;

use crate::both_transports;
use crate::fixture::{at, Kind, Servers};

both_transports!(
    an_address_with_a_scope_id_or_no_ip_at_all_is_still_a_client,
    too_many_header_lines_meet_the_failure_policy
);

const PER_IP: &str = r#"{"name":"ip","key":["client_ip"],"failure_mode":"closed",
  "limits":[{"algorithm":"fixed_window","limit":2,"window":"1h"}]}"#;

fn an_address_with_a_scope_id_or_no_ip_at_all_is_still_a_client(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&kind.config(PER_IP), 1).start();
    host.advance_to(at(1_000));
    // fe80::1 on interface 2 and on interface 3 may be two hosts: two clients.
    for source in ["[fe80::1%2]:443", "[fe80::1%3]:443", "/var/run/envoy.sock", "envoy://internal_client_address/", ""]
    {
        let statuses: Vec<u32> = (0..3).map(|_| host.send(0, Request::get("/").from(source)).status).collect();
        assert_eq!(statuses, [200, 200, 429], "{source:?}");
    }
    // The same address on another port is the same client.
    assert_eq!(host.send(0, Request::get("/").from("[fe80::1%2]:9999")).status, 429);
}

const OPEN_AND_CLOSED: &str = r#"
  {"name":"open","match":{"path_prefix":"/open"},"key":["header:x-api-key"],"failure_mode":"open",
   "limits":[{"algorithm":"fixed_window","limit":2,"window":"1h"}]},
  {"name":"closed","match":{"path_prefix":"/closed"},"key":["header:x-api-key"],"failure_mode":"closed",
   "limits":[{"algorithm":"fixed_window","limit":2,"window":"1h"}]}"#;

/// A request to `path` carrying 1,500 header lines (the filter reads 1,024).
fn crowded(path: &str) -> Request {
    (0..1500).fold(Request::get(path).header("x-api-key", "k"), |r, i| r.header(&format!("x-pad-{i}"), "v"))
}

fn too_many_header_lines_meet_the_failure_policy(kind: Kind) {
    let servers = Servers::start(kind);
    // Each rule alone: a closed rule answers 503 whatever the path says.
    let mut closed = servers.host(&kind.config(OPEN_AND_CLOSED), 1).start();
    closed.advance_to(at(1_000));
    let r = closed.send(0, crowded("/nothing-matches-this"));
    assert_eq!((r.status, r.local), (503, true), "{r:?}");
    let only_open = OPEN_AND_CLOSED.split_once(",\n  {\"name\":\"closed\"").unwrap().0;
    let mut open = servers.host(&kind.config(only_open), 1).start();
    open.advance_to(at(1_000));
    // Open: the fallback bucket, one for every such request (limit 2 here).
    let statuses: Vec<u32> = (0..3).map(|_| open.send(0, crowded("/nothing-matches-this")).status).collect();
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!(open.counter("ratelimit.open.bad_requests"), 3);
}
