//! A distributed rate limiter for Envoy, as a proxy-wasm HTTP filter.
//!
//! Everything but `glue` is pure and host-independent, and is unit-tested
//! natively and inside wasm32. `glue` is the only module that talks to the
//! host (the proxy-wasm ABI); the host's services reach the rest through
//! small traits (`worker::Host`, `RequestSource`, `SharedData`, `Metrics`).

pub mod algorithm;
pub mod breaker;
pub mod config;
pub mod deny_cache;
pub mod digest;
pub mod error_body;
pub mod fallback;
pub mod fingerprint;
pub mod id_map;
pub mod identity;
pub mod ip;
pub mod json;
pub mod keys;
pub mod lease;
pub mod matching;
pub mod metrics;
pub mod model;
pub mod outcome;
pub mod percent;
pub mod pipeline;
pub mod ratelimit_fields;
pub mod request;
pub mod response;
pub mod script;
pub mod secret;
pub mod shared;
pub mod spec;
pub mod store;
pub mod time;
pub mod usage;
pub mod worker;

// The host glue exists only in the shipped module, not in unit-test builds.
#[cfg(all(target_arch = "wasm32", not(test)))]
mod glue;
