//! Concurrency slots on the worker. A stream admitted by a concurrency
//! limit holds a slot until it ends: then the slot is released, once, in a
//! store call batched with the others (or, taken in the local share while
//! the store failed, released there). While the stream lives the slot is
//! renewed every third of `max_hold`, so it never expires under a live
//! stream; a renewal the store does not take is tried again on the next
//! tick. A slot taken by a decision whose stream went away before the
//! store answered is released when the answer comes (an "orphan").
//!
//! A slot taken in the local share while the store failed is renewed there,
//! and on the same beat offered to the store: a renewal that gets through
//! adds it to the store's slots and gives its local share back, so every
//! proxy counts it again (until then this proxy's takes count it, see
//! `Op::Take`).

use std::collections::BTreeMap;

use super::{Host, Owner, Worker, MIN_TICK_MS};
use crate::algorithm::Algorithm;
use crate::config::{Config, Limit};
use crate::fallback;
use crate::id_map::IdMap;
use crate::metrics::Event;
use crate::outcome::LimitOutcome;
use crate::pipeline::{Hold, PlannedDecision};
use crate::spec::Op;
use crate::store::StoreError;

/// A slot a live stream holds.
#[derive(Debug)]
pub(super) struct HeldSlot {
    pub(super) hold: Hold,
    /// When it was taken or last renewed (the proxy's clock).
    renewed_ms: u64,
    /// A renewal is on its way to the store.
    renewing: bool,
}

impl HeldSlot {
    pub(super) fn new(hold: Hold, now_ms: u64) -> HeldSlot {
        HeldSlot { hold, renewed_ms: now_ms, renewing: false }
    }
}

/// A release or renewal on its way to the store.
#[derive(Debug)]
pub(super) struct SlotCall {
    pub(super) hold: Hold,
    /// `Op::Release` or `Op::Renew`.
    pub(super) op: Op,
    /// The stream a renewal is for.
    stream: Option<u32>,
    /// The stream ended while this renewal was out: release the slot once
    /// it is answered (sent now, the release could overtake it in another
    /// call and the renewal take the slot again).
    then_release: bool,
    /// A slot of the local share moving into the store.
    moving: bool,
}

/// What the worker keeps for slots besides its streams'.
#[derive(Debug, Default)]
pub(super) struct Slots {
    pub(super) calls: IdMap<u64, SlotCall>,
    next: u64,
    /// What decisions in flight may take for streams already gone: by
    /// (stream, decision), given back if the store admitted.
    orphans: BTreeMap<(u32, usize), Orphan>,
}

/// What a decision in flight of a stream already gone may take.
#[derive(Debug)]
struct Orphan {
    /// Slots: released.
    holds: Vec<Hold>,
    /// A decision that reserves, and the clock its call decides on (set
    /// when the call's is known): its reservations are refunded whole,
    /// with the marks the store's answer gives.
    reserving: Option<(PlannedDecision, u64)>,
}

/// How often a slot is renewed: every third of its `max_hold`, so two
/// renewals in a row may fail before it expires.
fn renew_every_ms(limit: &Limit) -> u64 {
    (limit.spec.window_ms / 3).max(MIN_TICK_MS)
}

/// The timer period a configuration with concurrency limits needs: a
/// sixth of the shortest `max_hold` (a slot is renewed at most half a
/// renewal period late); `None` without concurrency limits.
pub(super) fn tick_ms(config: &Config) -> Option<u64> {
    let limits = config.rules.iter().flat_map(|r| &r.limits);
    limits.filter(|l| l.spec.algorithm == Algorithm::Concurrency).map(|l| (l.spec.window_ms / 6).max(MIN_TICK_MS)).min()
}

impl Worker {
    /// Releases slots whose streams ended (or never began: a request
    /// refused by another rule after its slot was taken).
    pub(super) fn release_slots<H: Host>(&mut self, host: &H, holds: Vec<Hold>) {
        let now = host.now_ms();
        for hold in holds {
            let renewing = self.slots.calls.values_mut().find(|c| c.hold == hold && matches!(c.op, Op::Renew(_)));
            if hold.local {
                hold.release_locally(&self.config, host, host, now);
                // On its way into the store: released there once it arrives.
                if let Some(moving) = renewing {
                    moving.then_release = true;
                }
                continue;
            }
            if let Some(renewal) = renewing {
                renewal.then_release = true;
                continue;
            }
            let op = Op::Release(hold.id);
            self.queue_slot_call(host, SlotCall { hold, op, stream: None, then_release: false, moving: false }, now);
        }
        self.pump(host);
    }

    /// Renews the slots of live streams that are due, on the timer.
    pub(super) fn renew_slots<H: Host>(&mut self, host: &H, now: u64) {
        let mut due = Vec::new();
        for (&stream, state) in self.streams.iter_mut() {
            for held in state.holds.iter_mut().filter(|h| !h.renewing) {
                let Some(limit) = self.config.rules.get(held.hold.rule).and_then(|r| r.limits.get(held.hold.limit))
                else {
                    continue;
                };
                if now.saturating_sub(held.renewed_ms) < renew_every_ms(limit) {
                    continue;
                }
                let moving = held.hold.local;
                if moving {
                    if let Some(l) = held.hold.local_share(&self.config) {
                        fallback::renew_slot(host, self.config.deny_cache.slots, &l, now);
                    }
                    held.renewed_ms = now;
                }
                held.renewing = true;
                let (hold, op) = (held.hold.clone(), Op::Renew(held.hold.id));
                due.push(SlotCall { hold, op, stream: Some(stream), then_release: false, moving });
            }
        }
        for call in due {
            self.queue_slot_call(host, call, now);
        }
        self.pump(host);
    }

