//! Plugin configurations on one `vm_id` (one VM, several root contexts):
//! those that differ in domain or store keep their breakers, deny caches
//! and lease tables apart in shared data, so a store that fails for one
//! never shuts another; those with the same domain and store share them,
//! as they share the Redis keys.

use std::time::{Duration, Instant};

use host_tests::backend::Backend;
use host_tests::envoy::{render_on_fresh_ports, Envoy};
use host_tests::http::{agent, send};
use host_tests::process::free_port;
use host_tests::redis_server::RedisServer;
use host_tests::stack::command_calls;
use host_tests::webdis::{with_credential, Webdis};
use host_tests::windows::{start_clear_of_boundary, HOUR};

/// The rendered wasm filter, whole, from its `- name:` line to the line
/// before the next filter.
fn wasm_filter(config: &str) -> String {
    let start = config.find("          - name: envoy.filters.http.wasm").unwrap();
    let end = start + config[start..].find("          # Authentication filters").unwrap();
    config[start..end].to_string()
}

/// A copy of the rendered `filter` as another plugin of the same VM:
/// root id `root`, configuration `json`.
fn another_plugin(filter: &str, root: &str, json: &str) -> String {
    let value_at = filter.find("value: '").unwrap();
    let value_end = value_at + filter[value_at..].find('\n').unwrap();
    let escaped = with_credential(json).replace('\'', "''").replace('\n', " ");
    let plugin = format!("{}value: '{escaped}'{}", &filter[..value_at], &filter[value_end..])
        .replace("name: ratelimit\n", &format!("name: {root}\n"))
        .replace("root_id: ratelimit\n", &format!("root_id: {root}\n"));
    assert!(plugin.contains("vm_id: ratelimit"), "{plugin}");
    plugin
}

/// A static cluster to a webdis (or nothing) on `port`.
fn cluster(name: &str, port: u16) -> String {
    format!(
        "\n  - name: {name}\n    type: STATIC\n    connect_timeout: 0.25s\n    load_assignment:\n      cluster_name: {name}\n      endpoints:\n      - lb_endpoints:\n        - endpoint:\n            address:\n              socket_address: {{ address: 127.0.0.1, port_value: {port} }}\n"
    )
}

/// A plugin of `domain` on `cluster`: rule `<names>r` (1 an hour,
/// closed: a denial to cache) on `/<path>/r` and rule `<names>l` (leased)
/// on `/<path>/l`. Plugins with the same `names` differ only in their
/// paths, so their entries in shared data have the same fingerprints (and
/// their counters the same names: Envoy adds them up).
fn plugin(domain: &str, cluster: &str, path: &str, names: &str) -> String {
    let breaker = r#"{"failures":3,"open":"60s"}"#;
    format!(
        r#"{{"domain":"{domain}","store":{{"transport":"webdis","cluster":"{cluster}","authority":"webdis","timeout_ms":1000,
            "circuit_breaker":{breaker}}},"rules":[
          {{"name":"{names}r","match":{{"path_prefix":"/{path}/r"}},"key":["header:x-user"],"failure_mode":"closed",
            "limits":[{{"algorithm":"fixed_window","limit":1,"window":"1h"}}]}},
          {{"name":"{names}l","match":{{"path_prefix":"/{path}/l"}},"key":["header:x-user"],"failure_mode":"closed",
            "lease":{{"max_units":8,"max_age":"60s"}},"limits":[{{"algorithm":"fixed_window","limit":1000,"window":"1h"}}]}}]}}"#
    )
}

/// Probes a breaker that opened at most `elapsed` ago can have sent,
/// every one failing: waits of 1 s doubling (the open period, 60 s, is
/// not reached).
fn probes_within(elapsed: Duration) -> u64 {
    let (mut at, mut wait, mut n) = (1_000u128, 1_000u128, 0);
    while at <= elapsed.as_millis() {
        n += 1;
        wait *= 2;
        at += wait;
    }
    n
}

