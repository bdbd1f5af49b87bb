//! Reading and writing the module's linear memory from a hostcall. Data
//! handed to the module is placed in memory it allocates itself
//! (`proxy_on_memory_allocate`), as proxy-wasm-cpp-host does, so the
//! module can free it. A pointer out of bounds is the module's bug: it
//! becomes a trap with a message saying which hostcall and where.
//!
//! The memory and the allocator are the instance's, found once at start
//! (`VmState::exports`), not through the caller: a hostcall may run on
//! behalf of the status-injecting wrapper, whose caller is the host.

use wasmtime::{format_err, Caller, Memory, Result};

use super::vm::VmState;

fn memory(caller: &mut Caller<'_, VmState>) -> Result<Memory> {
    caller.data().exports.as_ref().map(|e| e.memory).ok_or_else(|| format_err!("the module exports no memory"))
}

fn range(ptr: i32, len: usize) -> (usize, usize) {
    let start = ptr as u32 as usize;
    (start, start.saturating_add(len))
}

/// `len` bytes at `ptr`.
pub fn read(caller: &mut Caller<'_, VmState>, ptr: i32, len: i32) -> Result<Vec<u8>> {
    let mem = memory(caller)?;
    let (start, end) = range(ptr, len as u32 as usize);
    mem.data(&caller)
        .get(start..end)
        .map(<[u8]>::to_vec)
        .ok_or_else(|| format_err!("the module passed {len} bytes at {start:#x}, outside its memory"))
}

/// UTF-8 text at `ptr` (lossy: a name is only compared or shown).
pub fn read_str(caller: &mut Caller<'_, VmState>, ptr: i32, len: i32) -> Result<String> {
    Ok(String::from_utf8_lossy(&read(caller, ptr, len)?).into_owned())
}

/// Writes `bytes` at `ptr`.
pub fn write(caller: &mut Caller<'_, VmState>, ptr: i32, bytes: &[u8]) -> Result<()> {
    let mem = memory(caller)?;
    let (start, end) = range(ptr, bytes.len());
    let slot = mem
        .data_mut(&mut *caller)
        .get_mut(start..end)
        .ok_or_else(|| format_err!("the module asked for {} bytes at {start:#x}, outside its memory", bytes.len()))?;
    slot.copy_from_slice(bytes);
    Ok(())
}

/// Writes a little-endian u32 (a wasm32 pointer, size or token).
pub fn write_u32(caller: &mut Caller<'_, VmState>, ptr: i32, value: u32) -> Result<()> {
    write(caller, ptr, &value.to_le_bytes())
}

/// Writes a little-endian u64.
pub fn write_u64(caller: &mut Caller<'_, VmState>, ptr: i32, value: u64) -> Result<()> {
    write(caller, ptr, &value.to_le_bytes())
}

/// Copies `data` into memory the module allocates and writes its address
/// and size at `ptr_ptr` and `size_ptr`; empty data is a null pointer and
/// size 0 (the SDK reads that as "no value").
pub fn copy_out(caller: &mut Caller<'_, VmState>, data: &[u8], ptr_ptr: i32, size_ptr: i32) -> Result<()> {
    let mut at = 0u32;
    if !data.is_empty() {
        let alloc = caller
            .data()
            .exports
            .as_ref()
            .and_then(|e| e.allocate.clone())
            .ok_or_else(|| format_err!("the module exports no proxy_on_memory_allocate"))?;
        let size = i32::try_from(data.len()).map_err(|_| format_err!("{} bytes do not fit wasm32", data.len()))?;
        let ptr = alloc.call(&mut *caller, size)?;
        if ptr == 0 {
            return Err(format_err!("proxy_on_memory_allocate({size}) returned null"));
        }
        write(caller, ptr, data)?;
        at = ptr as u32;
    }
    write_u32(caller, ptr_ptr, at)?;
    write_u32(caller, size_ptr, data.len() as u32)
}
