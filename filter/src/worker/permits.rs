//! Concurrency permits on the worker. A stream admitted by a concurrency
//! limit holds a permit until it ends: then the permit is released, once,
//! in a store call batched with the others (or, taken in the local share
//! while the store failed, released there): `end_permit` is the one place
//! that releases a permit. While the stream lives the permit is renewed
//! every third of `max_hold`, so it never expires under a live stream; a
//! renewal the store does not take is tried again on the next tick. A
//! permit taken by a decision whose stream went away before the store
//! answered is released when the answer comes (an orphan, `jobs`).
//!
//! A permit taken in the local share while the store failed is renewed
//! there, and on the same beat offered to the store: a renewal that gets
//! through adds it to the store's permits and gives its local share back,
//! so every proxy counts it again (until then this proxy's takes count it,
//! see `Op::Take`).

use super::jobs::{Job, JobId};
use super::{Host, Worker, MIN_TICK_MS};
use crate::algorithm::Algorithm;
use crate::config::{Config, Limit};
use crate::fallback;
use crate::metrics::Event;
use crate::outcome::LimitOutcome;
use crate::pipeline::Permit;
use crate::spec::Op;
use crate::store::StoreError;
use crate::time::Instant;

/// A permit a live stream holds.
#[derive(Debug)]
pub(super) struct HeldPermit {
    pub(super) permit: Permit,
    /// When it was taken or last renewed (the proxy's clock).
    renewed: Instant,
    /// Its renewal on its way to the store.
    pub(super) renewal: Option<JobId>,
}

impl HeldPermit {
    pub(super) fn new(permit: Permit, now: Instant) -> HeldPermit {
        HeldPermit { permit, renewed: now, renewal: None }
    }
}

/// A release or renewal on its way to the store.
#[derive(Debug)]
pub(super) struct PermitCall {
    pub(super) permit: Permit,
    /// `Op::Release` or `Op::Renew`.
    pub(super) op: Op,
    /// The stream a renewal is for.
    stream: Option<u32>,
    /// The stream ended while this renewal was out: release the permit
    /// once it is answered (sent now, the release could overtake it in
    /// another call and the renewal take the permit again).
    then_release: bool,
    /// A permit of the local share moving into the store.
    moving: bool,
}

/// How often a permit is renewed: every third of its `max_hold`, so two
/// renewals in a row may fail before it expires.
fn renew_every_ms(limit: &Limit) -> u64 {
    (limit.spec.window_ms / 3).max(MIN_TICK_MS)
}

/// The timer period a configuration with concurrency limits needs: a
/// sixth of the shortest `max_hold` (a permit is renewed at most half a
/// renewal period late); `None` without concurrency limits.
pub(super) fn tick_ms(config: &Config) -> Option<u64> {
    let limits = config.rules.iter().flat_map(|r| &r.limits);
    limits.filter(|l| l.spec.algorithm == Algorithm::Concurrency).map(|l| (l.spec.window_ms / 6).max(MIN_TICK_MS)).min()
}

impl Worker {
    /// Releases one permit: in the local share at once, in the store by a
    /// release call; while `renewal` is on its way, once it comes back
    /// (it could otherwise take the permit again after the release).
    pub(super) fn end_permit<H: Host>(&mut self, host: &H, permit: Permit, renewal: Option<JobId>) {
        let now = host.now();
        let renewing = renewal.and_then(|job| match self.jobs.get_mut(job) {
            Some(Job::Permit(call)) => Some(call),
            _ => None,
        });
        if permit.local {
            permit.release_locally(&self.config, host, host, now);
        }
        if let Some(call) = renewing {
            // On its way into the store, or renewed there: released once back.
            call.then_release = true;
            return;
        }
        if !permit.local {
            let op = Op::Release(permit.id);
            self.queue_permit_call(
                host,
                PermitCall { permit, op, stream: None, then_release: false, moving: false },
                now,
            );
        }
    }

