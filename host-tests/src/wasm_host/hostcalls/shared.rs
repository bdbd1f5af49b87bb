//! Shared data with compare-and-swap, one store for every VM.

use wasmtime::{Caller, Linker, Result};

use crate::wasm_host::memory::{copy_out, read, read_str, write_u32};
use crate::wasm_host::status::{CAS_MISMATCH, NOT_FOUND, OK};
use crate::wasm_host::vm::VmState;
use crate::wasm_host::world::lock;

/// Defines the hostcalls of this file.
pub fn add(linker: &mut Linker<VmState>) -> Result<()> {
    linker.func_wrap(
        "env",
        "proxy_get_shared_data",
        |mut c: Caller<'_, VmState>, key_ptr: i32, key_len: i32, ptr_ptr: i32, size_ptr: i32, cas_ptr: i32| {
            let key = read_str(&mut c, key_ptr, key_len)?;
            // Copy out of the lock: writing calls into the module.
            let entry = lock(&c.data().world).shared.get(&key);
            let Some((value, cas)) = entry else { return Ok(NOT_FOUND) };
            copy_out(&mut c, &value, ptr_ptr, size_ptr)?;
            write_u32(&mut c, cas_ptr, cas)?;
            Ok(OK)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_set_shared_data",
        |mut c: Caller<'_, VmState>, key_ptr: i32, key_len: i32, value_ptr: i32, value_len: i32, cas: i32| {
            let key = read_str(&mut c, key_ptr, key_len)?;
            let value = if value_len == 0 { Vec::new() } else { read(&mut c, value_ptr, value_len)? };
            let written = lock(&c.data().world).shared.set(&key, &value, cas as u32);
            Ok(if written.is_ok() { OK } else { CAS_MISMATCH })
        },
    )?;
    Ok(())
}
