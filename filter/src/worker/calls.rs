//! The worker's store calls: filling a call from the queue, sending it,
//! taking its answer through the call's state machine, and handing each
//! decision its result (the breakers count a call once, and a decision
//! that failed inside Redis against its own slot). A store that turns out
//! to be a Redis Cluster (`CROSSSLOT`) gets the call's decisions again,
//! one hash slot per call.

use super::jobs::{Job, JobId};
use super::stream::Phase;
use super::{Callback, Flight, Host, Incident, Queued, Worker, MIN_TICK_MS};
use crate::breaker::{self, Health};
use crate::keys::HashSlot;
use crate::spec::{DecisionCall, LimitCall, Op};
use crate::store::batcher::Fill;
use crate::store::flow::{self, Message, Stage, Step};
use crate::store::script_call::{DecisionResult, ScriptCall, ScriptReply};
use crate::store::transport::{self, Answer};
use crate::store::webdis::{self, BODY_HEAD, MAX_BODY};
use crate::store::StoreError;
use crate::store::Transport;
use crate::time::Instant;

impl Worker {
    /// The limits of job `job`'s decision (rule, limit, op, offset), its
    /// identity and slot; `None` when its owner is gone (or is an orphan:
    /// once a call is split, a decision whose stream is gone is not sent).
    pub(super) fn decision_of(&self, job: JobId) -> Option<(Vec<LimitCall<'_>>, &str, HashSlot)> {
        let call = |rule: usize, limit: usize, op: Op, offset_ms: Option<u64>| {
            let r = self.config.rules.get(rule)?;
            Some(LimitCall { rule: &r.name, spec: r.limits.get(limit)?.spec, op, offset_ms })
        };
        match self.jobs.get(job)? {
            Job::Decide { stream, index } => {
                let Phase::Deciding { pending, .. } = &self.streams.get(stream)?.phase else { return None };
                let d = pending.decisions.get(*index)?;
                let limits = d.limits.iter().filter_map(|l| call(l.rule, l.limit, l.op, l.offset_ms)).collect();
                Some((limits, &d.identity, d.slot))
            }
            Job::Charge(c) => {
                let op = |limit: usize| c.refund.as_ref().map_or(Op::Charge(c.amount), |r| r.op(limit, c.amount));
                let limits = c
                    .charge
                    .limits
                    .iter()
                    .filter_map(|&(limit, offset)| call(c.charge.rule, limit, op(limit), offset))
                    .collect();
                Some((limits, &c.charge.identity, c.charge.slot))
            }
            Job::Lease(a) => {
                let limits = a.limits.iter().filter_map(|l| call(l.rule, l.limit, l.op, l.offset_ms)).collect();
                Some((limits, &a.identity, a.slot))
            }
            Job::Permit(c) => {
                let limits = call(c.permit.rule, c.permit.limit, c.op, None).into_iter().collect();
                Some((limits, &c.permit.identity, c.permit.slot))
            }
            Job::Orphan(_) => None,
        }
    }

    /// The queue entry of job `job` if its owner is alive, queued at `now`.
    pub(super) fn queued(&self, job: JobId, now: Instant) -> Option<Queued> {
        let (limits, identity, slot) = self.decision_of(job)?;
        let size = match self.config.store.transport {
            Transport::Webdis => {
                let specs: Vec<(&str, _)> = limits.iter().map(|l| (l.rule, l.spec)).collect();
                webdis::decision_size(&self.config.domain, identity, &specs, self.config.overrides.is_some())
            }
            Transport::Redis => 0,
        };
        let stream = match self.jobs.get(job) {
            Some(Job::Decide { stream, .. }) => Some(*stream),
            _ => None,
        };
        Some(Queued { job, stream, slot, size, since: now })
    }

    /// How one call is filled.
    pub(super) fn fill(&self) -> Fill {
        Fill {
            max_decisions: self.config.store.batching.max_decisions.get() as usize,
            one_hash_slot: self.config.store.redis_cluster,
            max_bytes: (self.config.store.transport == Transport::Webdis).then_some(MAX_BODY - BODY_HEAD),
        }
    }

    /// Sends calls while fewer than the configured number are in flight
    /// and decisions wait.
    pub(super) fn pump<H: Host>(&mut self, host: &H, cb: Callback) {
        let fill = self.fill();
        if self.pinned {
            // Only from a request's own callbacks: its decisions, all now,
            // and what belongs to no request (charges, permit releases and
            // renewals, lease asks; queued before them: a permit released
            // is free for this request's take), whose answers resume
            // nothing. The rest waits for its own request or the timer.
            // NGINX refuses a call from a response's callbacks (it traps).
            let (Callback::Request(stream) | Callback::Answer(Some(stream))) = cb else { return };
            self.send_matching(host, fill, usize::MAX, |q| q.stream.is_none_or(|s| s == stream));
            return;
        }
        while self.flights.len() < self.config.store.batching.max_in_flight.get() as usize && !self.queue.is_empty() {
            self.send_next(host, fill);
        }
    }

