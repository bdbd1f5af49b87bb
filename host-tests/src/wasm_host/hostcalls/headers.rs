//! Header maps, as Envoy's `Context` serves them: the active stream's
//! request (map type 0) and response (2) headers, and the HTTP-call
//! response's (6) during its callback. Keys are lower-cased; a value is the
//! FIRST line of its name, byte for byte; pairs are every line in order.
//!
//! A map that does not exist now (no stream, the request went on, a failed
//! HTTP call) answers BadArgument to a lookup and an empty list of pairs,
//! as `getHeaderMapValue` and `getHeaderMapPairs` do.

use wasmtime::{Caller, Linker, Result};

use crate::wasm_host::header_map::HeaderMap;
use crate::wasm_host::memory::{copy_out, read};
use crate::wasm_host::status::{BAD_ARGUMENT, NOT_FOUND, OK};
use crate::wasm_host::vm::{Callback, VmState};

/// `WasmHeaderMapType::MAX`: HttpCallResponseTrailers.
const MAX_MAP_TYPE: i32 = 7;

/// A map the module may read, if it exists now.
fn map(state: &VmState, kind: i32) -> Option<&HeaderMap> {
    let stream = state.streams.get(&state.active);
    match kind {
        // Envoy drops its pointer to the request headers once the filter
        // returned Continue from them.
        0 => stream.filter(|s| s.request_map_open).map(|s| &s.request_headers),
        2 => stream.and_then(|s| s.response_headers.as_ref()),
        6 => match &state.callback {
            Some(Callback::Http { response: Some((headers, _)), .. }) => Some(headers),
            _ => None,
        },
        _ => None,
    }
}

/// The map the module may change.
fn map_mut(state: &mut VmState, kind: i32) -> Option<&mut HeaderMap> {
    let stream = state.streams.get_mut(&state.active)?;
    match kind {
        0 if stream.request_map_open => Some(&mut stream.request_headers),
        2 => stream.response_headers.as_mut(),
        _ => None,
    }
}

fn key(c: &mut Caller<'_, VmState>, ptr: i32, len: i32) -> Result<Vec<u8>> {
    Ok(read(c, ptr, len)?.to_ascii_lowercase())
}

/// Defines the hostcalls of this file.
pub fn add(linker: &mut Linker<VmState>) -> Result<()> {
    linker.func_wrap(
        "env",
        "proxy_get_header_map_pairs",
        |mut c: Caller<'_, VmState>, kind: i32, ptr_ptr: i32, size_ptr: i32| {
            if !(0..=MAX_MAP_TYPE).contains(&kind) {
                return Ok(BAD_ARGUMENT);
            }
            let bytes = match map(c.data(), kind) {
                Some(m) if !m.is_empty() => m.serialize(),
                _ => Vec::new(),
            };
            copy_out(&mut c, &bytes, ptr_ptr, size_ptr)?;
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_get_header_map_value",
        |mut c: Caller<'_, VmState>, kind: i32, key_ptr: i32, key_len: i32, ptr_ptr: i32, size_ptr: i32| {
            if !(0..=MAX_MAP_TYPE).contains(&kind) {
                return Ok(BAD_ARGUMENT);
            }
            let key = key(&mut c, key_ptr, key_len)?;
            let Some(map) = map(c.data(), kind) else { return Ok(BAD_ARGUMENT) };
            let Some(value) = map.first(&key).map(<[u8]>::to_vec) else { return Ok(NOT_FOUND) };
            copy_out(&mut c, &value, ptr_ptr, size_ptr)?;
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_add_header_map_value",
        |mut c: Caller<'_, VmState>, kind: i32, key_ptr: i32, key_len: i32, value_ptr: i32, value_len: i32| {
            let key = key(&mut c, key_ptr, key_len)?;
            let value = read(&mut c, value_ptr, value_len)?;
            let Some(map) = map_mut(c.data_mut(), kind) else { return Ok(BAD_ARGUMENT) };
            map.push(key, value);
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_replace_header_map_value",
        |mut c: Caller<'_, VmState>, kind: i32, key_ptr: i32, key_len: i32, value_ptr: i32, value_len: i32| {
            let key = key(&mut c, key_ptr, key_len)?;
            let value = read(&mut c, value_ptr, value_len)?;
            let Some(map) = map_mut(c.data_mut(), kind) else { return Ok(BAD_ARGUMENT) };
            map.replace(&key, &value);
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_remove_header_map_value",
        |mut c: Caller<'_, VmState>, kind: i32, key_ptr: i32, key_len: i32| {
            let key = key(&mut c, key_ptr, key_len)?;
            let Some(map) = map_mut(c.data_mut(), kind) else { return Ok(BAD_ARGUMENT) };
            map.remove(&key);
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_set_header_map_pairs",
        |mut c: Caller<'_, VmState>, kind: i32, ptr: i32, len: i32| {
            let bytes = read(&mut c, ptr, len)?;
            let pairs =
                HeaderMap::deserialize(&bytes).map_err(|e| wasmtime::format_err!("proxy_set_header_map_pairs: {e}"))?;
            let Some(map) = map_mut(c.data_mut(), kind) else { return Ok(BAD_ARGUMENT) };
            // Envoy lower-cases every name it adds.
            *map = pairs.lines().iter().map(|(n, v)| (n.to_ascii_lowercase(), v.clone())).collect();
            Ok(OK)
        },
    )?;
    Ok(())
}
