//! proxy-wasm glue: the only code that talks to the host. It reads the
//! request, runs the pipeline, makes the store calls and applies the
//! outcome; every decision is made in the pure modules.
//!
//! Hostcalls go through `proxy_wasm::hostcalls` functions that return a
//! `Result`, not the SDK's trait helpers that unwrap: an unexpected status
//! from the host must not abort the VM.

mod host;
mod http;
#[cfg(feature = "redis")]
mod redis;
mod root;
mod stream;
mod webdis;

use proxy_wasm::traits::RootContext;
use proxy_wasm::types::LogLevel;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(root::Root::default()) });
}}
