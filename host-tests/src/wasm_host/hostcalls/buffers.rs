//! `proxy_get_buffer_bytes`: the plugin configuration (7), an HTTP-call
//! response body (4) and a Redis reply (9, Higress), the last two only
//! while their callback runs. Clipping follows proxy-wasm-cpp-host: the
//! range is cut to the buffer, and an empty range writes nothing.

use wasmtime::{Caller, Linker, Result};

use crate::wasm_host::memory::copy_out;
use crate::wasm_host::status::{BAD_ARGUMENT, NOT_FOUND, OK};
use crate::wasm_host::vm::{Callback, VmState};

/// Higress's buffer type for a Redis reply.
pub const REDIS_CALL_RESPONSE: i32 = 9;

fn buffer(state: &VmState, kind: i32) -> Option<Vec<u8>> {
    match (kind, &state.callback) {
        (4, Some(Callback::Http { body, .. })) => Some(body.clone()),
        (REDIS_CALL_RESPONSE, Some(Callback::Redis(bytes))) => Some(bytes.clone()),
        (6, _) => Some(Vec::new()), // no VM configuration
        (7, _) => Some(state.plugin_config.clone()),
        _ => None,
    }
}

/// Defines the hostcalls of this file.
pub fn add(linker: &mut Linker<VmState>) -> Result<()> {
    linker.func_wrap(
        "env",
        "proxy_get_buffer_bytes",
        |mut c: Caller<'_, VmState>, kind: i32, start: i32, max: i32, ptr_ptr: i32, size_ptr: i32| {
            if !(0..=REDIS_CALL_RESPONSE).contains(&kind) {
                return Ok(BAD_ARGUMENT);
            }
            let Some(bytes) = buffer(c.data(), kind) else { return Ok(NOT_FOUND) };
            let (start, max) = (start as u32 as usize, max as u32 as usize);
            if start.checked_add(max).is_none() {
                return Ok(BAD_ARGUMENT);
            }
            let end = start.saturating_add(max).min(bytes.len());
            if end > start {
                copy_out(&mut c, &bytes[start..end], ptr_ptr, size_ptr)?;
            }
            Ok(OK)
        },
    )?;
    Ok(())
}
