//! Reading a store call's answer from the host: only as many bytes as a
//! reply to that call can have, and only what the host says it holds.

use super::abi;
use super::vm::{busy, with_vm};
use crate::store::StoreError;

/// The most bytes of an answer read while its size bound is unknown
/// (the state was busy when it arrived).
const DEFERRED_ANSWER_BYTES: usize = 256 * 1024;

/// The bytes of an answer of `size` bytes, read only when it is within `max`.
pub fn read_answer(kind: u32, size: usize, max: usize) -> Result<Vec<u8>, StoreError> {
    if size > max {
        return Err(StoreError::Malformed("answer larger than any reply to the call"));
    }
    match abi::buffer(kind, 0, size) {
        Ok(Some(bytes)) if bytes.len() == size => Ok(bytes),
        Ok(None) if size == 0 => Ok(Vec::new()),
        Ok(_) => Err(StoreError::Malformed("answer shorter than announced")),
        Err(_) => Err(StoreError::Malformed("answer body could not be read")),
    }
}

/// The size bound of the answer to `token` of plugin `root`.
pub fn answer_bound(root: u32, token: u32) -> usize {
    if busy() {
        return DEFERRED_ANSWER_BYTES;
    }
    with_vm(|vm| vm.plugins.get(&root).map(|p| p.worker.max_answer_bytes(token))).flatten().unwrap_or(0)
}
