//! One worker (one VM): its requests waiting for the store, the decisions
//! queued for a call, the calls in flight, and the store's INFO. Pure and
//! host-independent: the glue feeds it the host's callbacks and carries
//! out what it asks through `Host`.
//!
//! A decision that arrives when fewer than `max_in_flight` calls are out
//! goes at once; the others queue and leave together in the next call.
//! Every call is sent from the root context, so a stream that goes away
//! takes only its own decisions out of a batch. Every table here is
//! bounded: the streams by `MAX_STREAMS` and their age (past it, those
//! older than the store's timeout allows are forgotten; see `MAX_STREAMS`),
//! the queue by `MAX_QUEUED` (a decision beyond it is refused as
//! overloaded), the charges by `MAX_CHARGES` (merged per client while
//! they wait), the calls by `max_in_flight` and `MAX_FLIGHTS` (and swept
//! when the host never answers).

mod body_wait;
mod calls;
mod charges;
mod host;
mod incidents;
mod leases;
mod response;
mod slots;
mod stats;
mod stream_usage;
mod usage_watch;

#[cfg(test)]
mod tests;

use crate::id_map::IdMap;
use crate::keys::HashSlot;

pub use body_wait::{body_tick_ms, BodyAction};
pub use host::Host;
pub use incidents::{Incident, Incidents};
pub use usage_watch::{ResponseSource, MAX_DECODERS, MAX_USAGE_BODY};

use crate::config::Config;
use crate::outcome::LimitOutcome;
use crate::pipeline::{begin_request, Env, Outcome, Pending, Start};
use crate::request::{Body, Request, RequestSource};
use crate::response::Headers;
use crate::store::batcher::{Batchable, Batcher};
use crate::store::flow::Stage;
use crate::store::script_call::ScriptCall;
use crate::store::transport;
use crate::store::StoreError;
use crate::usage::UsageStripper;
use usage_watch::{Decoders, UsageWatch};

/// Decisions and charges waiting for a call, per worker, at most (one more
/// is refused as overloaded): as many as `MAX_STREAMS`, so a burst of
/// requests of one decision each fits; a request has one decision per key
/// group of the rules it matches, and each waits in this queue.
pub const MAX_QUEUED: usize = MAX_STREAMS;
/// Streams tracked per worker (paused ones, or ones whose response still
/// needs headers) before old ones are forgotten: when a stream is to be
/// tracked and this many are, every stream older than four times the
/// store timeout plus `UNANSWERED_GRACE_MS` is ended as if the host had
/// ended it. Younger ones stay (each is a request the host holds, and
/// leaves when its stream ends), so the table exceeds this only while
/// that many requests are that young.
pub const MAX_STREAMS: usize = 65_536;
/// How long past its timeout a call may stay unanswered before the worker
/// gives up on it (Envoy answers a timed-out call itself; a host that
/// never does must not hold memory or requests).
pub const UNANSWERED_GRACE_MS: u64 = 1_000;

/// What the host does with the request after its headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Let it through now.
    Continue,
    /// Hold it: the worker resumes or answers it later (or has answered it).
    Pause,
}

/// Whose decision a queued or in-flight entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// Decision `decision` of the request of stream `stream`.
    Stream { stream: u32, decision: usize },
    /// A charge after a response (it outlives its stream).
    Charge(u64),
    /// A lease asked with a hot client's decision.
    Lease(u64),
    /// A concurrency slot's release or renewal.
    Slot(u64),
}

/// The shortest timer period the worker asks for.
pub const MIN_TICK_MS: u64 = 5;

/// Charges waiting or in flight per worker at most. Charges of one client
/// merge while they wait, so this bounds clients charging at once.
pub const MAX_CHARGES: usize = 16_384;

/// Store calls in flight per worker at most, counting those sent past
/// `max_in_flight` for decisions that waited too long (unless
/// `max_in_flight` is larger): the store cluster's circuit breakers in
/// Envoy must allow this many requests per worker.
pub const MAX_FLIGHTS: usize = 64;

/// A decision waiting for a call.
#[derive(Debug)]
struct Queued {
    owner: Owner,
    slot: HashSlot,
    size: usize,
    /// When it was queued.
    since_ms: u64,
}

impl Batchable for Queued {
    fn slot(&self) -> HashSlot {
        self.slot
    }
    fn size(&self) -> usize {
        self.size
    }
    fn since_ms(&self) -> u64 {
        self.since_ms
    }
}

