//! The root context's timer: every `stats_interval` each worker reads the
//! store's INFO through its transport, exports its figures and warns once
//! when the eviction policy can drop live counters.

use host_tests::wasm_host::{Fault, Request, State};

use crate::both_transports;
use crate::fixture::{rule, Kind, Servers};

both_transports!(info_is_read_on_every_tick_and_the_policy_warned_about_once);

fn info_is_read_on_every_tick_and_the_policy_warned_about_once(kind: Kind) {
    let servers = Servers::start(kind);
    let mut c = servers.redis.connect();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("104857600").query(&mut c).unwrap();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("allkeys-lru").query(&mut c).unwrap();
    let config =
        kind.config_full(&rule("api", "/api", "closed", "fixed_window", 5, "1h"), r#","stats_interval":"1s""#, "");
    let mut host = servers.host(&config, 2).start();
    let infos =
        |host: &host_tests::wasm_host::Host| host.calls().iter().filter(|c| c.request.command() == "INFO").count();
    host.advance(999);
    assert_eq!(infos(&host), 0);
    host.advance(1);
    assert_eq!(infos(&host), 2, "one per worker at 1 s");
    host.advance(2_000);
    assert_eq!(infos(&host), 6);
    assert_eq!(host.counter("ratelimit.store.maxmemory_bytes"), 104_857_600);
    assert_eq!(host.counter("ratelimit.store.evicting_policy"), 1);
    let warning = "ratelimit: Redis maxmemory-policy is allkeys-lru: under memory pressure it can evict live counters and silently lift limits; use volatile-ttl";
    assert_eq!(host.logs_containing("maxmemory-policy"), [warning, warning], "once per worker");
    assert_eq!(host.send(0, Request::get("/api")).status, 200, "requests are unaffected");
}

both_transports!(the_timer_fires_while_steady_traffic_keeps_changing_its_period);

/// Envoy starts the timer again from now at every period set. A decision
/// queued for a call slot shortens the period and the call that takes it
/// lengthens it again: with requests every 2 ms and answers 4 ms after
/// their call, that happens every few ms, and a period set back to the
/// idle one each time would never run out (no INFO, no permit renewals,
/// no body timeouts). Each timer duty must still come on time.
fn the_timer_fires_while_steady_traffic_keeps_changing_its_period(kind: Kind) {
    let servers = Servers::start(kind);
    let config = kind.config_full(
        &rule("api", "/api", "closed", "fixed_window", 1_000_000, "1h"),
        r#","timeout_ms":1000,"stats_interval":"1s","batch":{"max_in_flight":1}"#,
        "",
    );
    let mut host = servers.host(&config, 1).start();
    host.fault_always(Some(Fault::Delay(4)));
    let infos =
        |host: &host_tests::wasm_host::Host| host.calls().iter().filter(|c| c.request.command() == "INFO").count();
    let mut streams = Vec::new();
    for _ in 0..1_500 {
        streams.push(host.begin(0, Request::get("/api")));
        host.advance(2);
        streams.retain(|id| match host.state(*id) {
            State::Continued => {
                assert_eq!(host.finish(*id).status, 200);
                false
            }
            _ => true,
        });
    }
    // 3 s of requests: the INFO of 1 s and of 2 s, and of 3 s if its tick
    // came before the last request.
    let n = infos(&host);
    assert!((2..=3).contains(&n), "INFO read {n} times in 3 s with stats_interval 1s");
}
