//! Logging, time, timers, properties and the effective context.

use wasmtime::{Caller, Linker, Result};

use crate::wasm_host::memory::{copy_out, read, read_str, write_u32, write_u64};
use crate::wasm_host::status::{BAD_ARGUMENT, NOT_FOUND, OK};
use crate::wasm_host::vm::{VmState, ROOT_ID};
use crate::wasm_host::world::{lock, LogLine};

/// Defines the hostcalls of this file.
pub fn add(linker: &mut Linker<VmState>) -> Result<()> {
    linker.func_wrap("env", "proxy_log", |mut c: Caller<'_, VmState>, level: i32, ptr: i32, len: i32| {
        let message = read_str(&mut c, ptr, len)?;
        let vm = c.data().index;
        if std::env::var_os("WASM_HOST_LOG").is_some() {
            eprintln!("[vm {vm}] [{level}] {message}");
        }
        lock(&c.data().world).logs.push(LogLine { vm, level: level as u32, message });
        Ok(OK)
    })?;
    linker.func_wrap("env", "proxy_get_log_level", |mut c: Caller<'_, VmState>, ptr: i32| {
        write_u32(&mut c, ptr, 0)?; // trace: the module decides what to drop
        Ok(OK)
    })?;
    // The injected clock, never the machine's.
    linker.func_wrap("env", "proxy_get_current_time_nanoseconds", |mut c: Caller<'_, VmState>, ptr: i32| {
        let ns = c.data().clock.wall_ms().saturating_mul(1_000_000);
        write_u64(&mut c, ptr, ns)?;
        Ok(OK)
    })?;
    linker.func_wrap("env", "proxy_set_tick_period_milliseconds", |mut c: Caller<'_, VmState>, period: i32| {
        c.data_mut().tick_period_ms = period as u32;
        c.data_mut().tick_rearmed = true;
        Ok(OK)
    })?;
    linker.func_wrap(
        "env",
        "proxy_get_property",
        |mut c: Caller<'_, VmState>, path_ptr: i32, path_len: i32, ptr_ptr: i32, size_ptr: i32| {
            // The path's segments are separated by NUL bytes.
            let path: String =
                read(&mut c, path_ptr, path_len)?.iter().map(|&b| if b == 0 { '.' } else { b as char }).collect();
            let value = property(c.data(), &path);
            match value {
                Some(v) => {
                    copy_out(&mut c, &v, ptr_ptr, size_ptr)?;
                    Ok(OK)
                }
                None => Ok(NOT_FOUND),
            }
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_set_property",
        |mut c: Caller<'_, VmState>, path_ptr: i32, path_len: i32, value_ptr: i32, value_len: i32| {
            let path: String =
                read(&mut c, path_ptr, path_len)?.iter().map(|&b| if b == 0 { '.' } else { b as char }).collect();
            let value = read(&mut c, value_ptr, value_len)?;
            let active = c.data().active;
            match c.data_mut().streams.get_mut(&active) {
                Some(s) => {
                    s.properties.insert(path, value);
                    Ok(OK)
                }
                None => Ok(NOT_FOUND),
            }
        },
    )?;
    // As proxy-wasm-cpp-host: any context of this VM that still exists;
    // a stream that ended is BadArgument (the module must drop its reply).
    linker.func_wrap("env", "proxy_set_effective_context", |mut c: Caller<'_, VmState>, id: i32| {
        let id = id as u32;
        if id == ROOT_ID || c.data().streams.contains_key(&id) {
            c.data_mut().active = id;
            Ok(OK)
        } else {
            Ok(BAD_ARGUMENT)
        }
    })?;
    Ok(())
}

/// A property of the active context: the stream's, then the plugin's.
fn property(state: &VmState, path: &str) -> Option<Vec<u8>> {
    if let Some(v) = state.streams.get(&state.active).and_then(|s| s.properties.get(path)) {
        return Some(v.clone());
    }
    match path {
        "plugin_name" => Some(b"ratelimit".to_vec()),
        "plugin_root_id" => Some(b"ratelimit".to_vec()),
        "plugin_vm_id" => Some(Vec::new()),
        _ => None,
    }
}
