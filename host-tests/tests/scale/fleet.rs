//! Three proxies (each with two workers) sharing one Redis through one
//! webdis: for every algorithm, the fleet admits exactly the limit for one
//! identity, whether the traffic goes round-robin or all at once; no N×
//! over-admission.

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use host_tests::fleet::Fleet;
use host_tests::redis_server::RedisServer;
use host_tests::windows::{start_clear_of_boundary, DAY};

use crate::{now_ms, plugin_config, scan_keys};
use ratelimit::identity::digest;

const PROXIES: usize = 3;
const LIMIT: u64 = 20;
const DAY_MS: u64 = 86_400_000;
// (algorithm, key code). Windows of a day: nothing refills during the test
// (token_bucket and gcra gain one request per 72 minutes).
const ALGORITHMS: [(&str, &str); 5] =
    [("sliding_window", "sw"), ("fixed_window", "fw"), ("token_bucket", "tb"), ("sliding_log", "sl"), ("gcra", "gc")];

fn rules() -> String {
    ALGORITHMS
        .iter()
        .map(|(a, _)| {
            let burst = if *a == "gcra" { format!(r#","burst":{LIMIT}"#) } else { String::new() };
            format!(
                r#"{{"name":"{a}","match":{{"path_prefix":"/{a}"}},"key":["header:x-user"],"failure_mode":"closed",
                    "limits":[{{"algorithm":"{a}","limit":{LIMIT},"window":"1d"{burst}}}]}}"#
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn three_proxies_sharing_one_redis_admit_exactly_the_limit_for_every_algorithm() {
    // Keys carry the day's index and the counts are exact: all in one day.
    start_clear_of_boundary(DAY, Duration::from_secs(180));
    let redis = RedisServer::start();
    let fleet = Arc::new(Fleet::start(redis.port, PROXIES, 2, &plugin_config(r#","timeout_ms":1000"#, "", &rules())));
    let day = now_ms() / DAY_MS;
    for (algo, _) in ALGORITHMS {
        let path = format!("/{algo}/items");

        // Round-robin: the first LIMIT requests pass with remaining counting
        // down across the proxies, every later one is refused.
        let mut admitted_by = [0u64; PROXIES];
        for i in 0..3 * LIMIT {
            let proxy = (i % PROXIES as u64) as usize;
            let a = fleet.get_as(proxy, &path, "round-robin");
            if i < LIMIT {
                let remaining = a.header("x-ratelimit-remaining").map(str::to_string);
                assert_eq!((a.status, remaining), (200, Some((LIMIT - 1 - i).to_string())), "{algo} #{i}: {a:?}");
                admitted_by[proxy] += 1;
            } else {
                assert_eq!(a.status, 429, "{algo} #{i} via proxy {proxy}: {a:?}");
            }
        }
        assert_eq!(admitted_by, [7, 7, 6], "{algo}");

        // All at once: 120 requests from 24 threads over the three proxies.
        let barrier = Arc::new(Barrier::new(24));
        let threads: Vec<_> = (0..24)
            .map(|t| {
                let (fleet, barrier, path) = (fleet.clone(), barrier.clone(), path.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    (0..5).map(|_| fleet.get_as(t % PROXIES, &path, "concurrent").status).collect::<Vec<u16>>()
                })
            })
            .collect();
        let statuses: Vec<u16> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        let ok = statuses.iter().filter(|s| **s == 200).count() as u64;
        let refused = statuses.iter().filter(|s| **s == 429).count() as u64;
        assert_eq!((ok, refused), (LIMIT, 120 - LIMIT), "{algo}: {statuses:?}");
        assert_eq!(fleet.stat_sum(&format!("wasmcustom.ratelimit.{algo}.allowed")), 2 * LIMIT, "{algo}");
    }
    // Exactly the filter's keys: one per (identity, algorithm); sliding and
    // fixed windows carry the day's index.
    let keys: BTreeSet<String> = scan_keys(&mut redis.connect()).into_iter().collect();
    let want: BTreeSet<String> = ALGORITHMS
        .iter()
        .flat_map(|(a, code)| {
            ["round-robin", "concurrent"].map(|user| {
                let index = if ["sw", "fw"].contains(code) { format!(":{day}") } else { String::new() };
                format!("t:{{{}}}:{a}:{code}:{DAY_MS}{index}", digest(user))
            })
        })
        .collect();
    assert_eq!(keys, want);
}
