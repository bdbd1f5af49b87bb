//! A store reply that fails after the call went out: a failed HTTP call
//! (reset; a body cut short or a stall past the timeout once the headers
//! came, which Envoy also reports as a reset), a `:status` that is missing,
//! not a number or not UTF-8, a callback that claims more bytes than the
//! reply holds, a reply Envoy cannot hand over (`proxy_get_buffer_bytes`
//! answers BadArgument), a Redis network error (status 1, size 0). Each is
//! a store error that the rule's failure policy answers (503 closed,
//! fallback open), and never a trap; the next request is decided as usual.

use host_tests::wasm_host::status::BAD_ARGUMENT;
use host_tests::wasm_host::{Fault, HeaderMap};

use crate::fixture::{both_policies, Kind, Servers};

/// A 200 from webdis whose `:status` is `status` (or absent).
fn webdis_reply(status: Option<&[u8]>) -> Fault {
    let body = br#"{"EVALSHA":[1,4,1000,0]}"#.to_vec();
    let mut headers = HeaderMap::new();
    if let Some(s) = status {
        headers.push(":status", s);
    }
    headers.push("content-type", "application/json");
    headers.push("content-length", body.len().to_string());
    Fault::HttpReply(headers, body)
}

#[test]
fn webdis_replies_that_fail_after_dispatch_are_store_errors() {
    let servers = Servers::start(Kind::Webdis);
    let cases = [
        Fault::Reset,
        webdis_reply(None),
        webdis_reply(Some(b"abc")),
        webdis_reply(Some(b"")),
        webdis_reply(Some(b"\xff\xfe")),
        webdis_reply(Some(b"2\xff0")),
        Fault::SizeOverclaim(100),
        Fault::BodyStatus(BAD_ARGUMENT),
    ];
    for (client, fault) in cases.iter().enumerate() {
        both_policies(&servers, client, fault);
    }
}

#[test]
fn redis_replies_that_fail_after_dispatch_are_store_errors() {
    let servers = Servers::start(Kind::Redis);
    let cases = [Fault::ConnectFailure, Fault::SizeOverclaim(100), Fault::BodyStatus(BAD_ARGUMENT)];
    for (client, fault) in cases.iter().enumerate() {
        both_policies(&servers, client, fault);
    }
}
