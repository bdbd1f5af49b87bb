//! The host: plays Envoy around one or more VMs of the filter. Nothing
//! happens on its own: the test sends requests, runs the host to deliver
//! what is due (`run_until_idle`), and moves the clock (`advance`), which
//! delivers delayed replies and fires timeouts at their exact instants.

use std::sync::{Arc, Mutex};

use wasmtime::Val;

use super::artifact::{engine, module, Artifact};
use super::calls::{Call, Calls, Outcome, Transport};
use super::clock::Clock;
use super::clusters::{Cluster, Clusters};
use super::delivery::deliver;
use super::faults::{Fault, FaultPlan};
use super::hostcalls::linker;
use super::metrics::Metrics;
use super::shared_data::SharedData;
use super::stream::{Request, Response, State, Stream};
use super::vm::{RedisInit, Vm, ROOT_ID};
use super::world::{lock, LogLine, World, WorldRef};

/// 2023-11-14T22:13:20Z: a round instant, so windows of up to 100 s start on it.
pub const EPOCH_MS: u64 = 1_700_000_000_000;

/// Sets up a host.
pub struct HostBuilder {
    artifact: Artifact,
    config: String,
    vms: usize,
    clusters: Clusters,
    start_ms: u64,
    deliver_after_close: bool,
}

impl HostBuilder {
    /// One VM of `artifact` with `config`, the clock at `EPOCH_MS`.
    pub fn new(artifact: Artifact, config: &str) -> HostBuilder {
        HostBuilder {
            artifact,
            config: config.to_string(),
            vms: 1,
            clusters: Clusters::new(),
            start_ms: EPOCH_MS,
            deliver_after_close: false,
        }
    }

    /// This many VMs (Envoy worker threads) over one shared-data store.
    pub fn vms(mut self, n: usize) -> HostBuilder {
        assert!(n >= 1, "a host runs at least one VM");
        self.vms = n;
        self
    }

    /// Cluster `name` leads to the HTTP server (webdis) on `port`.
    pub fn http_cluster(mut self, name: &str, port: u16) -> HostBuilder {
        self.clusters.insert(name.to_string(), Cluster::Http { port });
        self
    }

    /// Cluster `name` leads to the redis-server on `port`.
    pub fn redis_cluster(mut self, name: &str, port: u16) -> HostBuilder {
        self.clusters.insert(name.to_string(), Cluster::Redis { port });
        self
    }

    /// The clock starts at `ms`.
    pub fn start_ms(mut self, ms: u64) -> HostBuilder {
        self.start_ms = ms;
        self
    }

    /// Deliver HTTP-call replies to streams that already ended (Envoy
    /// cancels them; this checks the module survives a host that does not).
    pub fn deliver_after_close(mut self) -> HostBuilder {
        self.deliver_after_close = true;
        self
    }

    /// Loads the module and starts every VM (configure included).
    pub fn start(self) -> Host {
        let module = module(self.artifact);
        let clock = Clock::at(self.start_ms);
        let world: WorldRef = Arc::new(Mutex::new(World {
            clock: clock.clone(),
            shared: SharedData::default(),
            metrics: Metrics::default(),
            clusters: self.clusters,
            faults: FaultPlan::default(),
            calls: Calls::default(),
            logs: Vec::new(),
            deliver_after_close: self.deliver_after_close,
        }));
        let linker = linker(engine(), &module);
        let vms = (0..self.vms)
            .map(|i| Vm::start(engine(), &module, &linker, i, &world, self.config.as_bytes()))
            .collect::<Vec<_>>();
        let n = vms.len();
        let mut host = Host { vms, world, clock, next_context: vec![ROOT_ID + 1; n], next_tick: vec![None; n] };
        // The timer runs from the moment the module set it, as Envoy's does.
        host.schedule_ticks();
        host
    }
}

/// A stream: which VM, which context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamId {
    /// The VM (worker) it runs on.
    pub vm: usize,
    /// Its context id there.
    pub context: u32,
}

/// The running host.
pub struct Host {
    vms: Vec<Vm>,
    world: WorldRef,
    clock: Clock,
    next_context: Vec<u32>,
    next_tick: Vec<Option<u64>>,
}

impl Host {
    /// Starts building a host.
    pub fn builder(artifact: Artifact, config: &str) -> HostBuilder {
        HostBuilder::new(artifact, config)
    }