    /// Sends calls of the queued jobs `wanted` says, while fewer than
    /// `most` calls are in flight.
    pub(super) fn send_matching<H: Host>(
        &mut self,
        host: &H,
        fill: Fill,
        most: usize,
        wanted: impl Fn(&Queued) -> bool,
    ) {
        while self.flights.len() < most {
            let batch = self.queue.take_matching(fill, &wanted);
            if batch.is_empty() {
                return;
            }
            self.launch(host, &batch);
        }
    }

    /// Sends the next call from the queue.
    pub(super) fn send_next<H: Host>(&mut self, host: &H, fill: Fill) {
        let batch: Vec<Queued> = self.queue.take(fill);
        self.launch(host, &batch);
    }

    /// Sends one call of `batch` (taken from the queue).
    fn launch<H: Host>(&mut self, host: &H, batch: &[Queued]) {
        for q in batch {
            if let Some(Job::Charge(c)) = self.jobs.get(q.job) {
                // Out of the queue: later charges of its client start anew.
                self.waiting.leave(q.job, c);
            }
        }
        if let Some(flight) = self.flight(batch, host.now()) {
            self.send(host, flight, Message::Evalsha, false);
        }
    }

    /// How long a decision may wait for room among the calls in flight
    /// before it goes in a call of its own anyway: a quarter of the store
    /// timeout, so that a store that stalls every call in flight holds a
    /// queued decision for well under two timeouts (calls to a healthy
    /// store take a few ms: room frees up long before).
    pub(super) fn max_wait_ms(&self) -> u64 {
        (self.config.store.timeout.ms() / 4).max(MIN_TICK_MS)
    }

    /// The timer period the worker needs: while decisions wait, a fifth of
    /// `max_wait_ms` (the timer's phase is not the decision's: a period of
    /// `max_wait_ms` would let one wait nearly twice that); the INFO
    /// interval otherwise.
    pub fn tick_period_ms(&self) -> u64 {
        // Slots are renewed on the timer.
        let idle = self.config.store.stats_interval.ms().min(self.permit_tick_ms.unwrap_or(u64::MAX));
        // Bodies are waited for on the timer (a pinned host's is set once).
        let body = self.body_tick_ms.filter(|_| self.pinned || self.bodies_waiting > 0);
        let idle = idle.min(body.unwrap_or(u64::MAX)).min(self.poll_tick_ms().unwrap_or(u64::MAX));
        if self.pinned {
            // Set once (such a host refuses a second period): what is not
            // a stream's own decision goes out on it.
            return (self.max_wait_ms() / 5).max(MIN_TICK_MS).min(idle);
        }
        if self.queue.is_empty() {
            idle
        } else {
            (self.max_wait_ms() / 5).max(MIN_TICK_MS).min(idle)
        }
    }