    /// Renews the permits of live streams that are due, on the timer.
    pub(super) fn renew_permits<H: Host>(&mut self, host: &H, now: Instant) {
        let mut due = Vec::new();
        for (&stream, state) in self.streams.iter_mut() {
            for (i, held) in state.permits.iter_mut().enumerate().filter(|(_, h)| h.renewal.is_none()) {
                let Some(limit) = self.config.rules.get(held.permit.rule).and_then(|r| r.limits.get(held.permit.limit))
                else {
                    continue;
                };
                if now.since(held.renewed) < renew_every_ms(limit) {
                    continue;
                }
                let moving = held.permit.local;
                if moving {
                    if let Some(l) = held.permit.local_share(&self.config) {
                        fallback::renew_permit(host, self.config.deny_cache.slots, &l, now);
                    }
                    held.renewed = now;
                }
                let (permit, op) = (held.permit.clone(), Op::Renew(held.permit.id));
                due.push((stream, i, PermitCall { permit, op, stream: Some(stream), then_release: false, moving }));
            }
        }
        for (stream, i, call) in due {
            let job = self.queue_permit_call(host, call, now);
            if let Some(held) = self.streams.get_mut(&stream).and_then(|s| s.permits.get_mut(i)) {
                held.renewal = job;
            }
        }
    }

    /// Queues `call` as a job; its id while it is owned.
    fn queue_permit_call<H: Host>(&mut self, host: &H, call: PermitCall, now: Instant) -> Option<JobId> {
        let job = self.jobs.add(Job::Permit(call));
        let queued = self.queued(job, now).map(|q| self.queue.push(q));
        if let Some(Err(q)) = queued {
            self.refuse_overloaded(host, q.job, now);
        }
        self.jobs.get(job).map(|_| job)
    }

    /// A release's or renewal's result: counted; a renewal that did not
    /// reach the store is tried again on the next tick, one that did is
    /// dated from when it was sent.
    pub(super) fn settle_permit<H: Host>(
        &mut self,
        host: &H,
        call: PermitCall,
        result: Result<Vec<LimitOutcome>, StoreError>,
        at: Instant,
    ) {
        if call.moving {
            return self.settle_move(host, call, result.is_ok(), at);
        }
        let held_on = result.as_ref().map(|outcomes| outcomes.iter().all(|o| o.allowed));
        let event = match (held_on, call.op) {
            (Ok(true), Op::Release(_)) => Some(Event::PermitReleased),
            // Renewed: nothing to count, the permit held on.
            (Ok(true), _) => None,
            (Ok(false), _) => Some(Event::PermitExpired),
            (Err(_), _) => Some(Event::PermitStoreFailed),
        };
        if let Some(event) = event {
            host.count(call.permit.rule, event);
        }
        if call.then_release {
            return self.end_permit(host, call.permit, None);
        }
        let Some(held) = self.held(call.stream, &call.permit) else { return };
        held.renewal = None;
        if result.is_ok() {
            held.renewed = at;
        }
    }

    /// Stream `stream`'s held permit `hold`, if it still holds it.
    fn held(&mut self, stream: Option<u32>, permit: &Permit) -> Option<&mut HeldPermit> {
        self.streams.get_mut(&stream?)?.permits.iter_mut().find(|h| h.permit == *permit)
    }

    /// A local permit's renewal in the store came back: taken there
    /// (`in_store`), it is a store permit from now on and its local share
    /// is given back; a stream that ended meanwhile (its local share
    /// already given back) releases it from the store. Not taken: it stays
    /// local, offered again on its next renewal.
    fn settle_move<H: Host>(&mut self, host: &H, call: PermitCall, in_store: bool, at: Instant) {
        let stored = Permit { local: false, ..call.permit.clone() };
        if call.then_release {
            if in_store {
                self.end_permit(host, stored, None);
            }
            return;
        }
        let config = &self.config;
        let Some(held) = self
            .streams
            .get_mut(&call.stream.unwrap_or(u32::MAX))
            .and_then(|s| s.permits.iter_mut().find(|h| h.permit == call.permit))
        else {
            return;
        };
        held.renewal = None;
        if !in_store {
            return;
        }
        if let Some(l) = call.permit.local_share(config) {
            fallback::release_permit(host, config.deny_cache.slots, &l, at);
        }
        held.permit = stored;
        held.renewed = at;
    }
}
