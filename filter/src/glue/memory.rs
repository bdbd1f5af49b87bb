//! Memory the host asks for to hand buffers back, and the module's
//! initialization.

use std::mem::MaybeUninit;

/// The host allocates the buffers it returns (header maps, bodies, shared
/// data) through this: a boxed slice of exactly `size` bytes, which
/// `abi::take` turns back into a `Vec` of that capacity.
#[no_mangle]
pub extern "C" fn proxy_on_memory_allocate(size: usize) -> *mut u8 {
    let mut v: Vec<MaybeUninit<u8>> = Vec::with_capacity(size);
    // SAFETY: the host writes every byte before the module reads them, and
    // u8 has no invalid bit patterns.
    unsafe { v.set_len(size) };
    Box::into_raw(v.into_boxed_slice()) as *mut u8
}

/// The ABI version this module speaks.
#[no_mangle]
pub extern "C" fn proxy_abi_version_0_2_1() {}

#[cfg(target_os = "wasi")]
extern "C" {
    fn __wasm_call_ctors();
}

/// The reactor's entry point: runs static constructors, installs the logger.
#[no_mangle]
pub extern "C" fn _initialize() {
    #[cfg(target_os = "wasi")]
    // SAFETY: called once, by the host, before anything else.
    unsafe {
        __wasm_call_ctors();
    }
    super::log::install();
}
