//! One VM: an instance of the module with its own memory, as one Envoy
//! worker thread runs it. Holds what is per worker: its contexts and
//! streams, its tokens, its metric ids, its Redis connections. Every entry
//! into the module goes through `Vm::enter`, which turns a trap into a test
//! failure that carries the trap, the module's stderr and its last logs;
//! or, when the host records traps, into a failed VM, as Envoy keeps it:
//! never entered again, and every new request answered 503.

use std::collections::{BTreeMap, HashMap};

use wasmtime::{Engine, Func, Instance, Memory, Module, Store, TypedFunc, Val};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::WasiCtxBuilder;

use super::clock::Clock;
use super::header_map::HeaderMap;
use super::hostcalls::Hostcalls;
use super::metrics::Kind;
use super::redis_link::{Login, RedisLink};
use super::stream::Stream;
use super::world::{lock, WorldRef};

/// The root context's id in every VM.
pub const ROOT_ID: u32 = 1;

/// What a callback may read while it runs.
#[derive(Clone, Debug)]
pub enum Callback {
    /// An HTTP-call response: headers (map type 6) and body (buffer type 4).
    Http {
        /// The response's headers and body; `None` when the call failed
        /// (Envoy: neither exists during that callback).
        response: Option<(HeaderMap, Vec<u8>)>,
        /// What reading the body answers instead, if it fails.
        body_status: Option<i32>,
    },
    /// A Redis reply: raw RESP bytes (buffer type 9).
    Redis {
        /// The reply.
        bytes: Vec<u8>,
        /// What reading it answers instead, if it fails.
        body_status: Option<i32>,
    },
}

/// What hostcalls need from the instance: its memory and its allocator.
#[derive(Clone)]
pub struct ModuleExports {
    /// The linear memory.
    pub memory: Memory,
    /// `proxy_on_memory_allocate`, if exported.
    pub allocate: Option<TypedFunc<i32, i32>>,
}

/// One `proxy_redis_init` the module made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisInit {
    /// The cluster string as passed.
    pub cluster: String,
    /// ACL user.
    pub username: String,
    /// Password.
    pub password: String,
    /// Operation timeout, ms.
    pub timeout_ms: u32,
    /// The status returned.
    pub status: i32,
}

/// A Redis cluster a VM has initialized.
#[derive(Clone, Debug)]
pub struct RedisClient {
    /// The port it leads to.
    pub port: u16,
    /// Login sent on each new connection.
    pub login: Login,
    /// Per-command timeout, ms.
    pub timeout_ms: u64,
}

/// The per-VM state, inside its wasmtime store.
pub struct VmState {
    /// WASI preview 1 (the module is built for wasm32-wasip1).
    pub wasi: WasiP1Ctx,
    /// Which VM (worker) this is.
    pub index: usize,
    /// What all VMs share.
    pub world: WorldRef,
    /// The injected clock.
    pub clock: Clock,
    /// The plugin configuration (buffer type 7).
    pub plugin_config: Vec<u8>,
    /// Whether `proxy_on_configure` runs (the configuration is readable only then).
    pub configuring: bool,
    /// The context hostcalls act on: the one called, or the one the module
    /// chose with `proxy_set_effective_context`.
    pub active: u32,
    /// Live HTTP streams by context id.
    pub streams: BTreeMap<u32, Stream>,
    /// What the running callback may read.
    pub callback: Option<Callback>,
    /// The request body (buffer type 0), during `proxy_on_request_body`
    /// and `proxy_on_request_trailers`.
    pub request_body: Option<Vec<u8>>,
    /// The response body chunk (buffer type 1), during `proxy_on_response_body`.
    pub response_body: Option<Vec<u8>>,
    /// Next HTTP-call token: 4, 8, 12, ... (≡ 0 mod 4).
    pub next_http_token: u32,
    /// Next Redis-call token: 3, 7, 11, ... (≡ 3 mod 4).
    pub next_redis_token: u32,
    /// Every `proxy_redis_init`, in order.
    pub redis_inits: Vec<RedisInit>,
    /// Initialized Redis clusters by name.
    pub redis_clients: BTreeMap<String, RedisClient>,
    /// Open Redis connections by cluster name.
    pub redis_links: BTreeMap<String, RedisLink>,
    /// Connections opened so far (numbers each one).
    pub redis_connections: u64,
    /// Metric names by id - 1.
    pub metric_ids: Vec<(String, Kind)>,
    /// `proxy_set_tick_period_milliseconds` (0: no timer).
    pub tick_period_ms: u32,
    /// The period was set since the timer was last scheduled: as Envoy
    /// does, the timer then starts again from now.
    pub tick_rearmed: bool,
    /// The module's stderr (a Rust panic message lands here before the trap).
    pub stderr: MemoryOutputPipe,
    /// The instance's memory and allocator, once instantiated.
    pub exports: Option<ModuleExports>,
    /// The real functions behind the wrapped hostcalls, by wrapper index.
    pub real_hostcalls: Vec<Option<Func>>,
}