/// A store call in flight.
#[derive(Debug)]
struct Flight {
    owners: Vec<Owner>,
    slots: Vec<HashSlot>,
    call: ScriptCall,
    stage: Stage,
    /// When the first message went (the call's latency).
    started_ms: u64,
    /// When the latest message went (its timeout).
    sent_ms: u64,
}

/// A request the worker keeps state for.
#[derive(Debug)]
struct StreamState {
    pending: Option<Pending>,
    headers: Headers,
    /// Charges waiting for the response to report the usage.
    usage: Vec<UsageWatch>,
    /// Concurrency slots held until the stream ends.
    holds: Vec<slots::HeldSlot>,
    /// The filter made the request ask for its usage: the client's stream
    /// is given back without it.
    asked_usage: bool,
    /// Taking the usage back out of the response body, once it began.
    stripper: Option<UsageStripper>,
    /// Request body bytes the filter saw (read whole, or counted as they
    /// passed): what a charge without a usage report estimates the prompt from.
    request_bytes: u64,
    created_ms: u64,
}

impl StreamState {
    fn new(now: u64) -> StreamState {
        StreamState {
            pending: None,
            headers: Vec::new(),
            usage: Vec::new(),
            holds: Vec::new(),
            asked_usage: false,
            stripper: None,
            request_bytes: 0,
            created_ms: now,
        }
    }

    /// Nothing left to do for it before it ends.
    fn done(&self) -> bool {
        self.pending.is_none()
            && self.headers.is_empty()
            && self.usage.is_empty()
            && self.holds.is_empty()
            && self.stripper.is_none()
    }
}

/// The worker.
#[derive(Debug)]
pub struct Worker {
    config: Config,
    streams: IdMap<u32, StreamState>,
    charges: IdMap<u64, charges::PendingCharge>,
    waiting: charges::Waiting,
    next_charge: u64,
    queue: Batcher<Queued>,
    flights: IdMap<u32, Flight>,
    info: Option<(u32, u64)>,
    /// When the store's INFO was last asked for.
    last_info_ms: Option<u64>,
    incidents: Incidents,
    decoders: Decoders,
    leases: leases::Leases,
    slots: slots::Slots,
    /// The timer period renewing slots needs (with concurrency limits).
    slot_tick_ms: Option<u64>,
    stats: stats::StatsWatch,
    /// The stream whose request callback is running: its outcome is
    /// returned, not resumed.
    current: Option<u32>,
    current_outcome: Option<Outcome>,
    /// The host ignores `proxy_set_effective_context` (NGINX): a call is
    /// answered in the context that made it, and only that context can be
    /// resumed or answered. So each stream's decisions go out in their own
    /// call from their own callback, and everything else (charges, slot
    /// releases and renewals, lease asks) from the timer, in the root.
    pinned: bool,
    /// The stream whose callback runs, when `pinned`.
    pinned_to: Option<u32>,
    /// Requests whose decision waits for their body.
    body_waits: IdMap<u32, body_wait::BodyWait>,
    /// The timer period waiting bodies need (with rules reading bodies).
    body_tick_ms: Option<u64>,
    /// When a body that never came was last logged.
    body_timeout_logged_ms: Option<u64>,
}

impl Worker {
    /// A worker for `config`, started at `now_ms` (the first INFO is asked
    /// for one `stats_interval` later).
    pub fn new(config: Config, now_ms: u64) -> Worker {
        let slot_tick_ms = slots::tick_ms(&config);
        let body_tick_ms = body_tick_ms(&config);
        Worker {
            config,
            streams: IdMap::default(),
            charges: IdMap::default(),
            waiting: charges::Waiting::default(),
            next_charge: 0,
            queue: Batcher::new(MAX_QUEUED),
            flights: IdMap::default(),
            info: None,
            last_info_ms: Some(now_ms),
            incidents: Incidents::default(),
            decoders: Decoders::default(),
            leases: leases::Leases::default(),
            slots: slots::Slots::default(),
            slot_tick_ms,
            stats: stats::StatsWatch::default(),
            current: None,
            pinned: false,
            pinned_to: None,
            current_outcome: None,
            body_waits: IdMap::default(),
            body_tick_ms,
            body_timeout_logged_ms: None,
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Calls in flight, decisions queued, streams tracked (for tests).
    pub fn sizes(&self) -> (usize, usize, usize) {
        (self.flights.len(), self.queue.len(), self.streams.len())
    }

    fn env<'a, H: Host>(config: &'a Config, host: &'a H, leases: &'a leases::Leases) -> Env<'a, H, H> {
        Env { config, shared: host, metrics: host, random: host.random(), heat: Some(&leases.heat) }
    }

    /// The host ignores `proxy_set_effective_context`: see `pinned`.
    pub fn pin_calls_to_streams(&mut self) {
        self.pinned = true;
    }

