//! The index of overrides, polled by both builds (webdis's `SMEMBERS`, and
//! the Redis-call build's, as on Higress) against a real redis-server on
//! the host's clock: an override the index does not name is never read,
//! one it names applies once a poll has seen it, and one removed from it
//! is read no more.

use host_tests::wasm_host::{Host, Request};
use ratelimit::keys::override_key;

use crate::both_transports;
use crate::fixture::{at, Kind, Servers};

both_transports!(only_an_indexed_override_is_read);

/// One rule by client address, 5 an hour; overrides within 1 s.
fn config(kind: Kind) -> String {
    let rule = r#"{"name":"api","match":{"path_prefix":"/api"},"key":["client_ip"],"failure_mode":"closed",
        "limits":[{"algorithm":"fixed_window","limit":5,"window":"1h"}]}"#;
    kind.config_with(rule, r#","overrides":{"within":"1s"}"#)
}

fn only_an_indexed_override_is_read(kind: Kind) {
    let servers = Servers::start(kind);
    let mut redis = servers.redis.connect();
    let key = override_key("t", "10.0.0.2", "api");
    let () = redis::cmd("SET").arg(&key).arg("block").arg("PX").arg(3_600_000).query(&mut redis).unwrap();
    let mut host = servers.host(&config(kind), 1).start();
    let get = |host: &mut Host| host.send(0, Request::get("/api").from("10.0.0.2:1")).status;
    // Not polled yet: every decision reads its override (as without the index).
    host.advance_to(at(0));
    assert_eq!(get(&mut host), 403, "the index unknown");
    // The first poll answered (on the timer, or with that request): not
    // named, not read (once the block's denial, cached for within, is past).
    host.advance_to(at(1_001));
    assert!(servers.command_calls("smembers") >= 1);
    assert_eq!(get(&mut host), 200, "an override the index does not name");
    // Named: the next poll (every 500 ms) sees it; the decision after it reads it.
    let () = redis::cmd("SADD").arg("t:overrides").arg(&key).query(&mut redis).unwrap();
    host.advance_to(at(2_100));
    assert_eq!(get(&mut host), 403, "named by the index");
    assert_eq!(host.send(0, Request::get("/api").from("10.0.0.3:1")).status, 200, "another client");
    // Removed from the index: not read again once a poll saw it (the
    // denial cached: at most within, 1 s).
    let () = redis::cmd("SREM").arg("t:overrides").arg(&key).query(&mut redis).unwrap();
    host.advance_to(at(3_200));
    assert_eq!(get(&mut host), 200);
    assert!(servers.command_calls("smembers") >= 4, "one every 500 ms");
}
