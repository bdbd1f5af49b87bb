//! A distributed rate limiter for Envoy, as a proxy-wasm HTTP filter.
//!
//! Everything but [`glue`] is pure and host-independent, and is unit-tested
//! natively and inside wasm32. `glue` is the only module that calls
//! `proxy_wasm`.

pub mod algorithm;
pub mod call;
pub mod decision;
pub mod digest;
pub mod keys;
pub mod model;
pub mod script;

// The host glue exists only in the shipped module, not in unit-test builds.
#[cfg(all(target_arch = "wasm32", not(test)))]
mod glue;
