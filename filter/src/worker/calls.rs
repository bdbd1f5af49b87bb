//! The worker's store calls: filling a call from the queue, sending it,
//! taking its answer through the call's state machine, and handing each
//! decision its result (the breakers count a call once, and a decision
//! that failed inside Redis against its own slot). A store that turns out
//! to be a Redis Cluster (`CROSSSLOT`) gets the call's decisions again,
//! one hash slot per call.

use super::{Flight, Host, Incident, Owner, Queued, Worker, MIN_TICK_MS};
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

impl Worker {
    /// The limits of `owner`'s decision (rule, limit, op, offset), its
    /// identity and slot; `None` when its stream or charge is gone.
    pub(super) fn decision_of(&self, owner: Owner) -> Option<(Vec<LimitCall<'_>>, &str, HashSlot)> {
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
                let marks = c.charge.reserved.as_ref().map_or(&[][..], |r| &r.marks[..]);
                let op = |limit: usize| match c.refund_at {
                    None => Op::Charge(c.amount),
                    Some(at_ms) => {
                        let mark = marks.iter().find(|(i, _)| *i == limit).map(|&(_, m)| m);
                        Op::Refund { amount: c.amount, at_ms, mark }
                    }
                };
                let limits = c
                    .charge
                    .limits
                    .iter()
                    .filter_map(|&(limit, offset)| call(c.charge.rule, limit, op(limit), offset))
                    .collect();
                Some((limits, &c.charge.identity, c.charge.slot))
            }
            Owner::Lease(id) => {
                let a = self.leases.asks.get(&id)?;
                let limits = a.limits.iter().filter_map(|l| call(l.rule, l.limit, l.op, l.offset_ms)).collect();
                Some((limits, &a.identity, a.slot))
            }
            Owner::Slot(id) => {
                let c = self.slots.calls.get(&id)?;
                let limits = call(c.hold.rule, c.hold.limit, c.op, None).into_iter().collect();
                Some((limits, &c.hold.identity, c.hold.slot))
            }
        }
    }

    /// The queue entry for a decision whose owner is alive, queued at `now`.
    pub(super) fn queued(&self, owner: Owner, now: u64) -> Option<Queued> {
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

    /// How one call is filled.
    pub(super) fn fill(&self) -> Fill {
        Fill {
            max_decisions: self.config.store.batching.max_decisions.get() as usize,
            one_slot: self.config.store.redis_cluster,
            max_bytes: (self.config.store.transport == Transport::Webdis).then_some(MAX_BODY - BODY_HEAD),
        }
    }

    /// Sends calls while fewer than the configured number are in flight
    /// and decisions wait.
    pub(super) fn pump<H: Host>(&mut self, host: &H) {
        let fill = self.fill();
        if self.pinned {
            // Only from a request's own callbacks: its decisions, all now,
            // and what belongs to no request (charges, slot releases and
            // renewals, lease asks; queued before them: a slot released
            // is free for this request's take), whose answers resume
            // nothing. The rest waits for its own request or the timer.
            let Some(stream) = self.pinned_to else { return };
            let carried = |q: &Queued| match q.owner {
                Owner::Stream { stream: s, .. } => s == stream,
                _ => true,
            };
            self.send_matching(host, fill, usize::MAX, carried);
            return;
        }
        while self.flights.len() < self.config.store.batching.max_in_flight.get() as usize && !self.queue.is_empty() {
            self.send_next(host, fill);
        }
    }

    /// Sends calls of the queued decisions `wanted` says, while fewer than
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
            for q in &batch {
                if let Owner::Charge(id) = q.owner {
                    self.charge_leaves_queue(id);
                }
            }
            if let Some(flight) = self.flight(&batch, host.now_ms()) {
                self.send(host, flight, Message::Evalsha, false);
            }
        }
    }

    /// Sends the next call from the queue.
    pub(super) fn send_next<H: Host>(&mut self, host: &H, fill: Fill) {
        let batch: Vec<Queued> = self.queue.take(fill);
        for q in &batch {
            if let Owner::Charge(id) = q.owner {
                self.charge_leaves_queue(id);
            }
        }
        if let Some(flight) = self.flight(&batch, host.now_ms()) {
            self.send(host, flight, Message::Evalsha, false);
        }
    }

    /// How long a decision may wait for a call slot before it goes in a
    /// call of its own anyway: a quarter of the store timeout, so that a
    /// store that stalls every call in flight holds a queued decision for
    /// well under two timeouts (calls to a healthy store take a few ms: a
    /// slot frees up long before).
    pub(super) fn max_wait_ms(&self) -> u64 {
        (self.config.store.timeout.ms() / 4).max(MIN_TICK_MS)
    }

    /// The timer period the worker needs: while decisions wait, a fifth of
    /// `max_wait_ms` (the timer's phase is not the decision's: a period of
    /// `max_wait_ms` would let one wait nearly twice that); the INFO
    /// interval otherwise.
    pub fn tick_period_ms(&self) -> u64 {
        // Slots are renewed on the timer.
        let idle = self.config.store.stats_interval.ms().min(self.slot_tick_ms.unwrap_or(u64::MAX));
        // Bodies are waited for on the timer (a pinned host's is set once).
        let body = self.body_tick_ms.filter(|_| self.pinned || !self.body_waits.is_empty());
        let idle = idle.min(body.unwrap_or(u64::MAX));
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
    /// charge is gone are left out); its slots are its owners'.
    pub(super) fn flight(&self, batch: &[Queued], now: u64) -> Option<Flight> {
        let mut owners = Vec::with_capacity(batch.len());
        let mut slots: Vec<HashSlot> = Vec::with_capacity(batch.len());
        let mut parts: Vec<(Vec<LimitCall<'_>>, &str)> = Vec::with_capacity(batch.len());
        for q in batch {
            let Some((limits, identity, slot)) = self.decision_of(q.owner) else { continue };
            owners.push(q.owner);
            slots.push(slot);
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
    pub(super) fn send<H: Host>(&mut self, host: &H, mut flight: Flight, message: Message, reinit: bool) {
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
        // A pinned host answers in the request that made the call: its
        // stream is the one that can be resumed or answered now.
        self.pinned_to = flight.owners.iter().find_map(|o| match o {
            Owner::Stream { stream, .. } => Some(*stream),
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
                host.store_latency(host.now_ms().saturating_sub(flight.started_ms));
                self.finish(host, flight, result);
            }
        }
        self.pump(host);
        self.pinned_to = None;
    }

    /// How large an answer to `token` may be (decided before reading it).
    pub fn max_answer_bytes(&self, token: u32) -> usize {
        if self.info.is_some_and(|(t, _)| t == token) {
            return transport::max_info_bytes();
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
        let now = host.now_ms();
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
        let at = flight.sent_ms;
        match results {
            Ok(per_decision) => {
                for (owner, result) in flight.owners.into_iter().zip(per_decision) {
                    if let Err(e) = &result {
                        self.log_store_error(host, e, now);
                    }
                    self.decided_on(owner, flight.call.now_ms);
                    self.deliver(host, owner, result, at);
                }
            }
            Err(e) => {
                self.log_store_error(host, &e, now);
                for owner in flight.owners {
                    self.deliver(host, owner, Err(e.clone()), at);
                }
            }
        }
    }

    /// Counts a store error, and logs it when a line is due.
    fn log_store_error<H: Host>(&mut self, host: &H, e: &StoreError, now: u64) {
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
        for &owner in flight.owners.iter().rev() {
            let Some(item) = self.queued(owner, flight.started_ms) else {
                if let Owner::Stream { stream, decision } = owner {
                    self.forget_orphan(stream, decision);
                }
                continue;
            };
            if let Err(item) = self.queue.push_front(item) {
                self.deliver(host, item.owner, Err(StoreError::Overloaded), host.now_ms());
            }
        }
        self.pump(host);
        true
    }
}
