//! The deny cache in shared data: one worker's denial answers every
//! worker until the retry instant, and never past it; other clients and a
//! disabled cache always reach the store.

use host_tests::wasm_host::status::NOT_FOUND;
use host_tests::wasm_host::{Request, Times};

use crate::both_transports;
use crate::fixture::{at, rule, Kind, Servers};

both_transports!(
    a_denial_on_one_worker_answers_them_all_until_it_expires,
    a_disabled_cache_asks_the_store_every_time,
    a_clock_that_fails_once_never_revives_an_expired_denial
);

const RULE: fn() -> String = || rule("api", "/api", "closed", "fixed_window", 1, "10s");

fn a_denial_on_one_worker_answers_them_all_until_it_expires(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&kind.config(&RULE()), 3).start();
    host.advance_to(at(4_000));
    assert_eq!(host.send(0, Request::get("/api")).status, 200);
    assert_eq!(host.send(1, Request::get("/api")).status, 429, "the store denies on VM 1");
    assert_eq!(host.calls().len(), 2);
    // VMs 0 and 2 answer from the entry VM 1 wrote, with its countdown.
    for vm in [0, 2, 0, 2] {
        let r = host.send(vm, Request::get("/api"));
        assert_eq!((r.status, r.header("retry-after")), (429, Some("6")), "VM {vm}");
    }
    assert_eq!(host.calls().len(), 2);
    assert_eq!(host.counter("ratelimit.api.deny_cache_hits"), 4);
    // Another client is not denied by it.
    assert_eq!(host.send(2, Request::get("/api").from("10.0.0.2:1")).status, 200);
    assert_eq!(host.calls().len(), 3);
    // The entry holds until 10 000 exclusive: at 9 999 the cache; at 10 000 the store.
    host.advance_to(at(9_999));
    assert_eq!(host.send(2, Request::get("/api")).status, 429);
    assert_eq!(host.calls().len(), 3);
    host.advance_to(at(10_000));
    assert_eq!(host.send(2, Request::get("/api")).status, 200);
    assert_eq!(host.calls().len(), 4, "the expired entry sent the request to the store");
    assert_eq!(host.shared_keys().iter().filter(|k| k.starts_with("ratelimit.deny.")).count(), 1);
}

fn a_disabled_cache_asks_the_store_every_time(kind: Kind) {
    let servers = Servers::start(kind);
    let config = kind.config_with(&RULE(), r#","deny_cache":{"enabled":false}"#);
    let mut host = servers.host(&config, 2).start();
    host.advance_to(at(1_000));
    let statuses: Vec<u32> = (0..4).map(|i| host.send(i % 2, Request::get("/api")).status).collect();
    assert_eq!(statuses, [200, 429, 429, 429]);
    assert_eq!(host.calls().len(), 4);
    assert_eq!(host.counter("ratelimit.api.deny_cache_hits"), 0);
    assert!(host.shared_keys().iter().all(|k| !k.starts_with("ratelimit.deny.")));
}

fn a_clock_that_fails_once_never_revives_an_expired_denial(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&kind.config(&RULE()), 1).start();
    host.advance_to(at(4_000));
    assert_eq!(host.send(0, Request::get("/api")).status, 200);
    assert_eq!(host.send(0, Request::get("/api")).status, 429, "cached until 10 000");
    // The next window; another client's request reads the clock (good).
    host.advance_to(at(10_500));
    assert_eq!(host.send(0, Request::get("/api").from("10.0.0.2:1")).status, 200);
    // The clock hostcall fails for the next request: the module keeps the
    // last time it read, not 0 (at 0 the entry would be in force again).
    host.inject_status("proxy_get_current_time_nanoseconds", NOT_FOUND, Times::Next(1));
    let calls = host.calls().len();
    assert_eq!(host.send(0, Request::get("/api")).status, 200, "decided by the store");
    assert_eq!(host.calls().len(), calls + 1);
    assert_eq!(host.hostcall_count("proxy_get_current_time_nanoseconds").injected, 1);
}
