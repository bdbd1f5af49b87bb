//! Headers are bytes: Envoy 1.40 hands a module whatever the client sent,
//! UTF-8 or not. Non-UTF-8 bytes in every header the filter reads (a
//! `header:` key part, `match.headers`, `x-forwarded-for` with trusted
//! hops, `:path`, `:authority`, `:method`) never trap the module; the
//! request is decided, and the next, ordinary request is decided exactly.

use host_tests::wasm_host::{Host, Request};

use crate::both_transports;
use crate::fixture::{at, Kind, Servers};

both_transports!(
    a_non_utf8_key_header,
    a_non_utf8_matched_header,
    a_non_utf8_forwarded_for,
    a_non_utf8_path,
    a_non_utf8_authority,
    a_non_utf8_method
);

/// One rule per header, each on its own path prefix, limit 5 an hour.
const RULES: &str = r#"
  {"name":"key","match":{"path_prefix":"/key"},"key":["header:x-api-key"],"failure_mode":"closed",
   "limits":[{"algorithm":"fixed_window","limit":5,"window":"1h"}]},
  {"name":"tier","match":{"path_prefix":"/tier","headers":{"x-tier":"free"}},"key":["client_ip"],"failure_mode":"closed",
   "limits":[{"algorithm":"fixed_window","limit":5,"window":"1h"}]},
  {"name":"ip","match":{"path_prefix":"/ip"},"key":["client_ip"],"failure_mode":"closed",
   "limits":[{"algorithm":"fixed_window","limit":5,"window":"1h"}]},
  {"name":"path","match":{"path_prefix":"/path"},"key":["path"],"failure_mode":"closed",
   "limits":[{"algorithm":"fixed_window","limit":5,"window":"1h"}]},
  {"name":"host","match":{"path_prefix":"/host"},"key":["authority"],"failure_mode":"closed",
   "limits":[{"algorithm":"fixed_window","limit":5,"window":"1h"}]},
  {"name":"verb","match":{"path_prefix":"/verb","methods":["POST"]},"key":["method","client_ip"],"failure_mode":"closed",
   "limits":[{"algorithm":"fixed_window","limit":5,"window":"1h"}]}"#;

const HOSTILE: &[u8] = b"\xff\xfe";

fn host(kind: Kind, servers: &Servers) -> Host {
    let config = kind.config_with(RULES, r#","client_ip":{"xff_trusted_hops":1}"#);
    let mut host = servers.host(&config, 1).start();
    host.advance_to(at(1_000));
    host
}

/// Sends `request` and checks it is let through: under every rule's limit
/// and with a healthy store, no reading of those bytes may answer otherwise.
fn let_through(host: &mut Host, request: Request) {
    let r = host.send(0, request.clone());
    assert_eq!((r.status, r.local), (200, false), "{request:?}: {r:?}");
}

/// The remaining count the next ordinary request sees.
fn remaining(host: &mut Host, request: Request) -> String {
    let r = host.send(0, request);
    assert_eq!(r.status, 200, "{r:?}");
    r.header("x-ratelimit-remaining").expect("rate-limit headers").to_string()
}

fn a_non_utf8_key_header(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = host(kind, &servers);
    let_through(&mut host, Request::get("/key").header_bytes("x-api-key", HOSTILE));
    let_through(&mut host, Request::get("/key").header_bytes("x-api-key", b"k\xc3"));
    assert_eq!(remaining(&mut host, Request::get("/key").header("x-api-key", "k1")), "4");
    assert_eq!(remaining(&mut host, Request::get("/key").header("x-api-key", "k1")), "3");
}

/// `free` followed by a stray byte is not `free`, however it is read: the
/// rule does not match, and no store call is made.
fn a_non_utf8_matched_header(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = host(kind, &servers);
    for value in [&b"free\xff"[..], HOSTILE] {
        let r = host.send(0, Request::get("/tier").header_bytes("x-tier", value));
        assert_eq!((r.status, r.header("x-ratelimit-limit")), (200, None), "{value:?}: no rule applies");
    }
    assert_eq!(host.calls_made(), 0);
    assert_eq!(remaining(&mut host, Request::get("/tier").header("x-tier", "free")), "4");
}

/// A last `x-forwarded-for` entry that is not an address falls back to the
/// connection's address, as documented for `xff_trusted_hops`.
fn a_non_utf8_forwarded_for(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = host(kind, &servers);
    let from = |r: Request| r.from("10.0.0.7:1000");
    let_through(&mut host, from(Request::get("/ip").header_bytes("x-forwarded-for", HOSTILE)));
    let_through(&mut host, from(Request::get("/ip").header_bytes("x-forwarded-for", b"192.0.2.1, 10.9.\xff.1")));
    assert_eq!(remaining(&mut host, from(Request::get("/ip").header("x-forwarded-for", "192.0.2.1"))), "4");
    assert_eq!(remaining(&mut host, from(Request::get("/ip"))), "2", "both were counted for 10.0.0.7");
}

fn a_non_utf8_path(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = host(kind, &servers);
    let_through(&mut host, Request::get("/").set_header_bytes(":path", b"/path/\xff\xfe"));
    let_through(&mut host, Request::get("/").set_header_bytes(":path", b"/path/x?q=\xff"));
    assert_eq!(remaining(&mut host, Request::get("/path/ok")), "4");
    assert_eq!(remaining(&mut host, Request::get("/path/ok")), "3");
}

fn a_non_utf8_authority(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = host(kind, &servers);
    let_through(&mut host, Request::get("/host").set_header_bytes(":authority", b"\xff\xfe.example"));
    assert_eq!(remaining(&mut host, Request::get("/host")), "4");
    assert_eq!(remaining(&mut host, Request::get("/host")), "3");
}

/// A method that is not `POST`, however it is read: the rule does not match.
fn a_non_utf8_method(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = host(kind, &servers);
    for method in [&b"P\xffST"[..], HOSTILE] {
        let r = host.send(0, Request::get("/verb").set_header_bytes(":method", method));
        assert_eq!((r.status, r.header("x-ratelimit-limit")), (200, None), "{method:?}: no rule applies");
    }
    assert_eq!(host.calls_made(), 0);
    assert_eq!(remaining(&mut host, Request::new("POST", "/verb")), "4");
}