    fn queue_slot_call<H: Host>(&mut self, host: &H, call: SlotCall, now: u64) {
        let id = self.slots.next;
        self.slots.next = self.slots.next.wrapping_add(1);
        self.slots.calls.insert(id, call);
        let queued = self.queued(Owner::Slot(id), now).map(|q| self.queue.push(q));
        if let Some(Err(q)) = queued {
            self.refuse_overloaded(host, q.owner, now);
        }
    }

    /// A release's or renewal's result: counted; a renewal that did not
    /// reach the store is tried again on the next tick, one that did is
    /// dated from when it was sent.
    pub(super) fn settle_slot<H: Host>(
        &mut self,
        host: &H,
        id: u64,
        result: Result<Vec<LimitOutcome>, StoreError>,
        at: u64,
    ) {
        let Some(call) = self.slots.calls.remove(&id) else { return };
        if call.moving {
            return self.settle_move(host, call, result.is_ok(), at);
        }
        let held_on = result.as_ref().map(|outcomes| outcomes.iter().all(|o| o.allowed));
        let event = match (held_on, call.op) {
            (Ok(true), Op::Release(_)) => Some(Event::SlotReleased),
            // Renewed: nothing to count, the slot held on.
            (Ok(true), _) => None,
            (Ok(false), _) => Some(Event::SlotExpired),
            (Err(_), _) => Some(Event::SlotStoreFailed),
        };
        if let Some(event) = event {
            host.count(call.hold.rule, event);
        }
        if call.then_release {
            return self.release_slots(host, vec![call.hold]);
        }
        let Some(stream) = call.stream else { return };
        let Some(held) = self.streams.get_mut(&stream).and_then(|s| s.holds.iter_mut().find(|h| h.hold == call.hold))
        else {
            return;
        };
        held.renewing = false;
        if result.is_ok() {
            held.renewed_ms = at;
        }
    }

    /// A local slot's renewal in the store came back: taken there (`in_store`),
    /// it is a store slot from now on and its local share is given back; a
    /// stream that ended meanwhile (its local share already given back)
    /// releases it from the store. Not taken: it stays local, offered again
    /// on its next renewal.
    fn settle_move<H: Host>(&mut self, host: &H, call: SlotCall, in_store: bool, at: u64) {
        let stored = Hold { local: false, ..call.hold.clone() };
        if call.then_release {
            if in_store {
                let op = Op::Release(stored.id);
                self.queue_slot_call(
                    host,
                    SlotCall { hold: stored, op, stream: None, then_release: false, moving: false },
                    at,
                );
                self.pump(host);
            }
            return;
        }
        let Some(stream) = call.stream else { return };
        let held = self.streams.get_mut(&stream).and_then(|s| s.holds.iter_mut().find(|h| h.hold == call.hold));
        let Some(held) = held else { return };
        held.renewing = false;
        if !in_store {
            return;
        }
        if let Some(l) = call.hold.local_share(&self.config) {
            fallback::release_slot(host, self.config.deny_cache.slots, &l, at);
        }
        held.hold = stored;
        held.renewed_ms = at;
    }

    /// Stream `stream` ends with decision `decision` in a call in flight
    /// (deciding on `clock_ms`): the slots it may take are released, and
    /// what it reserves given back, if the store admits it.
    pub(super) fn orphan(&mut self, stream: u32, decision: usize, d: &PlannedDecision, clock_ms: u64) {
        let holds: Vec<Hold> = d.takes(false).collect();
        let reserving = d.reserves(&self.config).then(|| (d.clone(), clock_ms));
        if !holds.is_empty() || reserving.is_some() {
            self.slots.orphans.insert((stream, decision), Orphan { holds, reserving });
        }
    }

    /// An orphan's call decides on `clock_ms`: where its reservations went.
    pub(super) fn orphan_decided_on(&mut self, stream: u32, decision: usize, clock_ms: u64) {
        if let Some((_, clock)) = self.slots.orphans.get_mut(&(stream, decision)).and_then(|o| o.reserving.as_mut()) {
            *clock = clock_ms;
        }
    }

    /// A decision whose stream is gone will not be sent after all (its call
    /// is being split): it takes nothing.
    pub(super) fn forget_orphan(&mut self, stream: u32, decision: usize) {
        self.slots.orphans.remove(&(stream, decision));
    }

    /// The answer for a decision whose stream is gone.
    pub(super) fn settle_orphan<H: Host>(
        &mut self,
        host: &H,
        stream: u32,
        decision: usize,
        result: &Result<Vec<LimitOutcome>, StoreError>,
    ) {
        let Some(orphan) = self.slots.orphans.remove(&(stream, decision)) else { return };
        let admitted = matches!(result, Ok(outcomes) if outcomes.iter().all(|o| o.allowed));
        // Its answer lost: it may hold the slots all the same (released:
        // a release of a slot never taken is harmless); a reservation is
        // given back only if it surely was taken (a refund of units never
        // taken would admit more than the limit).
        if admitted || result.as_ref().is_err_and(StoreError::may_have_run) {
            self.release_slots(host, orphan.holds);
        }
        if let (Some((mut d, clock_ms)), Ok(outcomes)) = (orphan.reserving.filter(|_| admitted), result) {
            d.take_marks(&self.config, &mut outcomes.clone());
            for charge in d.reservations(&self.config, clock_ms) {
                self.give_back(host, charge);
            }
        }
    }
}