    /// A request's headers arrived on stream `stream`, a body to follow.
    pub fn on_request<H: Host, R: RequestSource + ?Sized>(&mut self, host: &H, stream: u32, request: &R) -> Action {
        self.on_request_headers(host, stream, request, false)
    }

    /// A request's headers arrived on stream `stream` (`end_of_stream`: no
    /// body follows, which a rule reading the body reads as empty). When a
    /// rule that applies reads the body, the decision waits for it
    /// (`on_request_body`).
    pub fn on_request_headers<H: Host, R: RequestSource + ?Sized>(
        &mut self,
        host: &H,
        stream: u32,
        request: &R,
        end_of_stream: bool,
    ) -> Action {
        let now = host.now_ms();
        self.sweep(host, now);
        let empty;
        let req = match self.body_tick_ms.is_some() && end_of_stream {
            true => {
                empty = Body::of(b"");
                Request::with_body(request, &empty)
            }
            false => Request::new(request),
        };
        if self.body_tick_ms.is_some() && self.pinned {
            // NGINX never handed the body over while the headers waited:
            // refused, never decided without it (see `body_unsupported`).
            if let Some(reply) = self.body_unsupported(host, &req) {
                return self.apply_now(host, stream, Outcome::Reply(reply), now);
            }
        }
        if self.body_tick_ms.is_some() && !end_of_stream {
            if let Some(wait) = self.body_wait(&req, now) {
                self.body_waits.insert(stream, wait);
                return Action::Pause;
            }
        }
        self.decide(host, stream, &req, now)
    }

    /// Decides a request whose headers (and body, if a rule reads it) are in.
    fn decide<H: Host, R: RequestSource + ?Sized>(
        &mut self,
        host: &H,
        stream: u32,
        req: &Request<'_, R>,
        now: u64,
    ) -> Action {
        // The instant read above: one clock hostcall a request.
        let start = begin_request(&Self::env(&self.config, host, &self.leases), req, || now);
        self.ask_for_identity_encoding(host, req);
        let pending = match start {
            Start::Done(outcome) => return self.apply_now(host, stream, outcome, now),
            Start::Wait(pending) => pending,
        };
        let waiting: Vec<usize> = (0..pending.decisions.len()).filter(|&i| pending.decisions[i].is_waiting()).collect();
        let hot: Vec<usize> = waiting.iter().copied().filter(|&i| pending.decisions[i].lease.is_some()).collect();
        if self.streams.len() >= MAX_STREAMS {
            self.forget_old_streams(host, now);
        }
        self.streams.insert(stream, StreamState { pending: Some(pending), ..StreamState::new(now) });
        self.current = Some(stream);
        self.pinned_to = Some(stream);
        for decision in waiting {
            let owner = Owner::Stream { stream, decision };
            let Some(item) = self.queued(owner, now) else { continue };
            if let Err(item) = self.queue.push(item) {
                self.refuse_overloaded(host, item.owner, now);
            }
        }
        for decision in hot {
            let Some(pending) = self.streams.get(&stream).and_then(|s| s.pending.as_ref()) else { break };
            let Some(d) = pending.decisions.get(decision) else { continue };
            // Cloned out of the stream's state, which asking borrows mutably.
            let d = d.clone();
            self.ask_lease(host, &d, now);
        }
        self.pump(host);
        self.current = None;
        self.pinned_to = None;
        match self.current_outcome.take() {
            Some(outcome) => self.apply_now(host, stream, outcome, now),
            None => Action::Pause,
        }
    }

    /// A request a rule reading usage from the response body applies to
    /// asks the upstream for an uncompressed answer (`accept-encoding:
    /// identity`), so that no client can make its usage unreadable by
    /// asking for compression. (An upstream that compresses anyway is
    /// decoded; see `usage_watch`.)
    fn ask_for_identity_encoding<H: Host, R: RequestSource + ?Sized>(&self, host: &H, req: &Request<'_, R>) {
        if self.config.rules.iter().any(|r| r.reads_body() && r.matcher.matches_headers(req)) {
            host.set_request_header("accept-encoding", "identity");
        }
    }

