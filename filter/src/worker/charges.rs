//! Charges after the response: merged per identity and rule while they
//! wait for a call (a burst of answers from one client is one entry, so
//! what waits is bounded by clients, not by responses), then settled: a
//! client now out of budget goes in the deny cache; a charge the store
//! could not take spends the local fallback share, and is counted and
//! logged.

use crate::time::Instant;
use std::collections::BTreeMap;

use super::incidents::Incident;
use super::jobs::{Job, JobId};
use super::usage_watch::{amount, Reported};
use super::{Host, Worker, MAX_CHARGES};
use crate::config::{Counts, Rule};
use crate::deny_cache::{DenyCache, DenyEntry};
use crate::fallback::{self, FallbackLimit};
use crate::fingerprint::entry_fingerprint;
use crate::metrics::Event;
use crate::outcome::LimitOutcome;
use crate::pipeline::{fallback_limit, refunds_may_undo, Charge, Reservation};
use crate::spec::{Mark, Op, COUNT};
use crate::store::StoreError;

/// Units of one identity under one rule on their way to the store: a
/// charge after responses, or a refund of what reservations left.
#[derive(Debug)]
pub(super) struct PendingCharge {
    pub(super) charge: Charge,
    /// Units to charge (or give back): the sum of the responses merged
    /// into it.
    pub(super) amount: u64,
    /// Responses merged into it.
    pub(super) responses: u64,
    /// `None`: a charge; else where the units go back.
    pub(super) refund: Option<Refund>,
}

/// Units a reservation took and its response did not use, going back to
/// where they were taken.
#[derive(Clone, Debug)]
pub(super) struct Refund {
    /// The reservation they were taken by (the oldest, when refunds merge).
    pub(super) reservation: Reservation,
    /// Per limit refunded: the index of the window the units were taken
    /// in (a window count), or when its bucket was born (a token bucket
    /// or GCRA). Refunds merge only when each goes back to the same place.
    places: Vec<u64>,
}

impl Refund {
    /// The refund of `reservation` into `limits` of `rule`, which keeps
    /// the limits it can go back to (a bucket only with its mark).
    fn of(rule: &Rule, limits: &mut Vec<(usize, Option<u64>)>, reservation: &Reservation) -> Refund {
        let marked = |i: usize| reservation.marks.iter().any(|(j, _)| *j == i);
        limits.retain(|&(i, _)| rule.limits.get(i).is_some_and(|l| !l.spec.algorithm.tat() || marked(i)));
        let place = |&(i, offset): &(usize, Option<u64>)| match rule.limits.get(i) {
            Some(l) if l.spec.algorithm.windowed() => {
                reservation.at.after(offset.unwrap_or(0)).ms() / l.spec.window_ms.max(1)
            }
            _ => reservation.marks.iter().find(|(j, _)| *j == i).map_or(0, |(_, m)| m.born_ms),
        };
        Refund { reservation: reservation.clone(), places: limits.iter().map(place).collect() }
    }

    /// The op that gives the units back to limit `limit`.
    pub(super) fn op(&self, limit: usize, amount: u64) -> Op {
        let mark = self.reservation.marks.iter().find(|(i, _)| *i == limit).map(|&(_, m)| m);
        Op::Refund { amount, at: self.reservation.at, mark }
    }

    /// Another refund merged into this one (this one of `amount`, the
    /// other of `other_amount`) carries, for each bucket, the older mark
    /// with the newer refund's amount counted out of it: the bucket's count
    /// since the older reservation includes the newer one, whose unused
    /// part the sum gives back, so the sum gives back what the two would
    /// apart, in either order, and never more than had both cost their
    /// usage from the start.
    fn merge_marks(&mut self, amount: u64, other: &Refund, other_amount: u64) {
        for (i, mark) in &mut self.reservation.marks {
            let Some(&(_, theirs)) = other.reservation.marks.iter().find(|(j, _)| j == i) else { continue };
            let (older, newer_amount) = if (mark.count + COUNT - theirs.count) % COUNT < COUNT / 2 {
                (theirs, amount)
            } else {
                (*mark, other_amount)
            };
            *mark = Mark { count: (older.count + newer_amount % COUNT) % COUNT, ..older };
        }
    }
}

/// The entries still waiting in the queue (not yet in a call), per rule,
/// identity and direction: the job a new one of that client merges into.
/// A B-tree: its cost never depends on how identities hash.
#[derive(Debug, Default)]
pub(super) struct Waiting(BTreeMap<(usize, String, Direction), JobId>);

/// Which way a waiting entry's units go: charged, or given back to these
/// places.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Direction {
    Charge,
    Refund(Vec<u64>),
}

impl PendingCharge {
    /// Its key among the waiting entries.
    fn key(&self) -> (usize, String, Direction) {
        let direction = self.refund.as_ref().map_or(Direction::Charge, |r| Direction::Refund(r.places.clone()));
        (self.charge.rule, self.charge.identity.clone(), direction)
    }
}

/// The largest amount one charge may carry on `rule`'s limits counting
/// cost: the script refuses an amount whose product with the window
/// reaches 2^53.
fn max_amount(rule: &Rule) -> u64 {
    let top = (1u64 << 53) - 1;
    rule.limits.iter().filter(|l| l.counts == Counts::Cost).map(|l| top / l.spec.window_ms.max(1)).min().unwrap_or(0)
}