#[test]
fn plugins_keep_breakers_caches_and_leases_apart_unless_they_share_domain_and_store() {
    start_clear_of_boundary(HOUR, Duration::from_secs(120));
    let (redis, redis_c) = (RedisServer::start(), RedisServer::start());
    // The script loaded: every decision is one EVALSHA, counted below.
    for r in [&redis, &redis_c] {
        let _: String =
            redis::cmd("SCRIPT").arg("LOAD").arg(ratelimit::script::SCRIPT).query(&mut r.connect()).unwrap();
    }
    let (webdis, webdis_c) = (Webdis::start(redis.port), Webdis::start(redis_c.port));
    let backend = Backend::start();
    // `a` and `d`: domain t on the template's store; `c`: domain t on
    // another store; `b`: domain u on a store nobody serves.
    let a = plugin("t", "ratelimit_store", "a", "");
    let (config, listener, admin) = render_on_fresh_ports(backend.port, webdis.port, Some(&a));
    let first = wasm_filter(&config);
    let others = [
        another_plugin(&first, "ratelimit_b", &plugin("u", "dead_store", "b", "b")),
        another_plugin(&first, "ratelimit_c", &plugin("t", "store_c", "c", "")),
        another_plugin(&first, "ratelimit_d", &plugin("t", "ratelimit_store", "d", "")),
    ];
    let config = config.replacen(&first, &format!("{first}{}", others.concat()), 1);
    let config =
        format!("{}{}{}", config.trim_end(), cluster("dead_store", free_port()), cluster("store_c", webdis_c.port));
    let envoy = Envoy::start(&config, listener, admin, 1).unwrap_or_else(|e| panic!("{}", e.log));
    let http = agent(Duration::from_secs(10));
    let get = |path: &str, user: &str| {
        send(&http, "GET", &format!("http://127.0.0.1:{listener}{path}"), &[("x-user", user)]).status
    };
    let calls = |r: &RedisServer| command_calls(r, "evalsha");

    // Breakers. b's store refuses every call: three failures open its
    // breaker, and b fails closed from then on without calling.
    // (It opens no sooner than this: its probes are counted from here.)
    let opened = Instant::now();
    assert_eq!([get("/b/r", "u1"), get("/b/r", "u1"), get("/b/r", "u1")], [503; 3]);
    assert_eq!(envoy.stat("wasmcustom.ratelimit.br.store_errors"), 3);
    // a's calls succeed in between: a breaker they shared would be closed
    // by each (or would refuse a), and b would call again after each.
    for i in 0..10 {
        assert_eq!(get("/a/r", &format!("breaker-{i}")), 200, "{}", envoy.log());
        assert_eq!(get("/b/r", "u1"), 503);
    }
    let probes = probes_within(opened.elapsed());
    let b_calls = envoy.stat("wasmcustom.ratelimit.br.store_errors");
    assert!(
        (3..=3 + probes).contains(&b_calls),
        "b's breaker stayed open: {b_calls} calls, at most 3 and {probes} probes in {:?}",
        opened.elapsed()
    );
    assert_eq!(envoy.stat("wasmcustom.ratelimit.br.fail_closed"), 13);
    assert_eq!(envoy.stat("wasmcustom.ratelimit.r.store_errors"), 0, "a was decided by its store every time");

    // Deny caches. a's store denies u2's second request; a remembers it.
    assert_eq!([get("/a/r", "u2"), get("/a/r", "u2")], [200, 429]);
    // c (another store) decides for itself: its store has nothing of u2.
    let c_before = calls(&redis_c);
    assert_eq!(get("/c/r", "u2"), 200, "c's deny cache is not a's");
    assert_eq!(calls(&redis_c), c_before + 1);
    // d (a's domain and store) shares a's cache: denied with no store call.
    let before = calls(&redis);
    assert_eq!(get("/d/r", "u2"), 429);
    assert_eq!(calls(&redis), before, "d answered from the cache it shares with a");

    // Lease tables. u3 on a: four requests make it hot, the fifth brings
    // a lease of 5 (its pace), which the next would spend.
    let before = calls(&redis);
    for _ in 0..5 {
        assert_eq!(get("/a/l", "u3"), 200);
    }
    assert_eq!(calls(&redis), before + 5);
    // c never spends a's lease: its own four, then its own lease, then that.
    let c_before = calls(&redis_c);
    for _ in 0..6 {
        assert_eq!(get("/c/l", "u3"), 200);
    }
    assert_eq!(calls(&redis_c), c_before + 5, "c is decided by its store until it holds a lease of its own");
    // d spends a's: hot at its fourth request, it finds a's lease.
    let before = calls(&redis);
    for _ in 0..4 {
        assert_eq!(get("/d/l", "u3"), 200);
    }
    assert_eq!(calls(&redis), before + 3, "d's fourth request was admitted from a's lease");
}
