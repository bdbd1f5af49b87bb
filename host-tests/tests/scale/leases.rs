//! Leases across a fleet: three proxies of two workers each sharing one
//! Redis, one hot client offered three times its limit through all of them
//! at once. Admitted: never more than the limit, and at least the limit
//! less the bound docs/leases.md states (P proxies × max_units), for every
//! windowed algorithm and for token_bucket and gcra, and with large
//! leases; two limits of one rule
//! stay all or nothing (their counts in Redis agree); a cold client beside
//! it is decided per request (its counts are exactly its requests).

use std::sync::{Arc, Barrier};
use std::time::Duration;

use host_tests::fleet::Fleet;
use host_tests::redis_server::RedisServer;
use host_tests::windows::{start_clear_of_boundary, HOUR};
use ratelimit::identity::digest;

use crate::{plugin_config, scan_keys};

const PROXIES: usize = 3;
const LIMIT: u64 = 60;
const MAX_UNITS: u64 = 10;
/// The rule of large leases.
const BIG_LIMIT: u64 = 300;
const BIG_MAX_UNITS: u64 = 64;
/// Client threads per proxy, each with its own connections (so both
/// workers of every proxy take requests).
const THREADS: usize = 4;

/// A rule on `/<name>` keyed by `x-user`, leased, with these limits.
fn rule(name: &str, limits: &str) -> String {
    rule_of(name, MAX_UNITS, limits)
}

/// `rule` with leases of up to `max_units`.
fn rule_of(name: &str, max_units: u64, limits: &str) -> String {
    format!(
        r#"{{"name":"{name}","match":{{"path_prefix":"/{name}"}},"key":["header:x-user"],"failure_mode":"closed",
            "fleet_size":{PROXIES},"lease":{{"max_units":{max_units},"max_age":"2s"}},"limits":[{limits}]}}"#
    )
}

/// The rules: each algorithm alone (an hour's window or bucket: nothing
/// refills within the test), and two limits on one rule.
fn rules() -> String {
    [
        rule("fw", &format!(r#"{{"algorithm":"fixed_window","limit":{LIMIT},"window":"1h"}}"#)),
        rule("sw", &format!(r#"{{"algorithm":"sliding_window","limit":{LIMIT},"window":"1h"}}"#)),
        rule("tb", &format!(r#"{{"algorithm":"token_bucket","limit":{LIMIT},"window":"1h"}}"#)),
        rule("gc", &format!(r#"{{"algorithm":"gcra","limit":{LIMIT},"window":"1h","burst":{LIMIT}}}"#)),
        rule(
            "two",
            &format!(
                r#"{{"algorithm":"fixed_window","limit":{LIMIT},"window":"1h"}},{{"algorithm":"sliding_window","limit":1000,"window":"1h"}}"#
            ),
        ),
        rule_of("big", BIG_MAX_UNITS, &format!(r#"{{"algorithm":"sliding_window","limit":{BIG_LIMIT},"window":"1h"}}"#)),
    ]
    .join(",")
}

/// `3 × limit` requests of `user` on `/<path>`, all proxies at once; how many were admitted.
fn offered_three_times(fleet: &Arc<Fleet>, path: &str, user: &str, limit: u64) -> u64 {
    let per_thread = 3 * limit as usize / (PROXIES * THREADS);
    let barrier = Arc::new(Barrier::new(PROXIES * THREADS));
    let threads: Vec<_> = (0..PROXIES * THREADS)
        .map(|t| {
            let (fleet, barrier, path, user) = (fleet.clone(), barrier.clone(), path.to_string(), user.to_string());
            std::thread::spawn(move || {
                barrier.wait();
                (0..per_thread)
                    .map(|_| fleet.get_as(t % PROXIES, &format!("/{path}/x"), &user).status)
                    .collect::<Vec<u16>>()
            })
        })
        .collect();
    let statuses: Vec<u16> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    assert!(statuses.iter().all(|s| *s == 200 || *s == 429), "{path}: {statuses:?}");
    statuses.iter().filter(|s| **s == 200).count() as u64
}

#[test]
fn a_hot_client_over_three_proxies_gets_its_limit_less_the_bound_and_never_more() {
    // An hour's windows: all of it in one.
    start_clear_of_boundary(HOUR, Duration::from_secs(240));
    let redis = RedisServer::start();
    let fleet = Arc::new(Fleet::start(redis.port, PROXIES, 2, &plugin_config(r#","timeout_ms":1000"#, "", &rules())));
    // P × max_units.
    let bound = PROXIES as u64 * MAX_UNITS;
    for (name, limit, bound) in [
        ("fw", LIMIT, bound),
        ("sw", LIMIT, bound),
        ("tb", LIMIT, bound),
        ("gc", LIMIT, bound),
        ("two", LIMIT, bound),
        ("big", BIG_LIMIT, PROXIES as u64 * BIG_MAX_UNITS),
    ] {
        let served = fleet.backend.served.load(std::sync::atomic::Ordering::Relaxed);
        let admitted = offered_three_times(&fleet, name, "hot", limit);
        let at_upstream = fleet.backend.served.load(std::sync::atomic::Ordering::Relaxed) - served;
        let leased = fleet.stat_sum(&format!("wasmcustom.ratelimit.{name}.lease_allowed"));
        eprintln!("{name}: admitted {admitted} of {} (at the upstream {at_upstream}), {leased} from leases", 3 * limit);
        assert_eq!(admitted, at_upstream, "{name}");
        assert!(admitted <= limit, "{name}: {admitted} admitted, more than {limit}");
        assert!(admitted >= limit - bound, "{name}: {admitted} admitted, under {limit} - {bound}");
        assert!(leased > 0, "{name}: leases were used");
    }
    // All or nothing: both limits of "two" counted the same units.
    let mut c = redis.connect();
    let keys = scan_keys(&mut c);
    let tag = digest("hot");
    let mut count = |code: &str| -> u64 {
        let key = keys.iter().find(|k| k.contains(&format!("{{{tag}}}:two:{code}:"))).unwrap();
        redis::cmd("GET").arg(key).query::<u64>(&mut c).unwrap()
    };
    let (fw, sw) = (count("fw"), count("sw"));
    assert_eq!(fw, sw, "the two limits of one rule move together");
    // A cold client beside the hot one: one request a proxy, each decided
    // by the store and counted exactly once (no units leased for it).
    for proxy in 0..PROXIES {
        assert_eq!(fleet.get_as(proxy, "/fw/x", "cold").status, 200);
    }
    let cold = keys_of(&mut c, "cold", "fw");
    assert_eq!(cold, PROXIES as u64, "a cold client's count is its requests");
}

/// The fixed-window count of `user` under rule `rule`.
fn keys_of(c: &mut redis::Connection, user: &str, rule: &str) -> u64 {
    let tag = digest(user);
    scan_keys(c)
        .iter()
        .filter(|k| k.contains(&format!("{{{tag}}}:{rule}:fw:")))
        .map(|k| redis::cmd("GET").arg(k).query::<u64>(c).unwrap())
        .sum()
}
