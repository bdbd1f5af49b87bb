//! The hostcalls: proxy-wasm ABI 0.2.1 as Envoy (proxy-wasm-cpp-host)
//! implements it, plus Higress's Redis calls, plus WASI preview 1. Anything
//! else the module imports becomes a trap that names it, so a module that
//! starts using a hostcall this host does not play fails loudly.

mod buffers;
mod calls_http;
mod calls_redis;
mod env;
mod headers;
mod metrics;
mod shared;
mod stream;

use wasmtime::{format_err, Engine, ExternType, Linker, Module};

use super::vm::VmState;

/// A linker with every import of `module` defined.
pub fn linker(engine: &Engine, module: &Module) -> Linker<VmState> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |s: &mut VmState| &mut s.wasi).unwrap();
    env::add(&mut linker).unwrap();
    headers::add(&mut linker).unwrap();
    buffers::add(&mut linker).unwrap();
    shared::add(&mut linker).unwrap();
    metrics::add(&mut linker).unwrap();
    stream::add(&mut linker).unwrap();
    calls_http::add(&mut linker).unwrap();
    calls_redis::add(&mut linker).unwrap();
    for import in module.imports() {
        let ExternType::Func(ty) = import.ty() else { continue };
        let (module_name, name) = (import.module().to_string(), import.name().to_string());
        // Defined above already: shadowing is off, so this is refused.
        let _ = linker.func_new(import.module(), import.name(), ty, move |_, _, _| {
            Err(format_err!("the module called {module_name}.{name}, which this test host does not implement"))
        });
    }
    linker
}