/// A running VM.
pub struct Vm {
    /// The store (and the state in it).
    pub store: Store<VmState>,
    instance: Instance,
    /// Whether `proxy_on_configure` accepted the configuration.
    pub configured: bool,
    /// The report of the trap that failed this VM, when traps are recorded.
    pub failed: Option<String>,
    /// The exports entered so far, with their number of results.
    entries: HashMap<String, (Func, usize)>,
}

impl Vm {
    /// Instantiates `module` as VM `index` and starts it as Envoy does:
    /// `_initialize`, the root context, `proxy_on_vm_start`, `proxy_on_configure`.
    pub fn start(
        engine: &Engine,
        module: &Module,
        hostcalls: &Hostcalls,
        index: usize,
        world: &WorldRef,
        plugin_config: &[u8],
    ) -> Vm {
        let clock = lock(world).clock.clone();
        let stderr = MemoryOutputPipe::new(1 << 20);
        let wasi =
            WasiCtxBuilder::new().stdout(stderr.clone()).stderr(stderr.clone()).wall_clock(clock.clone()).build_p1();
        let state = VmState {
            wasi,
            index,
            world: world.clone(),
            clock,
            plugin_config: plugin_config.to_vec(),
            configuring: false,
            active: ROOT_ID,
            streams: BTreeMap::new(),
            callback: None,
            request_body: None,
            response_body: None,
            next_http_token: 4,
            next_redis_token: 3,
            redis_inits: Vec::new(),
            redis_clients: BTreeMap::new(),
            redis_links: BTreeMap::new(),
            redis_connections: 0,
            metric_ids: Vec::new(),
            tick_period_ms: 0,
            tick_rearmed: false,
            stderr,
            exports: None,
            real_hostcalls: Vec::new(),
        };
        let mut store = Store::new(engine, state);
        store.set_fuel(u64::MAX).unwrap_or_else(|e| panic!("VM {index}: fuel: {e:?}"));
        store.data_mut().real_hostcalls = hostcalls.real_in(&mut store);
        let instance = hostcalls
            .linker()
            .instantiate(&mut store, module)
            .unwrap_or_else(|e| panic!("VM {index}: the module does not instantiate: {e:?}"));
        assert!(
            instance.get_func(&mut store, "proxy_abi_version_0_2_1").is_some(),
            "the module does not export proxy_abi_version_0_2_1: not a proxy-wasm 0.2.1 module"
        );
        let memory = instance.get_memory(&mut store, "memory");
        // As proxy-wasm-cpp-host: `malloc` when the module has no proxy_on_memory_allocate.
        let allocate = instance
            .get_typed_func::<i32, i32>(&mut store, "proxy_on_memory_allocate")
            .or_else(|_| instance.get_typed_func::<i32, i32>(&mut store, "malloc"))
            .ok();
        store.data_mut().exports = memory.map(|memory| ModuleExports { memory, allocate });
        let mut vm = Vm { store, instance, configured: false, failed: None, entries: HashMap::new() };
        for start in ["_initialize", "_start"] {
            if vm.instance.get_func(&mut vm.store, start).is_some() {
                vm.enter(ROOT_ID, start, &[]);
            }
        }
        vm.enter(ROOT_ID, "proxy_on_context_create", &[Val::I32(ROOT_ID as i32), Val::I32(0)]);
        let started = vm.enter(ROOT_ID, "proxy_on_vm_start", &[Val::I32(ROOT_ID as i32), Val::I32(0)]);
        let size = plugin_config.len() as i32;
        vm.store.data_mut().configuring = true;
        let configured = vm.enter(ROOT_ID, "proxy_on_configure", &[Val::I32(ROOT_ID as i32), Val::I32(size)]);
        vm.store.data_mut().configuring = false;
        vm.configured = started == Some(1) && configured == Some(1);
        vm
    }

