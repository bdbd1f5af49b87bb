//! The root context's timer: every `stats_interval` each worker reads the
//! store's INFO through its transport, exports its figures and warns once
//! when the eviction policy can drop live counters.

use host_tests::wasm_host::Request;

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
