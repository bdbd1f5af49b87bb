//! The root context's INFO poll (every `stats_interval`) meets the same
//! failures as decision calls: a failed HTTP call, a `:status` that is
//! missing or not a number or not UTF-8, a callback claiming more bytes
//! than the reply holds, a reply that cannot be read, a network error, a
//! 64 MB reply, a lost reply (the timeout fires). None traps; the failed
//! poll exports nothing; the next tick polls again and exports the store's
//! figures; requests are decided as usual throughout. A poll's reply
//! delivered twice is used once.

use host_tests::wasm_host::status::BAD_ARGUMENT;
use host_tests::wasm_host::{Fault, HeaderMap, Host, Request};

use crate::both_transports;
use crate::fixture::{rule, Kind, Servers};

both_transports!(a_poll_reply_delivered_twice_is_used_once);

const MAXMEMORY: i64 = 104_857_600;

fn info_calls(host: &Host) -> usize {
    host.calls().iter().filter(|c| c.request.command() == "INFO").count()
}

/// Applies `fault` to the first INFO poll (at 1 s), then checks the polls
/// at 2 s and 3 s; requests come from client number `client`.
fn a_failed_poll_is_skipped(servers: &Servers, client: usize, fault: &Fault) {
    let kind = servers.kind;
    let config =
        kind.config_full(&rule("api", "/api", "closed", "fixed_window", 5, "1h"), r#","stats_interval":"1s""#, "");
    let mut host = servers.host(&config, 1).start();
    host.advance(999);
    host.faults([fault.clone()]);
    host.advance(1);
    assert_eq!(info_calls(&host), 1, "{fault:?}");
    host.advance(100);
    assert_eq!(host.counter("ratelimit.store.maxmemory_bytes"), 0, "{fault:?}: nothing exported");
    let r = host.send(0, Request::get("/api").from(&format!("10.3.0.{client}:1")));
    assert_eq!((r.status, r.header("x-ratelimit-remaining")), (200, Some("4")), "{fault:?}");
    // The Redis transport exports a poll's figures at the tick after it.
    host.advance(2_000);
    assert_eq!(info_calls(&host), 3, "{fault:?}: polled again at every tick");
    assert_eq!(host.counter("ratelimit.store.maxmemory_bytes"), MAXMEMORY, "{fault:?}");
}

fn a_poll_reply_delivered_twice_is_used_once(kind: Kind) {
    let servers = servers(kind);
    let config =
        kind.config_full(&rule("api", "/api", "closed", "fixed_window", 5, "1h"), r#","stats_interval":"1s""#, "");
    let mut host = servers.host(&config, 1).start();
    host.faults([Fault::Twice]);
    host.advance(3_000);
    assert_eq!(info_calls(&host), 3);
    assert_eq!(host.counter("ratelimit.store.maxmemory_bytes"), MAXMEMORY);
    assert_eq!(host.send(0, Request::get("/api")).header("x-ratelimit-remaining"), Some("4"));
}

fn servers(kind: Kind) -> Servers {
    let servers = Servers::start(kind);
    let mut c = servers.redis.connect();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(MAXMEMORY).query(&mut c).unwrap();
    servers
}

fn status_line(status: Option<&[u8]>) -> Fault {
    let mut headers = HeaderMap::new();
    if let Some(s) = status {
        headers.push(":status", s);
    }
    headers.push("content-length", "2");
    Fault::HttpReply(headers, b"{}".to_vec())
}

#[test]
fn webdis_a_failed_info_poll_is_skipped() {
    let servers = servers(Kind::Webdis);
    let cases = [
        Fault::Reset,
        Fault::Timeout,
        Fault::Drop,
        status_line(None),
        status_line(Some(b"abc")),
        status_line(Some(b"\xff\xfe")),
        Fault::Http(500, b"oops".to_vec()),
        Fault::SizeOverclaim(100),
        Fault::BodyStatus(BAD_ARGUMENT),
        Fault::Raw(vec![b'x'; 64 << 20]),
    ];
    for (client, fault) in cases.iter().enumerate() {
        a_failed_poll_is_skipped(&servers, client, fault);
    }
}

#[test]
fn redis_a_failed_info_poll_is_skipped() {
    let servers = servers(Kind::Redis);
    let mut huge = format!("${}\r\n", 64 << 20).into_bytes();
    huge.resize(huge.len() + (64 << 20), b'x');
    huge.extend_from_slice(b"\r\n");
    let cases = [
        Fault::ConnectFailure,
        Fault::Drop,
        Fault::Error("ERR oops".into()),
        Fault::SizeOverclaim(100),
        Fault::BodyStatus(BAD_ARGUMENT),
        Fault::Raw(huge),
    ];
    for (client, fault) in cases.iter().enumerate() {
        a_failed_poll_is_skipped(&servers, client, fault);
    }
}
