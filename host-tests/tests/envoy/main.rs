//! The filter in a real Envoy 1.40 with webdis and Redis, all started from
//! envoy-config/ on free loopback ports.

// A test crate: a failed step in a helper is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

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
mod llm_concurrency;
mod operators;
mod paths;
mod prometheus;
mod recovery;
mod request_bodies;
mod reservations;
mod sdk_errors;
mod sdk_gateway;
mod store_acl;
mod store_misbehaving;
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
