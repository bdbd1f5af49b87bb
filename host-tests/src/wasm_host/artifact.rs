//! The two builds of the filter and loading them. Compiling a module takes
//! a moment, so each is compiled once per test process and shared.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use wasmtime::{Engine, ExternType, Module};

use crate::paths::dist;

/// A build of the filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Artifact {
    /// `dist/ratelimit.wasm`: webdis over HTTP calls, for stock Envoy.
    Webdis,
    /// `dist/ratelimit-redis.wasm`: Higress's Redis calls.
    Redis,
    /// Not the filter: a tiny module that traps on request (`x-probe-trap`),
    /// to test the host's own trap reporting (`crate::probe_module`).
    Probe,
}

impl Artifact {
    /// Its file name under `dist/`.
    pub fn file_name(self) -> &'static str {
        match self {
            Artifact::Webdis => "ratelimit.wasm",
            Artifact::Redis => "ratelimit-redis.wasm",
            Artifact::Probe => "probe.wasm",
        }
    }

    /// Its path; fails the test at once, saying how to build it, if missing.
    pub fn path(self) -> PathBuf {
        dist(self.file_name())
    }
}

/// The engine every host of this process uses. It meters fuel (about one
/// unit per wasm instruction run, never exhausted: each VM starts with
/// `u64::MAX`), so that the module's own work per request can be counted
/// exactly where Envoy's time varies from run to run.
pub fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = wasmtime::Config::new();
        config.consume_fuel(true);
        Engine::new(&config).unwrap_or_else(|e| panic!("wasmtime engine: {e:?}"))
    })
}

/// The compiled module of `artifact`.
pub fn module(artifact: Artifact) -> Module {
    static CACHE: OnceLock<Mutex<HashMap<Artifact, Module>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    cache
        .entry(artifact)
        .or_insert_with(|| match artifact {
            Artifact::Probe => Module::new(engine(), crate::probe_module::probe_wasm()).unwrap(),
            _ => {
                let path = artifact.path();
                Module::from_file(engine(), &path)
                    .unwrap_or_else(|e| panic!("{} does not compile: {e:?}", path.display()))
            }
        })
        .clone()
}

/// The functions `artifact` imports, as `module.name`.
pub fn function_imports(artifact: Artifact) -> Vec<String> {
    module(artifact)
        .imports()
        .filter(|i| matches!(i.ty(), ExternType::Func(_)))
        .map(|i| format!("{}.{}", i.module(), i.name()))
        .collect()
}

/// The functions `artifact` exports.
pub fn function_exports(artifact: Artifact) -> Vec<String> {
    module(artifact).exports().filter(|e| matches!(e.ty(), ExternType::Func(_))).map(|e| e.name().to_string()).collect()
}