    /// Whether VM `vm` accepted the configuration.
    pub fn configured(&self, vm: usize) -> bool {
        self.vms[vm].configured
    }

    /// How many VMs run.
    pub fn vm_count(&self) -> usize {
        self.vms.len()
    }

    /// Starts a stream on VM `vm`: creates its context and runs
    /// `proxy_on_request_headers`.
    pub fn begin(&mut self, vm: usize, request: Request) -> StreamId {
        let context = self.next_context[vm];
        self.next_context[vm] += 1;
        let v = &mut self.vms[vm];
        v.store.data_mut().streams.insert(context, Stream::new(&request));
        v.enter(context, "proxy_on_context_create", &[Val::I32(context as i32), Val::I32(ROOT_ID as i32)]);
        let n = request.headers.len() as i32;
        let action =
            v.enter(context, "proxy_on_request_headers", &[Val::I32(context as i32), Val::I32(n), Val::I32(1)]);
        let stream = v.store.data_mut().streams.get_mut(&context).expect("the stream is live");
        if action == Some(0) && stream.state == State::Waiting {
            stream.state = State::Continued;
        }
        self.schedule_ticks();
        StreamId { vm, context }
    }

    /// Where the filter has left a live stream.
    pub fn state(&self, id: StreamId) -> State {
        let stream = self.vms[id.vm].store.data().streams.get(&id.context);
        stream.unwrap_or_else(|| panic!("stream {id:?} has ended")).state.clone()
    }

    /// Ends a stream the filter has decided: the backend answers 200 to a
    /// request let through (running `proxy_on_response_headers`), a local
    /// reply is what it is; then the stream closes.
    pub fn finish(&mut self, id: StreamId) -> Response {
        let response = match self.state(id) {
            State::Waiting => panic!(
                "stream {id:?} is still paused with {} store calls in flight: run the host or advance the clock first",
                lock(&self.world).calls.pending()
            ),
            State::Replied(r) => Response {
                status: r.status,
                headers: r.headers,
                body: String::from_utf8_lossy(&r.body).into_owned(),
                local: true,
            },
            State::Continued => {
                let headers = vec![(":status".to_string(), "200".to_string()), ("content-length".into(), "0".into())];
                let v = &mut self.vms[id.vm];
                v.store.data_mut().streams.get_mut(&id.context).expect("live").response_headers = Some(headers.clone());
                let args = [Val::I32(id.context as i32), Val::I32(headers.len() as i32), Val::I32(1)];
                v.enter(id.context, "proxy_on_response_headers", &args);
                let stream = &v.store.data().streams[&id.context];
                let headers = stream.response_headers.clone().unwrap_or_default();
                Response { status: 200, headers, body: String::new(), local: false }
            }
        };
        self.close(id);
        response
    }

    /// Ends a stream now, decided or not (the client went away): the
    /// module's done, log and delete callbacks run; Envoy cancels the
    /// stream's HTTP calls (Redis replies still reach the root context).
    pub fn close(&mut self, id: StreamId) {
        let c = Val::I32(id.context as i32);
        let v = &mut self.vms[id.vm];
        assert!(v.store.data().streams.contains_key(&id.context), "stream {id:?} has ended already");
        v.enter(id.context, "proxy_on_done", &[c]);
        v.enter(id.context, "proxy_on_log", &[c]);
        v.enter(id.context, "proxy_on_delete", &[c]);
        v.store.data_mut().streams.remove(&id.context);
        let mut w = lock(&self.world);
        if !w.deliver_after_close {
            let now = w.clock.now_ms();
            for call in w.calls.all.iter_mut().filter(|c| c.vm == id.vm && c.outcome == Outcome::Pending) {
                if call.transport == (Transport::Http { context: id.context }) {
                    call.outcome = Outcome::Cancelled(now);
                }
            }
        }
    }

    /// One whole request: begin, run the host, finish.
    pub fn send(&mut self, vm: usize, request: Request) -> Response {
        let id = self.begin(vm, request);
        self.run_until_idle();
        self.finish(id)
    }

