//! The host: plays Envoy around one or more VMs of the filter. Nothing
//! happens on its own: the test sends requests, runs the host to deliver
//! what is due (`run_until_idle`), and moves the clock (`advance`), which
//! delivers delayed replies and fires timeouts at their exact instants.
//!
//! Besides store faults (`faults`), a test can make any hostcall the module
//! imports return a status instead of working (`inject_status`), call the
//! module back with anything (`call_back`), and read each VM's linear
//! memory size (`memory_bytes`).

use std::sync::{Arc, Mutex};

use wasmtime::Val;

use super::artifact::{engine, module, Artifact};
use super::calls::{Call, Calls, Reply};
use super::clock::Clock;
use super::clusters::{Cluster, Clusters};
use super::delivery::{callback, deliver, Misreport};
use super::faults::{Fault, FaultPlan};
use super::header_map::HeaderMap;
use super::hostcalls::Hostcalls;
use super::metrics::Metrics;
use super::shared_data::SharedData;
use super::statuses::{HostcallCount, StatusPlan, Times};
use super::stream::{LocalReply, Request, Response, State, Stream};
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
    statuses: Vec<(String, i32, Times)>,
    record_traps: bool,
    keep_calls: bool,
    journal: bool,
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
            statuses: Vec::new(),
            record_traps: false,
            keep_calls: true,
            journal: false,
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

    /// From the start (configuration included), `times` calls of `hostcall`
    /// (e.g. `"proxy_define_metric"`) return `status` without doing their
    /// work (see `Host::inject_status`).
    pub fn status(mut self, hostcall: &str, status: i32, times: Times) -> HostBuilder {
        self.statuses.push((hostcall.to_string(), status, times));
        self
    }

    /// A trap fails the VM, as in Envoy, instead of failing the test: it is
    /// recorded (`Host::traps`), the VM is never entered again, and every new
    /// request on it is answered 503 by the host.
    pub fn record_traps(mut self) -> HostBuilder {
        self.record_traps = true;
        self
    }

    /// Keep no history of store calls (`Host::calls` shows those in flight
    /// only): for runs of many requests.
    pub fn forget_calls(mut self) -> HostBuilder {
        self.keep_calls = false;
        self
    }

    /// Keep every store call dispatched until the test takes it
    /// (`Host::take_dispatched`): to follow what reached the store, in order.
    pub fn journal(mut self) -> HostBuilder {
        self.journal = true;
        self
    }

    /// Loads the module and starts every VM (configure included).
    pub fn start(self) -> Host {
        let module = module(self.artifact);
        let clock = Clock::at(self.start_ms);
        let hostcalls = Hostcalls::new(engine(), &module);
        let mut statuses = StatusPlan::new(hostcalls.wrapped().to_vec());
        for (hostcall, status, times) in self.statuses {
            statuses.add(&hostcall, status, times).unwrap_or_else(|e| panic!("{e}"));
        }
        let mut calls = Calls::new(self.keep_calls);
        if self.journal {
            calls.keep_journal();
        }
        let world: WorldRef = Arc::new(Mutex::new(World {
            clock: clock.clone(),
            shared: SharedData::default(),
            metrics: Metrics::default(),
            clusters: self.clusters,
            faults: FaultPlan::default(),
            calls,
            statuses,
            logs: Vec::new(),
            record_traps: self.record_traps,
            traps: Vec::new(),
        }));
        let vms = (0..self.vms)
            .map(|i| Vm::start(engine(), &module, &hostcalls, i, &world, self.config.as_bytes()))
            .collect::<Vec<_>>();
        let n = vms.len();
        let mut host = Host {
            vms,
            world,
            clock,
            next_context: vec![ROOT_ID + 1; n],
            next_tick: vec![None; n],
            module,
            hostcalls,
            config: self.config,
        };
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
    module: wasmtime::Module,
    hostcalls: Hostcalls,
    config: String,
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
    /// `proxy_on_request_headers`. On a failed VM the host answers 503
    /// (Envoy's `wasm_fail_stream`) and the module is not entered.
    pub fn begin(&mut self, vm: usize, request: Request) -> StreamId {
        let context = self.next_context[vm];
        self.next_context[vm] += 1;
        let v = &mut self.vms[vm];
        let mut stream = Stream::new(&request);
        if v.failed.is_some() {
            let details = "wasm_fail_stream".to_string();
            stream.state =
                State::Replied(LocalReply { status: 503, details, headers: HeaderMap::new(), body: Vec::new() });
        }
        let n = stream.request_headers.len() as i32;
        v.store.data_mut().streams.insert(context, stream);
        v.enter(context, "proxy_on_context_create", &[Val::I32(context as i32), Val::I32(ROOT_ID as i32)]);
        let headers_end = i32::from(request.body.is_none());
        let mut action = v.enter(
            context,
            "proxy_on_request_headers",
            &[Val::I32(context as i32), Val::I32(n), Val::I32(headers_end)],
        );
        // The body whole, at once, as Envoy with allow_on_headers_stop_iteration
        // hands it to a filter whose headers wait (or that let them go);
        // then the trailers, if any, with the body still readable (as
        // Envoy's buffered body is). A Continue resumes a paused stream.
        if let Some(body) = &request.body {
            let live =
                |v: &Vm| v.store.data().streams.get(&context).is_some_and(|s| !matches!(s.state, State::Replied(_)));
            if live(v) {
                v.store.data_mut().request_body = Some(body.clone());
                let size = Val::I32(body.len() as i32);
                let end = Val::I32(i32::from(request.trailers.is_none()));
                let body_action = v.enter(context, "proxy_on_request_body", &[Val::I32(context as i32), size, end]);
                if action != Some(0) {
                    action = body_action;
                }
                if let Some(trailers) = request.trailers.as_ref().filter(|_| live(v)) {
                    let n = Val::I32(trailers.len() as i32);
                    let trailers_action = v.enter(context, "proxy_on_request_trailers", &[Val::I32(context as i32), n]);
                    if action != Some(0) {
                        action = trailers_action;
                    }
                }
                let sent = v.store.data_mut().request_body.take();
                if let Some(stream) = v.store.data_mut().streams.get_mut(&context) {
                    stream.upstream_body = sent;
                }
            }
        }
        let stream = v.store.data_mut().streams.get_mut(&context).expect("the stream is live");
        if action == Some(0) {
            stream.request_map_open = false;
            if stream.state == State::Waiting {
                stream.state = State::Continued;
            }
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
        self.finish_with(id, &[])
    }

    /// `finish`, the backend's 200 carrying `headers` too.
    pub fn finish_with(&mut self, id: StreamId, headers: &[(&str, &str)]) -> Response {
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
                let mut fields = vec![(":status", "200"), ("content-length", "0")];
                fields.extend_from_slice(headers);
                let headers = HeaderMap::from_text(&fields);
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

    /// The request body of a live stream as it went on (after the
    /// filter's changes); `None` for a request without one.
    pub fn upstream_body(&self, id: StreamId) -> Option<Vec<u8>> {
        let stream = self.vms[id.vm].store.data().streams.get(&id.context);
        stream.unwrap_or_else(|| panic!("stream {id:?} has ended")).upstream_body.clone()
    }

    /// The backend answers a request the filter let through: 200 with
    /// `headers` and a body in `chunks`, each run through
    /// `proxy_on_response_body` (`end_of_stream`: the last chunk ends the
    /// body; else the stream stays open, as one cut short). The response
    /// the client gets: the headers and the bytes the filter let pass.
    pub fn respond(
        &mut self,
        id: StreamId,
        headers: &[(&str, &str)],
        chunks: &[&[u8]],
        end_of_stream: bool,
    ) -> Response {
        assert_eq!(self.state(id), State::Continued, "stream {id:?} was not let through");
        let mut fields = vec![(":status", "200")];
        fields.extend_from_slice(headers);
        let map = HeaderMap::from_text(&fields);
        let c = Val::I32(id.context as i32);
        let v = &mut self.vms[id.vm];
        v.store.data_mut().streams.get_mut(&id.context).expect("live").response_headers = Some(map.clone());
        let headers_end = Val::I32(i32::from(chunks.is_empty() && end_of_stream));
        v.enter(id.context, "proxy_on_response_headers", &[c, Val::I32(map.len() as i32), headers_end]);
        let mut body = Vec::new();
        for (i, chunk) in chunks.iter().enumerate() {
            v.store.data_mut().response_body = Some(chunk.to_vec());
            let end = Val::I32(i32::from(end_of_stream && i + 1 == chunks.len()));
            v.enter(id.context, "proxy_on_response_body", &[c, Val::I32(chunk.len() as i32), end]);
            body.extend(v.store.data_mut().response_body.take().unwrap_or_default());
        }
        let headers = v.store.data().streams[&id.context].response_headers.clone().unwrap_or_default();
        Response { status: 200, headers, body: String::from_utf8_lossy(&body).into_owned(), local: false }
    }

    /// `respond` with the whole body, then the stream closes.
    pub fn finish_body(&mut self, id: StreamId, headers: &[(&str, &str)], chunks: &[&[u8]]) -> Response {
        let response = self.respond(id, headers, chunks, true);
        self.close(id);
        response
    }

    /// Ends a stream now, decided or not (the client went away): the
    /// module's done, log and delete callbacks run. Its store calls go on:
    /// they belong to the root context, which still gets their replies.
    pub fn close(&mut self, id: StreamId) {
        let c = Val::I32(id.context as i32);
        let v = &mut self.vms[id.vm];
        assert!(v.store.data().streams.contains_key(&id.context), "stream {id:?} has ended already");
        v.enter(id.context, "proxy_on_done", &[c]);
        v.enter(id.context, "proxy_on_log", &[c]);
        v.enter(id.context, "proxy_on_delete", &[c]);
        v.store.data_mut().streams.remove(&id.context);
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
            let Some(id) = next else { break };
            deliver(&mut self.vms, &self.world, id);
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

    /// Steps the wall clock the module reads `ms` back (an NTP
    /// correction): store replies and timers still fall due on the host's
    /// time, which goes on from where it was.
    pub fn step_back(&mut self, ms: u64) {
        self.clock.step_back(ms);
    }

    /// The next instant something falls due (a store reply, a timeout, a
    /// timer), if any: a test driving several hosts on one clock moves them
    /// event by event.
    pub fn next_event_ms(&self) -> Option<u64> {
        let call = lock(&self.world).calls.next_instant();
        let tick = self.next_tick.iter().flatten().min().copied();
        [call, tick].into_iter().flatten().min()
    }

    /// The store calls dispatched since the last time (kept with
    /// `HostBuilder::journal`), in dispatch order.
    pub fn take_dispatched(&mut self) -> Vec<Call> {
        lock(&self.world).calls.take_dispatched()
    }

    /// The store calls answered since the last time (with
    /// `HostBuilder::journal`): each call's id, and whether the module got
    /// the store's own reply (not a timeout, a fault's error, a failed
    /// connection).
    pub fn take_answers(&mut self) -> Vec<(u64, bool)> {
        lock(&self.world).calls.take_answers()
    }

    /// Moves the clock to `ms` since the epoch (see `advance`).
    pub fn advance_to(&mut self, ms: u64) {
        let now = self.clock.now_ms();
        assert!(ms >= now, "the clock cannot go back from {now} to {ms}");
        self.advance(ms - now);
    }

    fn schedule_ticks(&mut self) {
        let now = self.clock.now_ms();
        for (vm, next) in self.vms.iter_mut().zip(self.next_tick.iter_mut()) {
            let period = u64::from(vm.store.data().tick_period_ms);
            // Envoy disables and enables the timer at every period set
            // (`Wasm::setTickPeriod`): it fires a whole period after the
            // last set, however often that comes.
            let rearmed = std::mem::take(&mut vm.store.data_mut().tick_rearmed);
            *next = match (period, *next) {
                (0, _) => None,
                (p, None) => Some(now + p),
                (p, Some(_)) if rearmed => Some(now + p),
                (_, keep) => keep,
            };
        }
    }

    /// The injected time the module reads, ms since the epoch.
    pub fn now_ms(&self) -> u64 {
        self.clock.wall_ms()
    }

    /// Queues faults for the next store calls, in order.
    pub fn faults(&mut self, faults: impl IntoIterator<Item = Fault>) {
        lock(&self.world).faults.push(faults);
    }

    /// Draws the fault of every call, once the queue is empty, from `mix`
    /// of (weight, fault), seeded: the same calls get the same faults on
    /// every run. An empty mix stops it.
    pub fn fault_mix(&mut self, seed: u64, mix: Vec<(u32, Fault)>) {
        lock(&self.world).faults.set_mix(seed, mix);
    }

    /// Applies `fault` to every call once the queue is empty (`None`: no fault).
    pub fn fault_always(&mut self, fault: Option<Fault>) {
        lock(&self.world).faults.set_standing(fault);
    }

    /// Every store call made so far, in order (in flight only, with `forget_calls`).
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.world).calls.all()
    }

    /// How many store calls were made.
    pub fn calls_made(&self) -> u64 {
        lock(&self.world).calls.made()
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

    /// A counter or gauge, summed over VMs; 0 while the module has not
    /// defined it (it defines some on first use).
    pub fn counter_or_zero(&self, name: &str) -> i64 {
        lock(&self.world).metrics.get(name).map_or(0, |m| m.value)
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

    /// The value of shared-data key `key`, if written.
    pub fn shared_value(&self, key: &str) -> Option<Vec<u8>> {
        lock(&self.world).shared.get(key).map(|(value, _)| value)
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

    /// Wasm instructions VM `vm` ran so far (wasmtime's fuel).
    pub fn instructions(&self, vm: usize) -> u64 {
        self.vms[vm].instructions()
    }

    /// The size of VM `vm`'s linear memory, in bytes (it never shrinks).
    pub fn memory_bytes(&self, vm: usize) -> u64 {
        self.vms[vm].memory_bytes()
    }

    /// The hostcalls statuses can be injected into: every `env.proxy_*`
    /// function the module imports, in import order.
    pub fn hostcalls(&self) -> Vec<String> {
        lock(&self.world).statuses.names().to_vec()
    }

    /// Makes `times` calls of `hostcall` (from now on, in every VM) return
    /// `status` WITHOUT doing their work: nothing is read, written or done.
    /// Injections added earlier are asked first. Fails the test if the
    /// module does not import `hostcall`.
    pub fn inject_status(&mut self, hostcall: &str, status: i32, times: Times) {
        lock(&self.world).statuses.add(hostcall, status, times).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Forgets every injected status.
    pub fn clear_statuses(&mut self) {
        lock(&self.world).statuses.clear();
    }

    /// How often the module called `hostcall`, and how often it got an injected status.
    pub fn hostcall_count(&self, hostcall: &str) -> HostcallCount {
        lock(&self.world).statuses.count(hostcall)
    }

    /// Calls VM `vm` back on its root context for `token`, whether or not
    /// the module ever got that token: `proxy_on_http_call_response` for an
    /// HTTP reply or `Reply::HttpReset`, `proxy_on_redis_call_response` for
    /// a Redis reply or `Reply::RedisNetworkError`. `size_extra` bytes are
    /// claimed beyond the reply.
    pub fn call_back(&mut self, vm: usize, token: u32, reply: &Reply, size_extra: u32) {
        callback(&mut self.vms[vm], token, reply, Misreport { size_extra, body_status: None });
        self.schedule_ticks();
    }

    /// The traps recorded (with `record_traps`), each with its report.
    pub fn traps(&self) -> Vec<String> {
        lock(&self.world).traps.clone()
    }

    /// Replaces VM `vm` by a fresh one, as Envoy's `FAIL_RELOAD` does: its
    /// own state (streams, queue, calls) is gone, and the store calls it
    /// still waited for never call back (cancelled with it: their replies
    /// must not reach the new VM under tokens it reuses); shared data and
    /// stats stay with the process (a call the store already ran stays run).
    pub fn reload_vm(&mut self, vm: usize) {
        lock(&self.world).calls.cancel_vm(vm);
        self.vms[vm] = Vm::start(engine(), &self.module, &self.hostcalls, vm, &self.world, self.config.as_bytes());
        self.next_context[vm] = ROOT_ID + 1;
        self.next_tick[vm] = None;
        self.schedule_ticks();
    }

    /// Whether VM `vm` failed (a trap, with `record_traps`).
    pub fn failed(&self, vm: usize) -> bool {
        self.vms[vm].failed.is_some()
    }
}
