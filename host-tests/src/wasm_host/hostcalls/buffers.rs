//! `proxy_get_buffer_bytes`, as proxy-wasm-cpp-host and Envoy serve it: the
//! plugin configuration (7) during `proxy_on_configure` only, the request
//! body (0) during `proxy_on_request_body` only, the response body's
//! chunk (1) during `proxy_on_response_body` only, an HTTP-call
//! response body (4) and a Redis reply (9, Higress) during their callback
//! only. A buffer that does not exist now is NotFound; the range is cut to
//! the buffer; an empty range writes a null pointer and size 0.

use wasmtime::{Caller, Linker, Result};

use crate::wasm_host::memory::{copy_out, read, write_u32};
use crate::wasm_host::status::{BAD_ARGUMENT, NOT_FOUND, OK};
use crate::wasm_host::vm::{Callback, VmState};

/// Higress's buffer type for a Redis reply (its `WasmBufferType::MAX`).
pub const REDIS_CALL_RESPONSE: i32 = 9;

/// The buffer, or the status reading it answers.
fn buffer(state: &VmState, kind: i32) -> Result<&[u8], i32> {
    match (kind, &state.callback) {
        (4, Some(Callback::Http { body_status: Some(s), .. })) => Err(*s),
        (4, Some(Callback::Http { response: Some((_, body)), .. })) => Ok(body),
        (REDIS_CALL_RESPONSE, Some(Callback::Redis { body_status: Some(s), .. })) => Err(*s),
        (REDIS_CALL_RESPONSE, Some(Callback::Redis { bytes, .. })) => Ok(bytes),
        (7, _) if state.configuring => Ok(&state.plugin_config),
        (0, _) if state.request_body.is_some() => Ok(state.request_body.as_deref().unwrap_or_default()),
        (1, _) if state.response_body.is_some() => Ok(state.response_body.as_deref().unwrap_or_default()),
        // Stream bodies, network data, gRPC, VM configuration, call data:
        // Envoy hands an empty buffer.
        (0..=3 | 5 | 6 | 8, _) => Ok(&[]),
        _ => Err(NOT_FOUND),
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
            let (start, max) = (start as u32, max as u32);
            let bytes = match buffer(c.data(), kind) {
                Ok(bytes) => bytes,
                Err(status) => return Ok(status),
            };
            if start.checked_add(max).is_none() {
                return Ok(BAD_ARGUMENT);
            }
            let (start, max) = (start as usize, max as usize);
            let end = start.saturating_add(max).min(bytes.len());
            if end <= start {
                write_u32(&mut c, ptr_ptr, 0)?;
                write_u32(&mut c, size_ptr, 0)?;
                return Ok(OK);
            }
            let range = bytes[start..end].to_vec();
            copy_out(&mut c, &range, ptr_ptr, size_ptr)?;
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_set_buffer_bytes",
        |mut c: Caller<'_, VmState>, kind: i32, start: i32, length: i32, ptr: i32, size: i32| {
            let data = read(&mut c, ptr, size)?;
            let state = c.data_mut();
            let buffer = match kind {
                0 => state.request_body.as_mut(),
                1 => state.response_body.as_mut(),
                _ => None,
            };
            let Some(buffer) = buffer else { return Ok(NOT_FOUND) };
            let (start, length) = (start as u32 as usize, length as u32 as usize);
            if start == 0 {
                buffer.drain(..length.min(buffer.len()));
                buffer.splice(0..0, data);
            } else if start >= buffer.len() {
                buffer.extend_from_slice(&data);
            } else {
                return Ok(BAD_ARGUMENT);
            }
            Ok(OK)
        },
    )?;
    Ok(())
}