    /// Delivers everything due now (replies and timeouts), including what
    /// the module dispatches while handling them, until nothing is due.
    pub fn run_until_idle(&mut self) {
        loop {
            let now = self.clock.now_ms();
            let next = lock(&self.world).calls.next_due(now);
            let Some(index) = next else { break };
            deliver(&mut self.vms, &self.world, index);
        }
        self.schedule_ticks();
    }

    /// Moves the clock `ms` forward, delivering what falls due on the way
    /// at its own instant (and firing timers), then everything due at the end.
    pub fn advance(&mut self, ms: u64) {
        let target = self.clock.now_ms() + ms;
        loop {
            self.run_until_idle();
            let call = lock(&self.world).calls.next_instant();
            let tick = self.next_tick.iter().flatten().min().copied();
            let next = [call, tick].into_iter().flatten().min().filter(|t| *t <= target);
            let Some(t) = next else { break };
            self.clock.set_ms(t.max(self.clock.now_ms()));
            for vm in 0..self.vms.len() {
                if self.next_tick[vm] == Some(t) {
                    self.next_tick[vm] = None;
                    self.vms[vm].enter(ROOT_ID, "proxy_on_tick", &[Val::I32(ROOT_ID as i32)]);
                }
            }
        }
        self.clock.set_ms(target);
        self.run_until_idle();
    }

    /// Moves the clock to `ms` since the epoch (see `advance`).
    pub fn advance_to(&mut self, ms: u64) {
        let now = self.clock.now_ms();
        assert!(ms >= now, "the clock cannot go back from {now} to {ms}");
        self.advance(ms - now);
    }

    fn schedule_ticks(&mut self) {
        let now = self.clock.now_ms();
        for (vm, next) in self.vms.iter().zip(self.next_tick.iter_mut()) {
            let period = u64::from(vm.store.data().tick_period_ms);
            *next = match (period, *next) {
                (0, _) => None,
                (p, None) => Some(now + p),
                (_, keep) => keep,
            };
        }
    }

    /// The injected time, ms since the epoch.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Queues faults for the next store calls, in order.
    pub fn faults(&mut self, faults: impl IntoIterator<Item = Fault>) {
        lock(&self.world).faults.push(faults);
    }

    /// Applies `fault` to every call once the queue is empty (`None`: no fault).
    pub fn fault_always(&mut self, fault: Option<Fault>) {
        lock(&self.world).faults.set_standing(fault);
    }

    /// Every store call made so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.world).calls.all.clone()
    }

    /// Store calls in flight.
    pub fn pending_calls(&self) -> usize {
        lock(&self.world).calls.pending()
    }

    /// A counter or gauge, summed over VMs (fails if the module never defined it).
    pub fn counter(&self, name: &str) -> i64 {
        let w = lock(&self.world);
        let m = w.metrics.get(name).unwrap_or_else(|| panic!("no metric {name}; defined: {:?}", w.metrics.names()));
        m.value
    }

    /// A histogram's samples, in the order recorded.
    pub fn histogram(&self, name: &str) -> Vec<u64> {
        let w = lock(&self.world);
        let m = w.metrics.get(name).unwrap_or_else(|| panic!("no metric {name}; defined: {:?}", w.metrics.names()));
        m.samples.clone()
    }

    /// Everything the module logged, in order.
    pub fn logs(&self) -> Vec<LogLine> {
        lock(&self.world).logs.clone()
    }

    /// The log messages containing `text`.
    pub fn logs_containing(&self, text: &str) -> Vec<String> {
        self.logs().into_iter().filter(|l| l.message.contains(text)).map(|l| l.message).collect()
    }

    /// The shared-data keys written so far.
    pub fn shared_keys(&self) -> Vec<String> {
        lock(&self.world).shared.keys()
    }

    /// The `proxy_redis_init` calls VM `vm` made.
    pub fn redis_inits(&self, vm: usize) -> Vec<RedisInit> {
        self.vms[vm].store.data().redis_inits.clone()
    }

    /// Redis connections VM `vm` has opened.
    pub fn redis_connections(&self, vm: usize) -> u64 {
        self.vms[vm].store.data().redis_connections
    }

    /// Live streams on VM `vm`.
    pub fn live_streams(&self, vm: usize) -> usize {
        self.vms[vm].store.data().streams.len()
    }

    /// Whether the module exports `name`.
    pub fn exports(&mut self, name: &str) -> bool {
        self.vms[0].exports(name)
    }
}
