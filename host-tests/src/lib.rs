//! Harness for the tests that run the real servers and the compiled filter.
//!
//! Every server is started by the test that needs it, on a free 127.0.0.1
//! port with its own temporary directory, and stopped by its PID when its
//! guard drops, even when the test fails.
// This crate is test support: a failure to start a server IS a test failure,
// so panicking with a clear message is the right response here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod access_log;
pub mod backend;
pub mod bench;
pub mod body_upstream;
pub mod burst;
pub mod demo_table;
pub mod envoy;
pub mod fake_store;
pub mod file_server;
pub mod fleet;
pub mod h2_client;
pub mod held_streams;
pub mod http;
pub mod llm_gateway;
pub mod llm_upstream;
pub mod nginx;
pub mod oci;
pub mod paths;
pub mod prng;
pub mod probe_module;
pub mod process;
pub mod prometheus;
pub mod ratelimit_fields;
pub mod raw_http;
pub mod redis_cluster;
pub mod redis_proxy;
pub mod redis_server;
pub mod registry;
pub mod script;
pub mod sdk;
pub mod settle;
pub mod stack;
pub mod store_acl;
pub mod store_clock;
pub mod store_decisions;
pub mod test_server;
pub mod wasm_host;
pub mod webdis;
pub mod windows;
