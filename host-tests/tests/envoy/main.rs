//! The filter in a real Envoy 1.40 with webdis and Redis, all started from
//! envoy-config/ on free loopback ports.

// A test crate: a failed step in a helper is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod access_log;
mod algorithms;
mod authorization;
mod bad_config;
mod burst;
mod client_address;
mod concurrency;
mod deny_cache;
mod envoy_config;
mod eviction;
mod failure;
mod hostile;
mod identities;
mod lease_after_denial;
mod lease_refill;
mod llm_bodies;
mod llm_concurrency;
mod llm_streams;
mod operators;
mod overrides;
mod paths;
mod prometheus;
mod recovery;
mod request_bodies;
mod request_trailers;
mod reservations;
mod sdk_errors;
mod sdk_gateway;
mod store_acl;
mod store_misbehaving;
mod timer;
mod token_dodges;
mod token_fields;
mod tokens;
mod two_plugins;
mod unix_socket;
mod vm_failure;

/// A plugin configuration with `rules` (a JSON array body) and a short
/// breaker, calling webdis through the template's store cluster.
pub fn plugin_config(rules: &str) -> String {
    format!(
        r#"{{"domain":"t","store":{{"transport":"webdis","cluster":"ratelimit_store","authority":"webdis","timeout_ms":1000,
            "circuit_breaker":{{"failures":3,"open":"1s"}}}},"rules":[{rules}]}}"#
    )
}

/// The fixed-window count of rule `llm` for `key` in Redis (0 if none
/// yet), in domain `t` (`plugin_config`).
pub fn charged(stack: &host_tests::stack::Stack, key: &str) -> u64 {
    let mut c = stack.redis.connect();
    let pattern = format!("t:{{{}}}:llm:fw:*", ratelimit::identity::digest(key));
    let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(&mut c).unwrap();
    keys.iter().map(|k| redis::cmd("GET").arg(k).query::<Option<u64>>(&mut c).unwrap().unwrap_or(0)).sum()
}

/// Waits until `key`'s count is `want` (charges land after the response),
/// and until it has stayed so for a quiet period (`settle::settles_at`): a
/// charge made twice, even later than the first, shows. `rising`: it never
/// passes `want` on the way (check-then-charge; a reservation holds more
/// until it is settled).
pub fn wait_charged(stack: &host_tests::stack::Stack, key: &str, want: u64, rising: bool) {
    host_tests::settle::settles_at(&format!("{key}: charged"), want, rising, || charged(stack, key));
}
