//! The compiled filter in the wasmtime host that plays Envoy
//! (`host_tests::wasm_host`): an injected clock, store calls answered when
//! the test says so, faults per call, several VMs over one shared-data
//! store; a real redis-server, and webdis for the default artifact.
//!
//! Tests that apply to both builds run once per transport.

// A test crate: a failed step in a helper is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod artifacts;
mod breaker;
mod deny_cache;
mod fallback;
mod fixture;
mod harness;
mod late_reply;
mod malformed;
mod noscript;
mod random;
mod redis_calls;
mod retry_after;
mod ticks;
mod timeouts;
