//! The glue: the only code that talks to the host. It implements the
//! proxy-wasm ABI 0.2.1 itself (`abi` for the hostcalls, `exports` for the
//! callbacks) instead of through the Rust SDK, whose helpers unwrap or
//! panic on statuses and bytes a host can produce. Every decision is made
//! in the pure modules (`worker`, `pipeline`, ...); this only reads the
//! host's inputs and carries out what the worker asks.

mod abi;
mod answers;
mod exports;
mod host;
mod log;
mod memory;
mod pause_guard;
#[cfg(feature = "redis")]
mod redis;
mod vm;
