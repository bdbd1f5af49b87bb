//! The eviction guard: a Redis that evicts counters is made loud.

use std::time::{Duration, Instant};

use host_tests::stack::Stack;

#[test]
fn a_small_allkeys_redis_that_evicts_shows_the_warning_and_the_metric() {
    let config = r#"{"store":{"cluster":"ratelimit_store","authority":"webdis","stats_interval":"200ms"},
        "rules":[{"name":"api","key":["client_ip"],"limits":[{"limit":100,"window":"1m"}]}]}"#;
    let stack = Stack::start(config);
    let mut c = stack.redis.connect();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("2mb").query(&mut c).unwrap();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("allkeys-lru").query(&mut c).unwrap();
    let filler = "x".repeat(1024);
    let evicted = |c: &mut redis::Connection| -> u64 {
        let info: String = redis::cmd("INFO").arg("stats").query(c).unwrap();
        info.lines().find_map(|l| l.strip_prefix("evicted_keys:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
    };
    let mut i = 0;
    while evicted(&mut c) == 0 {
        let mut pipe = redis::pipe();
        for _ in 0..500 {
            pipe.cmd("SET").arg(format!("filler:{i}")).arg(&filler).ignore();
            i += 1;
        }
        let _: () = pipe.query(&mut c).unwrap();
        assert!(i < 100_000, "Redis never evicted");
    }
    assert_eq!(stack.get("/").status, 200);
    let warning = "ratelimit: Redis maxmemory-policy is allkeys-lru: under memory pressure it can evict live counters and silently lift limits; use volatile-ttl";
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let evicted_stat = stack.envoy.stat("wasmcustom.ratelimit.store.evicted_keys");
        let policy_stat = stack.envoy.stat("wasmcustom.ratelimit.store.evicting_policy");
        if evicted_stat > 0 && policy_stat == 1 && stack.envoy.log().contains(warning) {
            assert!(stack.envoy.stat("wasmcustom.ratelimit.store.maxmemory_bytes") == 2 * 1024 * 1024);
            assert!(stack.envoy.stat("wasmcustom.ratelimit.store.used_memory_bytes") > 0);
            break;
        }
        assert!(Instant::now() < deadline, "no eviction metric ({evicted_stat}) or warning in the log");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_volatile_ttl_redis_stays_quiet() {
    let config = r#"{"store":{"cluster":"ratelimit_store","authority":"webdis","stats_interval":"200ms"},
        "rules":[{"name":"api","key":["client_ip"],"limits":[{"limit":100,"window":"1m"}]}]}"#;
    let stack = Stack::start(config);
    let mut c = stack.redis.connect();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("volatile-ttl").query(&mut c).unwrap();
    // Set after the policy: an INFO that shows it was read after both.
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("3mb").query(&mut c).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while stack.envoy.stat("wasmcustom.ratelimit.store.maxmemory_bytes") != 3 * 1024 * 1024 {
        assert!(Instant::now() < deadline, "the store's INFO after the policy never arrived");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(stack.envoy.stat("wasmcustom.ratelimit.store.used_memory_bytes") > 0);
    assert!(!stack.envoy.log().contains("maxmemory-policy is"));
    assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.store.evicting_policy"), 0);
}