impl Waiting {
    /// Charge job `job` (`c`) leaves the queue (for a call, or failed):
    /// later charges of its client start a new entry.
    pub(super) fn leave(&mut self, job: JobId, c: &PendingCharge) {
        let key = c.key();
        if self.0.get(&key) == Some(&job) {
            self.0.remove(&key);
        }
    }
}

impl Worker {
    /// Charges `reported` usage of a request whose body was `prompt_bytes`
    /// long (nothing when it comes to 0): merged into the client's charge
    /// still waiting for a call, else queued anew. The units it comes to.
    pub(super) fn submit_charge<H: Host>(
        &mut self,
        host: &H,
        charge: Charge,
        reported: Reported,
        prompt_bytes: u64,
    ) -> u64 {
        let Some(rule) = self.config.rules.get(charge.rule) else { return 0 };
        let units = amount(&rule.cost, charge.price.as_deref(), &reported, prompt_bytes);
        host.count(charge.rule, Event::Charged);
        match &reported {
            Reported::Found(_) => {}
            Reported::Missing(_) | Reported::NoResponse => host.count(charge.rule, Event::UsageMissing),
            Reported::Unreadable(why) => {
                host.count(charge.rule, Event::UsageUnreadable);
                let reason = format!("rule {}: {why}", rule.name);
                if let Some(line) = self.incidents.record(Incident::UnreadableUsage, host.now(), 1, units, &reason) {
                    host.warn(&line);
                }
            }
        }
        if units > 0 {
            host.count_by(charge.rule, Event::ChargedUnits, units);
        }
        self.settle_units(host, charge, units);
        units
    }

    /// A reservation whose request never went on (refused after all, or
    /// its stream gone before the store's answer) is given back whole.
    pub(super) fn refund_whole<H: Host>(&mut self, host: &H, charge: Charge) {
        self.settle_units(host, charge, 0);
    }

    /// Charges `units` (nothing when 0); for a reservation, charges what
    /// the response used past it, or gives back what it left.
    fn settle_units<H: Host>(&mut self, host: &H, mut charge: Charge, units: u64) {
        let Some(rule) = self.config.rules.get(charge.rule) else { return };
        let (units, refund) = match &charge.reservation {
            None => (units, None),
            Some(r) if units >= r.units => (units - r.units, None),
            Some(r) => (r.units - units, Some(Refund::of(rule, &mut charge.limits, r))),
        };
        if units == 0 || charge.limits.is_empty() {
            return;
        }
        let entry = PendingCharge { charge, amount: units, responses: 1, refund };
        let most = max_amount(rule);
        let key = entry.key();
        if let Some(Job::Charge(p)) = self.waiting.0.get(&key).and_then(|&job| self.jobs.get_mut(job)) {
            if let Some(sum) = p.amount.checked_add(units).filter(|s| *s <= most) {
                if let (Some(into), Some(from)) = (p.refund.as_mut(), entry.refund.as_ref()) {
                    into.merge_marks(p.amount, from, units);
                }
                p.amount = sum;
                p.responses += 1;
                return;
            }
        }
        let now = host.now();
        if self.jobs.charges() >= MAX_CHARGES {
            self.settle_charge(host, entry, Err(StoreError::Overloaded), now);
            return;
        }
        let job = self.jobs.add(Job::Charge(entry));
        self.waiting.0.insert(key, job);
        let queued = self.queued(job, now).map(|q| self.queue.push(q));
        if let Some(Err(q)) = queued {
            self.refuse_overloaded(host, q.job, now);
        }
    }

    /// A charge's result: a client now out of budget is remembered in the
    /// deny cache until the debt is repaid; a charge the store could not
    /// take spends the proxy's local fallback share (the response is gone:
    /// nothing can be refused, whatever the rule's failure policy), and is
    /// counted and logged.
    pub(super) fn settle_charge<H: Host>(
        &mut self,
        host: &H,
        c: PendingCharge,
        result: Result<Vec<LimitOutcome>, StoreError>,
        at: Instant,
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
                    if refunds_may_undo(rule, l) {
                        continue;
                    }
                    if retry > 0 {
                        let entry = DenyEntry::of(at, d, retry, config.overrides.map(|o| o.within));
                        cache.remember(entry_fingerprint(l.fingerprint, &c.charge.digest), entry);
                    }
                }
            }
            // A refund the store did not take leaves the client charged its
            // worst case: it pays more, never less, and nothing is spent here.
            Err(e) if c.refund.is_some() => {
                let reason = e.to_string();
                let now = host.now();
                if let Some(line) = self.incidents.record(Incident::LostRefund, now, c.responses, c.amount, &reason) {
                    host.warn(&line);
                }
            }
            Err(e) => {
                host.count_by(c.charge.rule, Event::ChargeFailed, c.responses);
                let limits: Vec<FallbackLimit> = c
                    .charge
                    .limits
                    .iter()
                    .filter_map(|&(limit, _)| rule.limits.get(limit))
                    .map(|l| fallback_limit(rule, l, &c.charge.digest, c.amount))
                    .collect();
                let now = host.now();
                fallback::charge(host, config.deny_cache.slots, &limits, now);
                let reason = e.to_string();
                if let Some(line) = self.incidents.record(Incident::LostCharge, now, c.responses, c.amount, &reason) {
                    host.warn(&line);
                }
            }
        }
    }
}
