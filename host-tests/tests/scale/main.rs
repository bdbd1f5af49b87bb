//! Scale-out and resilience with real processes: a Redis Cluster behind
//! Envoy's redis_proxy with a master failover, a fleet of proxies sharing
//! one Redis, and store faults (paused, restarted, webdis killed, the open
//! breaker), all on free loopback ports.

// A test crate: a failed step in a helper is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cluster;
mod concurrency_limits;
mod concurrency_reload;
mod faults;
mod fleet;
mod leases;

/// A plugin configuration calling webdis through the template's store
/// cluster: `store` is extra JSON members of `store` (with a leading comma),
/// `top` extra top-level members (with a trailing comma), `rules` a JSON
/// array body. Every rule's identity in these tests is the `x-user` header.
pub fn plugin_config(store: &str, top: &str, rules: &str) -> String {
    format!(
        r#"{{"domain":"t",{top}"store":{{"transport":"webdis","cluster":"ratelimit_store","authority":"webdis"{store}}},
            "rules":[{rules}]}}"#
    )
}

/// Every key of one Redis node, by SCAN.
pub fn scan_keys(conn: &mut redis::Connection) -> Vec<String> {
    let mut keys = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let (next, batch): (String, Vec<String>) =
            redis::cmd("SCAN").arg(&cursor).arg("COUNT").arg(1000).query(conn).unwrap();
        keys.extend(batch);
        if next == "0" {
            return keys;
        }
        cursor = next;
    }
}

/// Milliseconds since the Unix epoch (the clock the proxies read too).
pub fn now_ms() -> u64 {
    u64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap()
}
