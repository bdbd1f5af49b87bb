//! The module in real NGINX with ngx_wasm_module (`make nginx`): two worker
//! processes sharing one store and one shared-memory zone, from the shipped
//! `envoy-config/nginx.conf`, with real Redis and webdis.

// A test crate: a failed step in a helper is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod access_phase;
mod algorithms;
mod answers;
mod budgets;
mod concurrency;
mod failure;
mod leases;
mod refusal;
mod request_bodies;

/// A plugin configuration of `rules` (JSON) on webdis (its cluster is
/// replaced by webdis's address when rendered).
pub fn plugin(rules: &str) -> String {
    format!(
        r#"{{"domain":"ngx","store":{{"transport":"webdis","cluster":"127.0.0.1:7379","authority":"webdis","timeout_ms":1000}},"rules":[{rules}]}}"#
    )
}
