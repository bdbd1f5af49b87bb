//! The hostcalls: proxy-wasm ABI 0.2.1 as Envoy (proxy-wasm-cpp-host)
//! implements it, plus Higress's Redis calls, plus WASI preview 1. Anything
//! else the module imports becomes a trap that names it, so a module that
//! starts using a hostcall this host does not play fails loudly.
//!
//! Every `env.proxy_*` import goes through one generic wrapper: it counts
//! the call and, when the test injected a status for it (`statuses`),
//! returns that status without doing the work; otherwise it calls the real
//! hostcall, defined on a second linker and instantiated once per VM.

mod buffers;
mod calls_http;
mod calls_redis;
mod env;
mod headers;
mod metrics;
mod shared;
mod stream;

use wasmtime::{format_err, Caller, Engine, ExternType, Func, Linker, Module, Store, Val, ValType};

use super::vm::VmState;
use super::world::lock;

/// The linkers of one module.
pub struct Hostcalls {
    /// The real proxy-wasm hostcalls.
    real: Linker<VmState>,
    /// What the module is instantiated with: WASI, the wrappers, and traps
    /// for what this host does not play.
    linker: Linker<VmState>,
    /// The wrapped hostcalls (`proxy_*` imports returning one i32), by index.
    wrapped: Vec<String>,
}

impl Hostcalls {
    /// The hostcalls for `module`'s imports.
    pub fn new(engine: &Engine, module: &Module) -> Hostcalls {
        let mut real = Linker::new(engine);
        env::add(&mut real).unwrap();
        headers::add(&mut real).unwrap();
        buffers::add(&mut real).unwrap();
        shared::add(&mut real).unwrap();
        metrics::add(&mut real).unwrap();
        stream::add(&mut real).unwrap();
        calls_http::add(&mut real).unwrap();
        calls_redis::add(&mut real).unwrap();
        let mut linker = Linker::new(engine);
        wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |s: &mut VmState| &mut s.wasi).unwrap();
        let mut wrapped = Vec::new();
        for import in module.imports() {
            let ExternType::Func(ty) = import.ty() else { continue };
            let (module_name, name) = (import.module().to_string(), import.name().to_string());
            let returns_status = ty.results().len() == 1 && ty.results().all(|r| matches!(r, ValType::I32));
            if module_name == "env" && name.starts_with("proxy_") && returns_status {
                let index = wrapped.len();
                wrapped.push(name.clone());
                linker
                    .func_new("env", &name.clone(), ty, move |c, params, results| {
                        call(c, index, &name, params, results)
                    })
                    .unwrap();
                continue;
            }
            // WASI is defined above already: shadowing is off, so this is refused.
            let _ = linker.func_new(import.module(), import.name(), ty, move |_, _, _| {
                Err(format_err!("the module called {module_name}.{name}, which this test host does not implement"))
            });
        }
        Hostcalls { real, linker, wrapped }
    }

    /// The hostcalls statuses can be injected into, by wrapper index.
    pub fn wrapped(&self) -> &[String] {
        &self.wrapped
    }

    /// The linker to instantiate the module with.
    pub fn linker(&self) -> &Linker<VmState> {
        &self.linker
    }

    /// The real hostcalls in `store`, by wrapper index (`None`: not played).
    pub fn real_in(&self, store: &mut Store<VmState>) -> Vec<Option<Func>> {
        let mut real = |name: &str| self.real.get(&mut *store, "env", name).ok().and_then(wasmtime::Extern::into_func);
        self.wrapped.iter().map(|name| real(name)).collect()
    }
}

/// The wrapper of hostcall `index`: an injected status, or the real call.
fn call(
    mut c: Caller<'_, VmState>,
    index: usize,
    name: &str,
    params: &[Val],
    results: &mut [Val],
) -> wasmtime::Result<()> {
    let injected = lock(&c.data().world).statuses.on_call(index);
    if let Some(status) = injected {
        results[0] = Val::I32(status);
        return Ok(());
    }
    match c.data().real_hostcalls.get(index).copied().flatten() {
        Some(real) => real.call(&mut c, params, results),
        None => Err(format_err!("the module called env.{name}, which this test host does not implement")),
    }
}
