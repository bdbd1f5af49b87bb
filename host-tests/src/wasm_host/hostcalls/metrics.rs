//! Stats: ids are per VM, values per name for the whole proxy.

use wasmtime::{Caller, Linker, Result};

use crate::wasm_host::memory::{read_str, write_u32, write_u64};
use crate::wasm_host::metrics::Kind;
use crate::wasm_host::status::{BAD_ARGUMENT, NOT_FOUND, OK};
use crate::wasm_host::vm::VmState;
use crate::wasm_host::world::lock;

fn name_of(state: &VmState, id: i32) -> Option<String> {
    let index = (id as u32 as usize).checked_sub(1)?;
    state.metric_ids.get(index).map(|(n, _)| n.clone())
}

/// Defines the hostcalls of this file.
pub fn add(linker: &mut Linker<VmState>) -> Result<()> {
    linker.func_wrap(
        "env",
        "proxy_define_metric",
        |mut c: Caller<'_, VmState>, kind: i32, name_ptr: i32, name_len: i32, id_ptr: i32| {
            let name = read_str(&mut c, name_ptr, name_len)?;
            let Some(kind) = Kind::from_abi(kind) else { return Ok(BAD_ARGUMENT) };
            if lock(&c.data().world).metrics.define(&name, kind).is_err() {
                return Ok(BAD_ARGUMENT);
            }
            let ids = &mut c.data_mut().metric_ids;
            let id = match ids.iter().position(|(n, _)| *n == name) {
                Some(i) => i + 1,
                None => {
                    ids.push((name, kind));
                    ids.len()
                }
            };
            write_u32(&mut c, id_ptr, id as u32)?;
            Ok(OK)
        },
    )?;
    linker.func_wrap("env", "proxy_increment_metric", |c: Caller<'_, VmState>, id: i32, offset: i64| {
        let Some(name) = name_of(c.data(), id) else { return Ok(NOT_FOUND) };
        Ok(if lock(&c.data().world).metrics.increment(&name, offset) { OK } else { BAD_ARGUMENT })
    })?;
    linker.func_wrap("env", "proxy_record_metric", |c: Caller<'_, VmState>, id: i32, value: i64| {
        let Some(name) = name_of(c.data(), id) else { return Ok(NOT_FOUND) };
        Ok(if lock(&c.data().world).metrics.record(&name, value as u64) { OK } else { BAD_ARGUMENT })
    })?;
    linker.func_wrap("env", "proxy_get_metric", |mut c: Caller<'_, VmState>, id: i32, ptr: i32| {
        let Some(name) = name_of(c.data(), id) else { return Ok(NOT_FOUND) };
        let value = lock(&c.data().world).metrics.get(&name).map(|m| m.value);
        match value {
            Some(v) => {
                write_u64(&mut c, ptr, v as u64)?;
                Ok(OK)
            }
            None => Ok(NOT_FOUND),
        }
    })?;
    Ok(())
}