    /// The call carrying `batch` at `now` (decisions whose stream or
    /// charge is gone are left out); its hash slots are its owners'.
    pub(super) fn flight(&self, batch: &[Queued], now: Instant) -> Option<Flight> {
        let mut jobs = Vec::with_capacity(batch.len());
        let mut slots: Vec<HashSlot> = Vec::with_capacity(batch.len());
        let mut parts: Vec<(Vec<LimitCall<'_>>, &str)> = Vec::with_capacity(batch.len());
        for q in batch {
            let Some((limits, identity, slot)) = self.decision_of(q.job) else { continue };
            jobs.push(q.job);
            slots.push(slot);
            parts.push((limits, identity));
        }
        if jobs.is_empty() {
            return None;
        }
        let decisions: Vec<DecisionCall<'_>> =
            parts.iter().map(|(limits, identity)| DecisionCall { identity, limits }).collect();
        let reads: Vec<bool> = decisions.iter().map(|d| self.reads_overrides(now, d)).collect();
        let call = ScriptCall::reading(&self.config.domain, now, &decisions, &reads);
        Some(Flight { jobs, slots, call, stage: Stage::First, started: now, sent: now })
    }

    /// Sends `message` for `flight`; a call that cannot start fails its
    /// decisions at once.
    pub(super) fn send<H: Host>(&mut self, host: &H, mut flight: Flight, message: Message, reinit: bool) {
        let wire = transport::encode(self.config.store.transport, message, &flight.call);
        let sent = match wire {
            Some(wire) => host.send(&wire, reinit),
            None => Err(StoreError::Dispatch),
        };
        host.store_call(flight.jobs.len());
        match sent {
            Ok(token) => {
                flight.sent = host.now();
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
        let Err(answer) = self.on_poll_answer(token, answer) else { return };
        if self.info.is_some_and(|(t, _)| t == token) {
            self.info = None;
            self.on_info(host, transport::decode_info(answer));
            return;
        }
        // An unknown token (answered already, swept, or never ours) is dropped.
        let Some(mut flight) = self.flights.remove(&token) else { return };
        // A pinned host answers in the request that made the call: its
        // stream is the one that can be resumed or answered now.
        let context = flight.jobs.iter().find_map(|&j| match self.jobs.get(j) {
            Some(Job::Decide { stream, .. }) => Some(*stream),
            _ => None,
        });
        let expected = flight.call.reply_len();
        let reply = transport::decode(flight.stage, answer, expected);
        match flow::next(self.config.store.transport, flight.stage, reply) {
            Step::Send { stage, message, reinit } => {
                flight.stage = stage;
                self.send(host, flight, message, reinit);
            }
            Step::Done(result) => {
                host.store_latency(host.now().since(flight.started));
                self.finish(host, flight, result);
            }
        }
        self.finish_callback(host, Callback::Answer(context));
    }

    /// How large an answer to `token` may be (decided before reading it).
    pub fn max_answer_bytes(&self, token: u32) -> usize {
        if self.info.is_some_and(|(t, _)| t == token) {
            return transport::max_info_bytes();
        }
        if let Some(bytes) = self.max_poll_answer_bytes(token) {
            return bytes;
        }
        self.flights.get(&token).map_or(0, |f| transport::max_answer_bytes(f.call.reply_len()))
    }

    /// Hands a finished call's result to each of its decisions; the
    /// breakers count the call once: a transport failure against the
    /// store, an error for the whole call against each of its slots, and
    /// an answer against each slot as answered, except the slots of
    /// decisions that failed inside Redis, each a key failure.
    pub(super) fn finish<H: Host>(&mut self, host: &H, flight: Flight, result: Result<ScriptReply, StoreError>) {
        if matches!(&result, Err(StoreError::Redis(e)) if e.starts_with("CROSSSLOT")) && self.split(host, &flight) {
            return;
        }
        let now = host.now();
        let results: Result<Vec<DecisionResult>, StoreError> = result.and_then(|reply| flight.call.decode(&reply));
        let breaker = &self.config.store.breaker;
        let mut slots: Vec<HashSlot> = Vec::with_capacity(flight.slots.len());
        for &slot in &flight.slots {
            if !slots.contains(&slot) {
                slots.push(slot);
            }
        }
        match &results {
            Ok(per_decision) => {
                let failed =
                    |slot: HashSlot| flight.slots.iter().zip(per_decision).any(|(&s, r)| s == slot && r.is_err());
                for &slot in &slots {
                    let health = if failed(slot) { Health::KeyFailed } else { Health::Answered };
                    breaker::record(host, breaker, slot, now, health);
                }
            }
            Err(_) => match Health::of(&results) {
                Health::StoreDown => {
                    breaker::record(host, breaker, slots.first().copied().unwrap_or_default(), now, Health::StoreDown)
                }
                health => slots.iter().for_each(|&slot| breaker::record(host, breaker, slot, now, health)),
            },
        }
        let at = flight.sent;
        match results {
            Ok(per_decision) => {
                for (job, result) in flight.jobs.into_iter().zip(per_decision) {
                    if let Err(e) = &result {
                        self.log_store_error(host, e, now);
                    }
                    self.decided_on(job, flight.call.now);
                    self.deliver(host, job, result, at);
                }
            }
            Err(e) => {
                self.log_store_error(host, &e, now);
                for job in flight.jobs {
                    self.deliver(host, job, Err(e.clone()), at);
                }
            }
        }
    }

    /// Counts a store error, and logs it when a line is due.
    fn log_store_error<H: Host>(&mut self, host: &H, e: &StoreError, now: Instant) {
        if let Some(line) = self.incidents.record(Incident::StoreError, now, 1, 0, &e.to_string()) {
            host.warn(&line);
        }
    }

    /// A call of decisions of several hash slots met `CROSSSLOT`: the store
    /// is a Redis Cluster. Its decisions go back to the front of the queue,
    /// and this worker fills its calls with one slot each from now on, as
    /// `store.redis_cluster: true` does (said once in the log). False when
    /// the call held one slot: splitting cannot help, it is a store error.
    fn split<H: Host>(&mut self, host: &H, flight: &Flight) -> bool {
        if flight.slots.iter().all(|&s| Some(s) == flight.slots.first().copied()) {
            return false;
        }
        if !self.config.store.redis_cluster {
            self.config.store.redis_cluster = true;
            host.warn(
                "ratelimit: the store is a Redis Cluster (CROSSSLOT): batching one hash slot per call from now on; \
                 set store.redis_cluster: true",
            );
        }
        for &job in flight.jobs.iter().rev() {
            let Some(item) = self.queued(job, flight.started) else {
                // An orphan (its stream is gone): not sent after all, it takes nothing.
                self.jobs.remove(job);
                continue;
            };
            if let Err(item) = self.queue.push_front(item) {
                self.deliver(host, item.job, Err(StoreError::Overloaded), host.now());
            }
        }
        true
    }
}

impl Worker {
    /// Job `job`'s call decides on `clock` (the caller's clock it
    /// carries): kept with a stream's decision, for the reservation it may
    /// settle.
    fn decided_on(&mut self, job: JobId, clock: Instant) {
        let Some(Job::Decide { stream, index }) = self.jobs.get(job) else { return };
        let (stream, index) = (*stream, *index);
        if let Some(Phase::Deciding { pending, .. }) = self.streams.get_mut(&stream).map(|s| &mut s.phase) {
            pending.decided_on(index, clock);
        }
    }
}