    /// Carries out an outcome known inside the request callback.
    fn apply_now<H: Host>(&mut self, host: &H, stream: u32, outcome: Outcome, now: u64) -> Action {
        match outcome {
            Outcome::Continue(headers, charges, holds) => {
                if headers.is_empty() && charges.is_empty() && holds.is_empty() {
                    self.streams.remove(&stream);
                } else {
                    if self.streams.len() >= MAX_STREAMS {
                        self.forget_old_streams(host, now);
                    }
                    let usage = charges.into_iter().map(UsageWatch::new).collect();
                    let holds = holds.into_iter().map(|h| slots::HeldSlot::new(h, now)).collect();
                    self.streams.insert(stream, StreamState { headers, usage, holds, ..StreamState::new(now) });
                }
                Action::Continue
            }
            Outcome::Reply(r) => {
                self.streams.remove(&stream);
                host.reply(stream, &r);
                Action::Pause
            }
        }
    }

    /// Gives one decision its result (`at`: the instant the store decided
    /// it); carries out the request's outcome once all its decisions are in.
    /// A stream's decision was decided on `clock_ms`: kept with it, for
    /// the reservation it may settle.
    fn decided_on(&mut self, owner: Owner, clock_ms: u64) {
        if let Owner::Stream { stream, decision } = owner {
            match self.streams.get_mut(&stream).and_then(|s| s.pending.as_mut()) {
                Some(p) => p.decided_on(decision, clock_ms),
                None => self.orphan_decided_on(stream, decision, clock_ms),
            }
        }
    }

    fn deliver<H: Host>(&mut self, host: &H, owner: Owner, result: Result<Vec<LimitOutcome>, StoreError>, at: u64) {
        let (stream, decision) = match owner {
            Owner::Stream { stream, decision } => (stream, decision),
            Owner::Charge(id) => {
                self.charge_leaves_queue(id);
                if let Some(c) = self.charges.remove(&id) {
                    self.settle_charge(host, c, result, at);
                }
                return;
            }
            Owner::Lease(id) => return self.settle_lease(host, id, result, at),
            Owner::Slot(id) => return self.settle_slot(host, id, result, at),
        };
        let Some(state) = self.streams.get_mut(&stream) else {
            return self.settle_orphan(host, stream, decision, &result);
        };
        let Some(pending) = state.pending.as_mut() else { return };
        if let Ok(outcomes) = &result {
            let waiting = self.leases.waits_for_views();
            if let Some(c) = pending.decisions.get(decision).and_then(|d| d.lease.clone()).filter(|_| waiting) {
                self.keep_view(host, &c, outcomes, at);
            }
        }
        let Some(state) = self.streams.get_mut(&stream) else { return };
        let Some(pending) = state.pending.as_mut() else { return };
        let Some(outcome) = pending.on_reply(&Self::env(&self.config, host, &self.leases), decision, result) else {
            return;
        };
        let stranded = pending.take_stranded();
        let given_back = pending.take_stranded_reservations();
        state.pending = None;
        if !stranded.is_empty() {
            self.release_slots(host, stranded);
        }
        for charge in given_back {
            self.give_back(host, charge);
        }
        // A pinned host can resume or answer a stream only from its own
        // callbacks. Decided elsewhere (a call swept on the timer), the
        // host resumes it once its call ends: its own timeout is the
        // store's, and comes first with an error that decides it there.
        if self.pinned && self.pinned_to != Some(stream) {
            return;
        }
        if self.current == Some(stream) {
            self.current_outcome = Some(outcome);
            return;
        }
        let Some(state) = self.streams.get_mut(&stream) else { return };
        match outcome {
            Outcome::Continue(headers, charges, holds) => {
                if headers.is_empty() && charges.is_empty() && holds.is_empty() {
                    self.streams.remove(&stream);
                } else {
                    state.headers = headers;
                    state.usage = charges.into_iter().map(UsageWatch::new).collect();
                    state.holds = holds.into_iter().map(|h| slots::HeldSlot::new(h, at)).collect();
                }
                host.resume(stream);
            }
            Outcome::Reply(r) => {
                self.streams.remove(&stream);
                host.reply(stream, &r);
            }
        }
    }

    /// Stream `stream` is gone: its state and queued decisions go too
    /// (decisions in a call in flight are dropped when it returns). A
    /// charge whose usage never arrived (the stream was reset, by either
    /// side) is charged what was read or delivered (see `usage_watch`).
    pub fn on_stream_end<H: Host>(&mut self, host: &H, stream: u32) {
        self.body_waits.remove(&stream);
        let Some(state) = self.streams.remove(&stream) else { return };
        let mut given_back = Vec::new();
        if let Some(pending) = &state.pending {
            // Decisions that answered took their slots already; the request
            // was never decided whole, so nothing else will release them.
            given_back = pending.taken_so_far();
            for charge in pending.reserved_so_far(&self.config) {
                self.give_back(host, charge);
            }
            self.queue.remove_where(|q| matches!(q.owner, Owner::Stream { stream: s, .. } if s == stream));
            // A slot a decision in flight takes is released when it comes.
            for (i, d) in pending.decisions.iter().enumerate().filter(|(_, d)| d.is_waiting()) {
                let owner = Owner::Stream { stream, decision: i };
                if let Some(f) = self.flights.values().find(|f| f.owners.contains(&owner)) {
                    let clock_ms = f.call.now_ms;
                    self.orphan(stream, i, d, clock_ms);
                }
            }
        }
        for mut watch in state.usage {
            let reported = watch.on_end();
            self.submit_charge(host, watch.charge, reported, state.request_bytes);
        }
        given_back.extend(state.holds.into_iter().map(|h| h.hold));
        if !given_back.is_empty() {
            self.release_slots(host, given_back);
        }
    }

