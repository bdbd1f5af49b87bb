//! Several field lines of one header, as Envoy hands them over (every line
//! through `get_header_map_pairs`; Envoy's inline headers already joined
//! into one comma-separated value by its codec). A key header with two
//! different values is refused: which one the upstream reads is unknown.
//! Two `x-forwarded-for` lines count as one list.

use host_tests::wasm_host::Request;

use crate::both_transports;
use crate::fixture::{at, Kind, Servers};

both_transports!(two_different_key_header_lines_are_refused, two_forwarded_for_lines_are_one_list);

const RULES: &str = r#"
  {"name":"key","match":{"path_prefix":"/key"},"key":["header:x-api-key"],"failure_mode":"closed",
   "limits":[{"algorithm":"fixed_window","limit":5,"window":"1h"}]},
  {"name":"ip","match":{"path_prefix":"/ip"},"key":["client_ip"],"failure_mode":"closed",
   "limits":[{"algorithm":"fixed_window","limit":5,"window":"1h"}]}"#;

fn config(kind: Kind) -> String {
    kind.config_with(RULES, r#","client_ip":{"xff_trusted_hops":1}"#)
}

fn two_different_key_header_lines_are_refused(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&config(kind), 1).start();
    host.advance_to(at(1_000));
    let r = host.send(0, Request::get("/key").header("x-api-key", "k1").header("x-api-key", "k2"));
    assert_eq!((r.status, r.local), (400, true));
    assert!(host.calls().is_empty(), "no budget was spent");
    // The same key twice is the key.
    let r = host.send(0, Request::get("/key").header("x-api-key", "k1").header("x-api-key", "k1"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("4"));
    let tag = format!("{{{}}}", ratelimit::identity::digest("k1"));
    assert!(host.calls()[0].request.args().iter().any(|a| a.contains(&tag)), "{:?}", host.calls()[0].request);
    assert_eq!(host.send(0, Request::get("/key").header("x-api-key", "k1")).header("x-ratelimit-remaining"), Some("3"));
    assert_eq!(host.send(0, Request::get("/key").header("x-api-key", "k2")).header("x-ratelimit-remaining"), Some("4"));
}

fn two_forwarded_for_lines_are_one_list(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&config(kind), 1).start();
    host.advance_to(at(1_000));
    let two_lines =
        Request::get("/ip").header("x-forwarded-for", "203.0.113.5").header("x-forwarded-for", "198.51.100.7");
    assert_eq!(host.send(0, two_lines).header("x-ratelimit-remaining"), Some("4"));
    let one_line = Request::get("/ip").header("x-forwarded-for", "203.0.113.5,198.51.100.7");
    assert_eq!(host.send(0, one_line).header("x-ratelimit-remaining"), Some("3"), "the same client: the last entry");
    let last = Request::get("/ip").header("x-forwarded-for", "198.51.100.7");
    assert_eq!(host.send(0, last).header("x-ratelimit-remaining"), Some("2"));
}
