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
mod client_identity;
mod deny_cache;
mod fallback;
mod fixture;
mod harness;
mod header_bytes;
mod hostcall_statuses;
mod huge_replies;
mod info_failures;
mod late_reply;
mod leases;
mod local_slots;
mod malformed;
mod memory_flat;
mod noscript;
mod one_decision_fails;
mod overrides_index;
mod random;
mod random_statuses;
mod redis_calls;
mod repeated_headers;
mod reply_failures;
mod request_trailers;
mod reservations;
mod retry_after;
mod shared_tables;
mod status_scenario;
mod store_acl;
mod stray_callbacks;
mod ticks;
mod timeouts;