    /// Whether the module exports `name`.
    pub fn exports(&mut self, name: &str) -> bool {
        self.instance.get_func(&mut self.store, name).is_some()
    }

    /// Wasm instructions the module ran so far (fuel spent: about one a
    /// wasm instruction), in every callback.
    pub fn instructions(&self) -> u64 {
        u64::MAX - self.store.get_fuel().unwrap_or(u64::MAX)
    }

    /// The size of the module's linear memory, in bytes.
    pub fn memory_bytes(&self) -> u64 {
        let state = self.store.data();
        state.exports.as_ref().map_or(0, |e| e.memory.data_size(&self.store) as u64)
    }

    /// Calls export `name` on behalf of `context` and returns its i32 result,
    /// if it has one. A trap fails the test with everything known about it,
    /// or, when traps are recorded, fails the VM. A failed VM is not entered.
    /// An export the module leaves out gets proxy-wasm-cpp-host's default
    /// (callbacks returning an action: Continue; `proxy_on_done`: done).
    pub fn enter(&mut self, context: u32, name: &str, args: &[Val]) -> Option<i32> {
        if self.failed.is_some() {
            return None;
        }
        let (func, returns) = match self.entries.get(name) {
            Some(entry) => *entry,
            None => {
                // An export the module leaves out gets cpp-host's default.
                let Some(func) = self.instance.get_func(&mut self.store, name) else {
                    return match name {
                        "proxy_on_done" => Some(1),
                        n if n.ends_with("_headers") || n.ends_with("_body") || n.ends_with("_trailers") => Some(0),
                        _ => None,
                    };
                };
                let returns = func.ty(&self.store).results().len();
                self.entries.insert(name.to_string(), (func, returns));
                (func, returns)
            }
        };
        let mut result = [Val::I32(0)];
        let results = &mut result[..returns.min(1)];
        self.store.data_mut().active = context;
        let outcome = func.call(&mut self.store, args, results);
        self.store.data_mut().active = ROOT_ID;
        self.store.data_mut().callback = None;
        if let Err(e) = outcome {
            let report = self.trap_report(name, context, &e);
            let mut world = lock(&self.store.data().world);
            if !world.record_traps {
                drop(world);
                panic!("{report}");
            }
            world.traps.push(report.clone());
            drop(world);
            self.failed = Some(report);
            return None;
        }
        results.first().and_then(Val::i32)
    }

    fn trap_report(&self, name: &str, context: u32, e: &wasmtime::Error) -> String {
        let state = self.store.data();
        let stderr = String::from_utf8_lossy(&state.stderr.contents()).into_owned();
        let world = lock(&state.world);
        let mine: Vec<String> = world
            .logs
            .iter()
            .filter(|l| l.vm == state.index)
            .map(|l| format!("  [{}] {}", l.level, l.message))
            .collect();
        let logs = &mine[mine.len().saturating_sub(10)..];
        format!(
            "the module trapped in VM {} during {name} (context {context}): {e:?}\nmodule stderr:\n{}\nlast log lines:\n{}",
            state.index,
            if stderr.is_empty() { "  (empty)".to_string() } else { stderr },
            logs.join("\n")
        )
    }
}
