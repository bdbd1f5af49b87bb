//! proxy-wasm status codes (`WasmResult` in proxy-wasm-cpp-host): what a
//! hostcall returns to the module.

/// Success.
pub const OK: i32 = 0;
/// The key, header or buffer does not exist.
pub const NOT_FOUND: i32 = 1;
/// A bad argument: unknown cluster, unknown context, missing header.
pub const BAD_ARGUMENT: i32 = 2;
/// Compare-and-swap lost: another worker wrote the shared-data key first.
pub const CAS_MISMATCH: i32 = 8;
/// The host failed (Higress: no healthy Redis host).
pub const INTERNAL_FAILURE: i32 = 10;
