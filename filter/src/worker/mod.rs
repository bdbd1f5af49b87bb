//! One worker (one VM): its requests waiting for the store, the decisions
//! queued for a call, the calls in flight, and the store's INFO. Pure and
//! host-independent: the glue feeds it the host's callbacks and carries
//! out what it asks through `Host`.
//!
//! A decision that arrives when fewer than `max_in_flight` calls are out
//! goes at once; the others queue and leave together in the next call.
//! Every call is sent from the root context, so a stream that goes away
//! takes only its own decisions out of a batch. Every table here is
//! bounded: the queue by `MAX_QUEUED`, the calls by `max_in_flight` (and
//! swept when the host never answers), the streams by `MAX_STREAMS`.

mod error_log;
mod host;
mod stats;
mod usage_watch;

#[cfg(test)]
mod tests;

use crate::id_map::IdMap;

pub use error_log::ErrorLog;
pub use host::Host;
pub use usage_watch::{ResponseSource, MAX_USAGE_BODY};

use crate::breaker::{self, Health};
use crate::call::{DecisionCall, LimitCall, Op, ScriptCall};
use crate::config::{Config, Transport};
use crate::decision::Decision;
use crate::deny_cache::{DenyCache, DenyEntry};
use crate::fallback::{self, FallbackLimit};
use crate::fingerprint::entry_fingerprint;
use crate::metrics::Event;
use crate::pipeline::{begin, Charge, Env, Outcome, Pending, Start};
use crate::response::Headers;
use crate::store::batcher::{Batchable, Batcher, Fill};
use crate::store::flow::{self, Message, Stage, Step};
use crate::store::transport::{self, Answer};
use crate::store::webdis::{self, BODY_HEAD, MAX_BODY};
use crate::store::StoreError;
use usage_watch::{amount, Reported, UsageWatch};

/// Decisions waiting for a call, per worker, at most.
pub const MAX_QUEUED: usize = 4096;
/// Streams tracked per worker at most (paused ones, or ones whose response
/// still needs headers).
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
}

/// A charge on its way to the store.
#[derive(Debug)]
struct PendingCharge {
    charge: Charge,
    amount: u64,
}

/// The shortest timer period the worker asks for.
pub const MIN_TICK_MS: u64 = 5;

/// Charges waiting or in flight per worker at most.
pub const MAX_CHARGES: usize = 4096;

/// A decision waiting for a call.
#[derive(Debug)]
struct Queued {
    owner: Owner,
    slot: u16,
    size: usize,
    /// When it was queued.
    since_ms: u64,
}

