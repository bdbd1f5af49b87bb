//! Request trailers (HTTP/2): the body's last chunk comes without
//! `end_of_stream` and the trailers end the stream. A request waiting for
//! its body is decided at the trailers, and no request goes on before its
//! decision: Envoy resumes a paused stream when the trailers callback
//! answers Continue.

use host_tests::wasm_host::{Host, Request, State};

use crate::both_transports;
use crate::fixture::{at, Kind, Servers};

both_transports!(a_body_rule_decides_at_the_trailers, a_headers_rule_holds_the_trailers_until_its_decision);

/// Two requests an hour per model, read from the body.
const BODY_RULE: &str = r#"{"name":"per-model","match":{"path_prefix":"/v1/"},"key":["body:model"],
    "failure_mode":"closed","limits":[{"algorithm":"fixed_window","limit":2,"window":"1h"}]}"#;

/// Two requests an hour per client address, decided on the headers.
const HEADERS_RULE: &str = r#"{"name":"per-client","match":{"path_prefix":"/v1/"},"key":["client_ip"],
    "failure_mode":"closed","limits":[{"algorithm":"fixed_window","limit":2,"window":"1h"}]}"#;

fn chat_with_trailers() -> Request {
    Request::new("POST", "/v1/chat")
        .header("content-type", "application/json")
        .body(br#"{"model":"m1"}"#)
        .trailers(&[("x-t", "1")])
}

/// Three requests with trailers, one at a time: each waits for its
/// decision past the trailers; the first two go on, the third is refused.
fn three_in_turn(host: &mut Host) -> Vec<u32> {
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let id = host.begin(0, chat_with_trailers());
        assert_eq!(host.state(id), State::Waiting, "held past its trailers until the store decides");
        host.run_until_idle();
        statuses.push(host.finish(id).status);
    }
    statuses
}

fn a_body_rule_decides_at_the_trailers(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host: Host = servers.host(&kind.config(BODY_RULE), 1).start();
    host.advance_to(at(1_000));
    assert_eq!(three_in_turn(&mut host), [200, 200, 429]);
    // The body read at the trailers is the one the store counted: another
    // model has its own two.
    let other = Request::new("POST", "/v1/chat").body(br#"{"model":"m2"}"#).trailers(&[("x-t", "1")]);
    assert_eq!(host.send(0, other).status, 200);
}

fn a_headers_rule_holds_the_trailers_until_its_decision(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host: Host = servers.host(&kind.config(HEADERS_RULE), 1).start();
    host.advance_to(at(1_000));
    assert_eq!(three_in_turn(&mut host), [200, 200, 429]);
}
