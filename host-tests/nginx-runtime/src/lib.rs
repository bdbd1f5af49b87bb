//! Re-exports the Wasmtime C API so that this crate's static library,
//! `libratelimit_nginx_runtime.a`, carries every `wasm_*` and `wasmtime_*`
//! symbol ngx_wasm_module links against.
pub use wasmtime_c_api::*;