impl Batchable for Queued {
    fn slot(&self) -> u16 {
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
    slots: Vec<u16>,
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
    created_ms: u64,
}

impl StreamState {
    fn new(now: u64) -> StreamState {
        StreamState { pending: None, headers: Vec::new(), usage: Vec::new(), created_ms: now }
    }
}

/// The worker.
#[derive(Debug)]
pub struct Worker {
    config: Config,
    streams: IdMap<u32, StreamState>,
    charges: IdMap<u64, PendingCharge>,
    next_charge: u64,
    queue: Batcher<Queued>,
    flights: IdMap<u32, Flight>,
    info: Option<(u32, u64)>,
    /// When the store's INFO was last asked for.
    last_info_ms: Option<u64>,
    errors: ErrorLog,
    stats: stats::StatsWatch,
    /// The stream whose request callback is running: its outcome is
    /// returned, not resumed.
    current: Option<u32>,
    current_outcome: Option<Outcome>,
}

impl Worker {
    /// A worker for `config`, started at `now_ms` (the first INFO is asked
    /// for one `stats_interval` later).
    pub fn new(config: Config, now_ms: u64) -> Worker {
        Worker {
            config,
            streams: IdMap::default(),
            charges: IdMap::default(),
            next_charge: 0,
            queue: Batcher::new(MAX_QUEUED),
            flights: IdMap::default(),
            info: None,
            last_info_ms: Some(now_ms),
            errors: ErrorLog::default(),
            stats: stats::StatsWatch::default(),
            current: None,
            current_outcome: None,
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

    fn env<'a, H: Host>(config: &'a Config, host: &'a H) -> Env<'a, H, H> {
        Env { config, shared: host, metrics: host, random: host.random() }
    }

    /// A request's headers arrived on stream `stream`.
    pub fn on_request<H: Host, R: crate::request::RequestSource + ?Sized>(
        &mut self,
        host: &H,
        stream: u32,
        request: &R,
    ) -> Action {
        let now = host.now_ms();
        self.sweep(host, now);
        let start = begin(&Self::env(&self.config, host), request, || host.now_ms());
        let pending = match start {
            Start::Done(outcome) => return self.apply_now(host, stream, outcome, now),
            Start::Wait(pending) => pending,
        };
        let waiting: Vec<usize> = (0..pending.decisions.len()).filter(|&i| pending.decisions[i].is_waiting()).collect();
        if self.streams.len() >= MAX_STREAMS {
            self.forget_old_streams(host, now);
        }
        self.streams.insert(stream, StreamState { pending: Some(pending), ..StreamState::new(now) });
        self.current = Some(stream);
        for decision in waiting {
            let owner = Owner::Stream { stream, decision };
            let Some(item) = self.queued(owner, now) else { continue };
            if let Err(item) = self.queue.push(item) {
                self.deliver(host, item.owner, Err(StoreError::Overloaded), now);
            }
        }
        self.pump(host);
        self.current = None;
        match self.current_outcome.take() {
            Some(outcome) => self.apply_now(host, stream, outcome, now),
            None => Action::Pause,
        }
    }

    /// The limits of `owner`'s decision (rule, limit, op, offset), its
    /// identity and slot; `None` when its stream or charge is gone.
    fn decision_of(&self, owner: Owner) -> Option<(Vec<LimitCall<'_>>, &str, u16)> {
        let call = |rule: usize, limit: usize, op: Op, offset_ms: Option<u64>| {
            let r = self.config.rules.get(rule)?;
            Some(LimitCall { rule: &r.name, spec: r.limits.get(limit)?.spec, op, offset_ms })
        };
        match owner {
            Owner::Stream { stream, decision } => {
                let d = self.streams.get(&stream)?.pending.as_ref()?.decisions.get(decision)?;
                let limits = d.limits.iter().filter_map(|l| call(l.rule, l.limit, l.op, l.offset_ms)).collect();
                Some((limits, &d.identity, d.slot))
            }
            Owner::Charge(id) => {
                let c = self.charges.get(&id)?;
                let limits = c
                    .charge
                    .limits
                    .iter()
                    .filter_map(|&(limit, offset)| call(c.charge.rule, limit, Op::Charge(c.amount), offset))
                    .collect();
                Some((limits, &c.charge.identity, c.charge.slot))
            }
        }
    }

    /// The queue entry for a decision whose owner is alive, queued at `now`.
    fn queued(&self, owner: Owner, now: u64) -> Option<Queued> {
        let (limits, identity, slot) = self.decision_of(owner)?;
        let size = match self.config.store.transport {
            Transport::Webdis => {
                let specs: Vec<(&str, _)> = limits.iter().map(|l| (l.rule, l.spec)).collect();
                webdis::decision_size(&self.config.domain, identity, &specs)
            }
            Transport::Redis => 0,
        };
        Some(Queued { owner, slot, size, since_ms: now })
    }

    /// Carries out an outcome known inside the request callback.
    fn apply_now<H: Host>(&mut self, host: &H, stream: u32, outcome: Outcome, now: u64) -> Action {
        match outcome {
            Outcome::Continue(headers, charges) => {
                if headers.is_empty() && charges.is_empty() {
                    self.streams.remove(&stream);
                } else {
                    if self.streams.len() >= MAX_STREAMS {
                        self.forget_old_streams(host, now);
                    }
                    let usage = charges.into_iter().map(UsageWatch::new).collect();
                    self.streams.insert(stream, StreamState { headers, usage, ..StreamState::new(now) });
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

    /// How one call is filled.
    fn fill(&self) -> Fill {
        Fill {
            max_decisions: self.config.store.batching.max_decisions.get() as usize,
            one_slot: self.config.store.redis_cluster,
            max_bytes: (self.config.store.transport == Transport::Webdis).then_some(MAX_BODY - BODY_HEAD),
        }
    }

    /// Sends calls while fewer than the configured number are in flight
    /// and decisions wait.
    fn pump<H: Host>(&mut self, host: &H) {
        let fill = self.fill();
        while self.flights.len() < self.config.store.batching.max_in_flight.get() as usize && !self.queue.is_empty() {
            self.send_next(host, fill);
        }
    }

    /// Sends the next call from the queue.
    fn send_next<H: Host>(&mut self, host: &H, fill: Fill) {
        let batch: Vec<Queued> = self.queue.take(fill);
        if let Some(flight) = self.flight(&batch, host.now_ms()) {
            self.send(host, flight, Message::Evalsha, false);
        }
    }

    /// How long a decision may wait for a call slot before it goes in a
    /// call of its own anyway: half the store timeout, so that a store that
    /// stalls every call in flight holds a queued decision for at most
    /// about one and a half timeouts, not two.
    fn max_wait_ms(&self) -> u64 {
        (self.config.store.timeout.ms() / 2).max(MIN_TICK_MS)
    }

    /// The timer period the worker needs: short while decisions wait (to
    /// release them after `max_wait_ms`), the INFO interval otherwise.
    pub fn tick_period_ms(&self) -> u64 {
        if self.queue.is_empty() {
            self.config.store.stats_interval.ms()
        } else {
            self.max_wait_ms().min(self.config.store.stats_interval.ms())
        }
    }

    /// The call carrying `batch` at `now` (decisions whose stream or
    /// charge is gone are left out).
    fn flight(&self, batch: &[Queued], now: u64) -> Option<Flight> {
        let mut owners = Vec::with_capacity(batch.len());
        let mut slots: Vec<u16> = Vec::new();
        let mut parts: Vec<(Vec<LimitCall<'_>>, &str)> = Vec::with_capacity(batch.len());
        for q in batch {
            let Some((limits, identity, slot)) = self.decision_of(q.owner) else { continue };
            owners.push(q.owner);
            if !slots.contains(&slot) {
                slots.push(slot);
            }
            parts.push((limits, identity));
        }
        if owners.is_empty() {
            return None;
        }
        let decisions: Vec<DecisionCall<'_>> =
            parts.iter().map(|(limits, identity)| DecisionCall { identity, limits }).collect();
        let call = ScriptCall::new(&self.config.domain, now, &decisions);
        Some(Flight { owners, slots, call, stage: Stage::First, started_ms: now, sent_ms: now })
    }

    /// Sends `message` for `flight`; a call that cannot start fails its
    /// decisions at once.
    fn send<H: Host>(&mut self, host: &H, mut flight: Flight, message: Message, reinit: bool) {
        let wire = transport::encode(self.config.store.transport, message, &flight.call);
        let sent = match wire {
            Some(wire) => host.send(&wire, reinit),
            None => Err(StoreError::Dispatch),
        };
        host.store_call(flight.owners.len());
        match sent {
            Ok(token) => {
                flight.sent_ms = host.now_ms();
                // A token the host reuses while it is in flight: the older call lost its answer.
                if let Some(old) = self.flights.insert(token, flight) {
                    self.finish(host, old, Err(StoreError::Unanswered));
                }
            }
            Err(e) => self.finish(host, flight, Err(e)),
        }
    }

    /// The store's answer to `token` arrived.
    pub fn on_answer<H: Host>(&mut self, host: &H, token: u32, answer: Answer) {
        if self.info.is_some_and(|(t, _)| t == token) {
            self.info = None;
            self.on_info(host, transport::decode_info(answer));
            return;
        }
        // An unknown token (answered already, swept, or never ours) is dropped.
        let Some(mut flight) = self.flights.remove(&token) else { return };
        let expected = flight.call.reply_len();
        let reply = transport::decode(flight.stage, answer, expected);
        match flow::next(self.config.store.transport, flight.stage, reply) {
            Step::Send { stage, message, reinit } => {
                flight.stage = stage;
                self.send(host, flight, message, reinit);
            }
            Step::Done(result) => {
                host.store_latency(host.now_ms().saturating_sub(flight.started_ms));
                self.finish(host, flight, result);
            }
        }
        self.pump(host);
    }

    /// How large an answer to `token` may be (decided before reading it).
    pub fn max_answer_bytes(&self, token: u32) -> usize {
        if self.info.is_some_and(|(t, _)| t == token) {
            return transport::max_info_bytes();
        }
        self.flights.get(&token).map_or(0, |f| transport::max_answer_bytes(f.call.reply_len()))
    }

    /// Hands a finished call's result to each of its decisions; the
    /// breakers count the call once.
    fn finish<H: Host>(&mut self, host: &H, flight: Flight, result: Result<Vec<i64>, StoreError>) {
        let now = host.now_ms();
        let results: Result<Vec<Vec<Decision>>, StoreError> = result.and_then(|ints| flight.call.decode(&ints));
        let health = Health::of(&results);
        let breaker = &self.config.store.breaker;
        match health {
            Health::StoreDown => {
                breaker::record(host, breaker, flight.slots.first().copied().unwrap_or(0), now, health)
            }
            _ => flight.slots.iter().for_each(|&slot| breaker::record(host, breaker, slot, now, health)),
        }
        let at = flight.sent_ms;
        match results {
            Ok(per_decision) => {
                for (owner, decisions) in flight.owners.into_iter().zip(per_decision) {
                    self.deliver(host, owner, Ok(decisions), at);
                }
            }
            Err(e) => {
                if let Some(count) = self.errors.record(now) {
                    host.warn(&format!(
                        "ratelimit: {e} ({count} store errors on this worker since the last such line)"
                    ));
                }
                for owner in flight.owners {
                    self.deliver(host, owner, Err(e.clone()), at);
                }
            }
        }
    }

    /// Gives one decision its result (`at`: the instant the store decided
    /// it); carries out the request's outcome once all its decisions are in.
    fn deliver<H: Host>(&mut self, host: &H, owner: Owner, result: Result<Vec<Decision>, StoreError>, at: u64) {
        let (stream, decision) = match owner {
            Owner::Stream { stream, decision } => (stream, decision),
            Owner::Charge(id) => {
                if let Some(c) = self.charges.remove(&id) {
                    self.settle_charge(host, c, result, at);
                }
                return;
            }
        };
        let Some(state) = self.streams.get_mut(&stream) else { return };
        let Some(pending) = state.pending.as_mut() else { return };
        let Some(outcome) = pending.on_reply(&Self::env(&self.config, host), decision, result) else {
            return;
        };
        state.pending = None;
        if self.current == Some(stream) {
            self.current_outcome = Some(outcome);
            return;
        }
        match outcome {
            Outcome::Continue(headers, charges) => {
                if headers.is_empty() && charges.is_empty() {
                    self.streams.remove(&stream);
                } else {
                    state.headers = headers;
                    state.usage = charges.into_iter().map(UsageWatch::new).collect();
                }
                host.resume(stream);
            }
            Outcome::Reply(r) => {
                self.streams.remove(&stream);
                host.reply(stream, &r);
            }
        }
    }

    /// Queues a charge of `reported` usage (nothing when it comes to 0).
    fn submit_charge<H: Host>(&mut self, host: &H, charge: Charge, reported: Reported) {
        let Some(rule) = self.config.rules.get(charge.rule) else { return };
        let units = amount(&rule.cost, reported);
        host.count(charge.rule, Event::Charged);
        if reported == Reported::Missing {
            host.count(charge.rule, Event::UsageMissing);
        }
        if units == 0 || charge.limits.is_empty() {
            return;
        }
        host.count_by(charge.rule, Event::ChargedUnits, units);
        let id = self.next_charge;
        self.next_charge = self.next_charge.wrapping_add(1);
        let now = host.now_ms();
        let pending = PendingCharge { charge, amount: units };
        if self.charges.len() >= MAX_CHARGES {
            self.settle_charge(host, pending, Err(StoreError::Overloaded), now);
            return;
        }
        self.charges.insert(id, pending);
        let queued = self.queued(Owner::Charge(id), now).map(|q| self.queue.push(q));
        if let Some(Err(q)) = queued {
            self.deliver(host, q.owner, Err(StoreError::Overloaded), now);
        }
        self.pump(host);
    }

    /// A charge's result: a client now out of budget is remembered in the
    /// deny cache until the debt is repaid; a charge the store could not
    /// take spends the proxy's local fallback share (the response is gone:
    /// nothing can be refused, whatever the rule's failure policy).
    fn settle_charge<H: Host>(
        &mut self,
        host: &H,
        c: PendingCharge,
        result: Result<Vec<Decision>, StoreError>,
        at: u64,
    ) {
        let config = &self.config;
        let Some(rule) = config.rules.get(c.charge.rule) else { return };
        match result {
            Ok(decisions) => {
                if !config.deny_cache.enabled {
                    return;
                }
                let cache = DenyCache::new(host, config.deny_cache.slots);
                for (&(limit, _), d) in c.charge.limits.iter().zip(&decisions) {
                    let (Some(l), false, Some(retry)) = (rule.limits.get(limit), d.allowed, d.retry_after_ms) else {
                        continue;
                    };
                    if retry > 0 {
                        let entry = DenyEntry {
                            deny_until_ms: at.saturating_add(retry),
                            reset_at_ms: at.saturating_add(d.reset_ms),
                            remaining: d.remaining,
                        };
                        cache.remember(entry_fingerprint(l.fingerprint, &c.charge.digest), entry);
                    }
                }
            }
            Err(_) => {
                host.count(c.charge.rule, Event::ChargeFailed);
                let limits: Vec<FallbackLimit> = c
                    .charge
                    .limits
                    .iter()
                    .filter_map(|&(limit, _)| rule.limits.get(limit))
                    .map(|l| FallbackLimit {
                        fingerprint: entry_fingerprint(l.fingerprint, &c.charge.digest),
                        share: l.spec.limit / rule.fleet_size.get(),
                        window_ms: l.spec.window_ms,
                        cost: c.amount,
                    })
                    .collect();
                fallback::charge(host, config.deny_cache.slots, &limits, host.now_ms());
            }
        }
    }

    /// The response's headers arrived: the rate-limit headers to add.
    /// Charges whose usage is in a header are made now; those reading the
    /// body wait for it.
    pub fn on_response_headers<H: Host, R: ResponseSource + ?Sized>(
        &mut self,
        host: &H,
        stream: u32,
        response: &R,
        end_of_stream: bool,
    ) -> Headers {
        let Some(state) = self.streams.get_mut(&stream).filter(|s| s.pending.is_none()) else { return Vec::new() };
        let headers = std::mem::take(&mut state.headers);
        let mut due = Vec::new();
        for mut watch in std::mem::take(&mut state.usage) {
            match watch.on_headers(&self.config, response, end_of_stream) {
                Some(reported) => due.push((watch.charge, reported)),
                None => state.usage.push(watch),
            }
        }
        if state.usage.is_empty() {
            self.streams.remove(&stream);
        }
        for (charge, reported) in due {
            self.submit_charge(host, charge, reported);
        }
        headers
    }

    /// Whether stream `stream`'s response body is being read for usage.
    pub fn reads_body(&self, stream: u32) -> bool {
        self.streams.get(&stream).is_some_and(|s| s.usage.iter().any(UsageWatch::reads_body))
    }

    /// A chunk of the response body passed.
    pub fn on_response_body<H: Host>(&mut self, host: &H, stream: u32, chunk: &[u8], end_of_stream: bool) {
        let Some(state) = self.streams.get_mut(&stream) else { return };
        let mut due = Vec::new();
        for mut watch in std::mem::take(&mut state.usage) {
            match watch.on_body(chunk, end_of_stream) {
                Some(reported) => due.push((watch.charge, reported)),
                None => state.usage.push(watch),
            }
        }
        if state.usage.is_empty() && state.pending.is_none() && state.headers.is_empty() {
            self.streams.remove(&stream);
        }
        for (charge, reported) in due {
            self.submit_charge(host, charge, reported);
        }
    }

    /// Stream `stream` is gone: its state and queued decisions go too
    /// (decisions in a call in flight are dropped when it returns). A
    /// charge whose usage never arrived (the stream was reset) is charged
    /// its default.
    pub fn on_stream_end<H: Host>(&mut self, host: &H, stream: u32) {
        let Some(state) = self.streams.remove(&stream) else { return };
        self.queue.remove_where(|q| matches!(q.owner, Owner::Stream { stream: s, .. } if s == stream));
        for watch in state.usage {
            self.submit_charge(host, watch.charge, Reported::Missing);
        }
    }

    /// The timer: gives up on calls the host never answered, sends
    /// decisions that waited too long for a call slot, and asks the store
    /// for its INFO every `stats_interval` (one at a time).
    pub fn on_tick<H: Host>(&mut self, host: &H) {
        let now = host.now_ms();
        self.sweep(host, now);
        let fill = self.fill();
        while self.queue.oldest_since_ms().is_some_and(|since| now.saturating_sub(since) >= self.max_wait_ms()) {
            self.send_next(host, fill);
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
        let old: Vec<u32> = self
            .streams
            .iter()
            .filter(|(_, s)| now.saturating_sub(s.created_ms) > horizon)
            .map(|(id, _)| *id)
            .collect();
        for id in old {
            self.on_stream_end(host, id);
        }
    }
}
