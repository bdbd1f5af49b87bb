//! Header maps: the request's and response's of the active stream (map
//! types 0 and 2) and the HTTP-call response's during its callback (6).
//! Names are matched in lower case, as Envoy's header maps do.

use wasmtime::{Caller, Linker, Result};

use crate::wasm_host::header_map::{deserialize, serialize, Headers};
use crate::wasm_host::memory::{copy_out, read, read_str};
use crate::wasm_host::status::{BAD_ARGUMENT, NOT_FOUND, OK};
use crate::wasm_host::vm::{Callback, VmState};

/// A map the module may read, if it exists now.
fn map(state: &VmState, kind: i32) -> Option<Headers> {
    let stream = state.streams.get(&state.active);
    match kind {
        0 => stream.map(|s| s.request_headers.clone()),
        2 => stream.and_then(|s| s.response_headers.clone()),
        6 => match &state.callback {
            Some(Callback::Http { headers, .. }) => Some(headers.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// The map the module may change; request headers only before the
/// request went on, response headers only once they exist.
fn map_mut(state: &mut VmState, kind: i32) -> Option<&mut Headers> {
    let stream = state.streams.get_mut(&state.active)?;
    match kind {
        0 => Some(&mut stream.request_headers),
        2 => stream.response_headers.as_mut(),
        _ => None,
    }
}

/// Defines the hostcalls of this file.
pub fn add(linker: &mut Linker<VmState>) -> Result<()> {
    linker.func_wrap(
        "env",
        "proxy_get_header_map_pairs",
        |mut c: Caller<'_, VmState>, kind: i32, ptr_ptr: i32, size_ptr: i32| {
            let Some(pairs) = map(c.data(), kind) else { return Ok(NOT_FOUND) };
            copy_out(&mut c, &serialize(&pairs), ptr_ptr, size_ptr)?;
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_get_header_map_value",
        |mut c: Caller<'_, VmState>, kind: i32, key_ptr: i32, key_len: i32, ptr_ptr: i32, size_ptr: i32| {
            let key = read_str(&mut c, key_ptr, key_len)?.to_ascii_lowercase();
            let Some(pairs) = map(c.data(), kind) else { return Ok(NOT_FOUND) };
            match pairs.into_iter().find(|(n, _)| n.eq_ignore_ascii_case(&key)) {
                Some((_, v)) => {
                    copy_out(&mut c, v.as_bytes(), ptr_ptr, size_ptr)?;
                    Ok(OK)
                }
                None => Ok(NOT_FOUND),
            }
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_add_header_map_value",
        |mut c: Caller<'_, VmState>, kind: i32, key_ptr: i32, key_len: i32, value_ptr: i32, value_len: i32| {
            let key = read_str(&mut c, key_ptr, key_len)?.to_ascii_lowercase();
            let value = read_str(&mut c, value_ptr, value_len)?;
            let Some(pairs) = map_mut(c.data_mut(), kind) else { return Ok(BAD_ARGUMENT) };
            pairs.push((key, value));
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_replace_header_map_value",
        |mut c: Caller<'_, VmState>, kind: i32, key_ptr: i32, key_len: i32, value_ptr: i32, value_len: i32| {
            let key = read_str(&mut c, key_ptr, key_len)?.to_ascii_lowercase();
            let value = read_str(&mut c, value_ptr, value_len)?;
            let Some(pairs) = map_mut(c.data_mut(), kind) else { return Ok(BAD_ARGUMENT) };
            pairs.retain(|(n, _)| *n != key);
            pairs.push((key, value));
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_remove_header_map_value",
        |mut c: Caller<'_, VmState>, kind: i32, key_ptr: i32, key_len: i32| {
            let key = read_str(&mut c, key_ptr, key_len)?.to_ascii_lowercase();
            let Some(pairs) = map_mut(c.data_mut(), kind) else { return Ok(BAD_ARGUMENT) };
            pairs.retain(|(n, _)| *n != key);
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_set_header_map_pairs",
        |mut c: Caller<'_, VmState>, kind: i32, ptr: i32, len: i32| {
            let bytes = read(&mut c, ptr, len)?;
            let pairs = deserialize(&bytes).map_err(|e| wasmtime::format_err!("proxy_set_header_map_pairs: {e}"))?;
            let Some(map) = map_mut(c.data_mut(), kind) else { return Ok(BAD_ARGUMENT) };
            *map = pairs;
            Ok(OK)
        },
    )?;
    Ok(())
}
