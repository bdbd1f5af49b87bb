//! The module's state on one VM: its plugins (root contexts, each with its
//! configuration and worker) and which plugin each stream belongs to.
//!
//! Envoy may call back into the module while a callback runs (a local
//! reply runs the response path at once; an HTTP call can fail before
//! `proxy_http_call` returns). Such a call finds the state borrowed: what
//! can wait (answers, stream ends, ticks) is queued and handled as soon as
//! the outer callback is done; what cannot (a response's headers) passes
//! unchanged.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

use crate::id_map::IdMap;

use super::host::{now, HostCalls, MetricIds, StoreTarget};
use super::pause_guard::PauseGuard;
use crate::config::Config;
use crate::store::transport::Answer;
use crate::worker::Worker;

/// One plugin: a root context with a configuration that loaded.
pub struct Plugin {
    /// Its root context id.
    pub root: u32,
    /// The decisions of its requests.
    pub worker: Worker,
    /// Its metric ids.
    pub metrics: MetricIds,
    /// Where its store is.
    pub target: StoreTarget,
    /// The random state: Retry-After jitter, and concurrency permit ids
    /// (unique across the fleet: seeded from the host's entropy).
    pub rng: Cell<u64>,
    /// The timer period last set.
    pub tick_ms: Cell<u64>,
    /// The host ignores `proxy_set_effective_context` (NGINX): only the
    /// context whose callback runs can be resumed or answered.
    pub pinned: bool,
    /// Its paused requests, when `pinned`: a host that lets one through
    /// before its decision is refused.
    pub guard: PauseGuard,
    /// The Redis transport's connection state.
    #[cfg(feature = "redis")]
    pub redis: super::redis::RedisLink,
}

impl Plugin {
    /// A plugin for root `root` running `config`.
    pub fn new(root: u32, config: Config, pinned: bool) -> Plugin {
        let metrics = MetricIds::define(&config);
        let target = StoreTarget::of(&config);
        let guard = PauseGuard::new(&target.shared_scope);
        #[cfg(feature = "redis")]
        let redis = super::redis::RedisLink::new(&config.store);
        let mut worker = Worker::new(config, now());
        if pinned {
            worker.pin_calls_to_streams();
        }
        Plugin {
            pinned,
            root,
            metrics,
            target,
            rng: Cell::new(super::abi::entropy().unwrap_or(0) ^ now().ms() ^ (u64::from(root) << 32)),
            tick_ms: Cell::new(0),
            guard,
            #[cfg(feature = "redis")]
            redis,
            worker,
        }
    }

    /// Sets the root's timer to what the worker needs now, if that changed
    /// (`current`: the stream whose callback runs, made effective again).
    /// Envoy starts the timer again at every period set, so only the timer
    /// itself (`timer`) or the first setting lengthens the period: other
    /// callbacks can come faster than it fires (a queued decision shortens
    /// it, its call lengthens it), which would keep it from ever firing.
    pub fn sync_tick(&self, current: Option<u32>, timer: bool) {
        let want = self.worker.tick_period_ms();
        let have = self.tick_ms.get();
        if want == have || (want > have && have != 0 && !timer) {
            return;
        }
        // The timer is the root context's.
        if super::abi::set_effective_context(self.root).is_ok()
            && super::abi::set_tick_period(u32::try_from(want).unwrap_or(u32::MAX)).is_ok()
        {
            self.tick_ms.set(want);
        }
        if let Some(stream) = current {
            let _ = super::abi::set_effective_context(stream);
        }
    }

    /// The worker and the host it calls through, for a callback of `current`.
    pub fn split(&mut self, current: Option<u32>) -> (&mut Worker, HostCalls<'_>) {
        let host = HostCalls {
            root: self.root,
            current,
            pinned: self.pinned,
            metrics: &self.metrics,
            target: &self.target,
            rng: &self.rng,
            guard: &self.guard,
            #[cfg(feature = "redis")]
            redis: &self.redis,
        };
        (&mut self.worker, host)
    }
}

/// What waits for the state to be free.
pub enum Deferred {
    /// A store answer for plugin `root`.
    Answer {
        /// The plugin.
        root: u32,
        /// The call.
        token: u32,
        /// What came back.
        answer: Answer,
    },
    /// A context ended.
    Delete(u32),
    /// A plugin's timer fired.
    Tick(u32),
}

/// Everything on this VM.
#[derive(Default)]
pub struct Vm {
    /// Plugins by root context id.
    pub plugins: IdMap<u32, Plugin>,
    /// Live streams of our plugins: stream context id -> root context id.
    pub streams: IdMap<u32, u32>,
}

thread_local! {
    static VM: RefCell<Vm> = RefCell::new(Vm::default());
    static DEFERRED: RefCell<VecDeque<Deferred>> = const { RefCell::new(VecDeque::new()) };
}

/// Runs `f` on the state if no callback holds it; `None` if one does.
pub fn with_vm<T>(f: impl FnOnce(&mut Vm) -> T) -> Option<T> {
    let out = VM.with(|vm| vm.try_borrow_mut().ok().map(|mut vm| f(&mut vm)));
    if out.is_some() {
        drain();
    }
    out
}

/// Queues `event` for when the state is free (handled at once if it is).
pub fn defer(event: Deferred) {
    DEFERRED.with(|d| d.borrow_mut().push_back(event));
    drain();
}

/// Whether a callback holds the state now.
pub fn busy() -> bool {
    VM.with(|vm| vm.try_borrow_mut().is_err())
}

/// Handles what was deferred, once the state is free.
fn drain() {
    loop {
        let Some(event) = DEFERRED.with(|d| d.try_borrow_mut().ok().and_then(|mut d| d.pop_front())) else {
            return;
        };
        let handled = VM.with(|vm| {
            let Ok(mut vm) = vm.try_borrow_mut() else { return Err(event) };
            handle(&mut vm, event);
            Ok(())
        });
        if let Err(event) = handled {
            // Still busy: put it back for the outer callback to drain.
            DEFERRED.with(|d| d.borrow_mut().push_front(event));
            return;
        }
    }
}

fn handle(vm: &mut Vm, event: Deferred) {
    match event {
        Deferred::Answer { root, token, answer } => {
            if let Some(p) = vm.plugins.get_mut(&root) {
                let (worker, host) = p.split(None);
                worker.on_answer(&host, token, answer);
                if host.pinned {
                    host.guard.settle();
                }
                p.sync_tick(None, false);
            }
        }
        Deferred::Delete(context) => end_context(vm, context),
        Deferred::Tick(root) => {
            if let Some(p) = vm.plugins.get_mut(&root) {
                let (worker, host) = p.split(None);
                worker.on_tick(&host);
                if host.pinned {
                    // Another worker process may have found a request let through.
                    host.guard.settle();
                }
                p.sync_tick(None, true);
            }
        }
    }
}

/// A context ended: a stream's state goes; a root's plugin goes.
pub fn end_context(vm: &mut Vm, context: u32) {
    if let Some(root) = vm.streams.remove(&context) {
        if let Some(p) = vm.plugins.get_mut(&root) {
            p.guard.ended(context);
            let (worker, host) = p.split(None);
            worker.on_stream_end(&host, context);
            p.sync_tick(None, false);
        }
    } else {
        vm.plugins.remove(&context);
    }
}