    /// The timer: gives up on calls the host never answered, sends
    /// decisions that waited too long for a call slot (up to
    /// `MAX_FLIGHTS` calls in flight), logs what was counted but not yet
    /// logged, and asks the store for its INFO every `stats_interval` (one
    /// at a time).
    pub fn on_tick<H: Host>(&mut self, host: &H) {
        let now = host.now_ms();
        self.sweep(host, now);
        self.expire_body_waits(host, now);
        self.renew_slots(host, now);
        let fill = self.fill();
        let most = MAX_FLIGHTS.max(self.config.store.batching.max_in_flight.get() as usize);
        if self.pinned {
            // From the root context: all but streams' own decisions.
            self.send_matching(host, fill, most, |q| !matches!(q.owner, Owner::Stream { .. }));
        }
        while !self.pinned
            && self.flights.len() < most
            && self.queue.oldest_since_ms().is_some_and(|since| now.saturating_sub(since) >= self.max_wait_ms())
        {
            self.send_next(host, fill);
        }
        for line in self.incidents.flush(now) {
            host.warn(&line);
        }
        let due = self.last_info_ms.is_none_or(|t| now.saturating_sub(t) >= self.config.store.stats_interval.ms());
        if self.info.is_none() && due {
            self.last_info_ms = Some(now);
            match host.send(&transport::info(self.config.store.transport), false) {
                Ok(token) => self.info = Some((token, now)),
                Err(e) => self.on_info(host, Err(e)),
            }
        }
    }

    /// A decision or charge refused because `MAX_QUEUED` already wait: its
    /// rule's failure policy (a charge: the fallback), counted and logged
    /// as overloaded, never as a store error.
    fn refuse_overloaded<H: Host>(&mut self, host: &H, owner: Owner, now: u64) {
        if matches!(owner, Owner::Stream { .. }) {
            let reason = format!("{MAX_QUEUED} decisions already wait for the store on this worker");
            if let Some(line) = self.incidents.record(Incident::Overloaded, now, 1, 0, &reason) {
                host.warn(&line);
            }
        }
        self.deliver(host, owner, Err(StoreError::Overloaded), now);
    }

    fn on_info<H: Host>(&mut self, host: &H, info: Result<String, StoreError>) {
        for line in self.stats.take(host, info) {
            host.warn(&line);
        }
    }

    /// Fails the calls past their timeout and grace, and forgets an INFO
    /// call the host never answered.
    fn sweep<H: Host>(&mut self, host: &H, now: u64) {
        let deadline = self.config.store.timeout.ms().saturating_add(UNANSWERED_GRACE_MS);
        if self.info.is_some_and(|(_, started)| now.saturating_sub(started) > deadline) {
            self.info = None;
        }
        let expired: Vec<u32> =
            self.flights.iter().filter(|(_, f)| now.saturating_sub(f.sent_ms) > deadline).map(|(t, _)| *t).collect();
        for token in expired {
            if let Some(flight) = self.flights.remove(&token) {
                self.finish(host, flight, Err(StoreError::Unanswered));
            }
        }
        if !self.queue.is_empty() {
            self.pump(host);
        }
    }

    /// Forgets streams the host never ended (no callback for a long time).
    fn forget_old_streams<H: Host>(&mut self, host: &H, now: u64) {
        let horizon = self.config.store.timeout.ms().saturating_add(UNANSWERED_GRACE_MS).saturating_mul(4);
        // A stream holding a slot may last hours (a long download, an LLM
        // answer): forgetting it would free its slot while it runs.
        let old: Vec<u32> = self
            .streams
            .iter()
            .filter(|(_, s)| now.saturating_sub(s.created_ms) > horizon && s.holds.is_empty())
            .map(|(id, _)| *id)
            .collect();
        for id in old {
            self.on_stream_end(host, id);
        }
    }
}
