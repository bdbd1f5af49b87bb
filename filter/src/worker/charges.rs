//! Charges after the response: merged per identity and rule while they
//! wait for a call (a burst of answers from one client is one entry, so
//! what waits is bounded by clients, not by responses), then settled: a
//! client now out of budget goes in the deny cache; a charge the store
//! could not take spends the local fallback share, and is counted and
//! logged.

use std::collections::BTreeMap;

use super::incidents::Incident;
use super::usage_watch::{amount, Reported};
use super::{Host, Owner, Worker, MAX_CHARGES};
use crate::config::{Counts, Rule};
use crate::deny_cache::{DenyCache, DenyEntry};
use crate::fallback::{self, FallbackLimit};
use crate::fingerprint::entry_fingerprint;
use crate::metrics::Event;
use crate::outcome::LimitOutcome;
use crate::pipeline::{fallback_limit, refunds_may_undo, Charge, Reserved};
use crate::spec::COUNT;
use crate::store::StoreError;

/// Charges of one identity under one rule on their way to the store.
#[derive(Debug)]
pub(super) struct PendingCharge {
    pub(super) charge: Charge,
    /// Units to charge (or give back): the sum of the responses merged
    /// into it.
    pub(super) amount: u64,
    /// Responses merged into it.
    pub(super) responses: u64,
    /// A refund of reservations taken on this clock (`None`: a charge).
    pub(super) refund_at: Option<u64>,
}

/// The charges still waiting in the queue (not yet in a call), per rule,
/// identity and kind: the entry a new one of that client merges into. A
/// B-tree: its cost never depends on how identities hash.
#[derive(Debug, Default)]
pub(super) struct Waiting(BTreeMap<(usize, String, Kind), u64>);

/// What a waiting entry does: charge, or give back reservations to these
/// places (one per limit charged: refunds merge only when each goes back
/// to the same place).
type Kind = Option<Vec<u64>>;

/// Where a refund of `reserved` goes back, per limit: the index of the
/// window it was taken in (a window count), or its bucket (a token bucket
/// or GCRA: when it was born).
fn refund_places(rule: &Rule, limits: &[(usize, Option<u64>)], reserved: &Reserved) -> Vec<u64> {
    let place = |&(i, offset): &(usize, Option<u64>)| match rule.limits.get(i) {
        Some(l) if l.spec.algorithm.windowed() => {
            reserved.at_ms.saturating_add(offset.unwrap_or(0)) / l.spec.window_ms.max(1)
        }
        _ => reserved.marks.iter().find(|(j, _)| *j == i).map_or(0, |(_, m)| m.born_ms),
    };
    limits.iter().map(place).collect()
}

/// Refunds merged into one of a bucket carry the older mark: what was
/// added to the bucket since then includes the newer reservation, so the
/// sum gives back no more than the two would apart.
fn keep_older_marks(into: &mut Option<Reserved>, from: Option<&Reserved>) {
    let (Some(into), Some(from)) = (into.as_mut(), from) else { return };
    for (i, mark) in &mut into.marks {
        let older = from.marks.iter().find(|(j, m)| j == i && (mark.count + COUNT - m.count) % COUNT < COUNT / 2);
        if let Some(&(_, m)) = older {
            *mark = m;
        }
    }
}

/// The largest amount one charge may carry on `rule`'s limits counting
/// cost: the script refuses an amount whose product with the window
/// reaches 2^53.
fn max_amount(rule: &Rule) -> u64 {
    let top = (1u64 << 53) - 1;
    rule.limits.iter().filter(|l| l.counts == Counts::Cost).map(|l| top / l.spec.window_ms.max(1)).min().unwrap_or(0)
}

impl Worker {
    /// Charges `reported` usage of a request whose body was `prompt_bytes`
    /// long (nothing when it comes to 0): merged into the client's charge
    /// still waiting for a call, else queued anew.
    pub(super) fn submit_charge<H: Host>(&mut self, host: &H, charge: Charge, reported: Reported, prompt_bytes: u64) {
        let Some(rule) = self.config.rules.get(charge.rule) else { return };
        let units = amount(&rule.cost, charge.price.as_deref(), &reported, prompt_bytes);
        host.count(charge.rule, Event::Charged);
        match &reported {
            Reported::Found(_) => {}
            Reported::Missing(_) | Reported::NoResponse => host.count(charge.rule, Event::UsageMissing),
            Reported::Unreadable(why) => {
                host.count(charge.rule, Event::UsageUnreadable);
                let reason = format!("rule {}: {why}", rule.name);
                if let Some(line) = self.incidents.record(Incident::UnreadableUsage, host.now_ms(), 1, units, &reason) {
                    host.warn(&line);
                }
            }
        }
        if units > 0 {
            host.count_by(charge.rule, Event::ChargedUnits, units);
        }
        self.settle_units(host, charge, units);
    }

    /// A reservation whose request never went on (its stream was gone
    /// before the store's answer) is given back whole.
    pub(super) fn give_back<H: Host>(&mut self, host: &H, charge: Charge) {
        self.settle_units(host, charge, 0);
    }

    /// Charges `units` (nothing when 0), or settles the charge's
    /// reservation to them.
    fn settle_units<H: Host>(&mut self, host: &H, mut charge: Charge, units: u64) {
        let Some(rule) = self.config.rules.get(charge.rule) else { return };
        // A reservation is settled: what the response used past it is
        // charged now, what it left is given back to where it was taken.
        let (units, refund_at) = match &charge.reserved {
            None => (units, None),
            Some(r) if units >= r.units => (units - r.units, None),
            Some(r) => (r.units - units, Some(r.at_ms)),
        };
        let kind = match (&charge.reserved, refund_at) {
            (Some(r), Some(_)) => {
                // A bucket gives back only with its mark.
                let marked = |i: usize| r.marks.iter().any(|(j, _)| *j == i);
                let back = |i: usize| rule.limits.get(i).is_some_and(|l| !l.spec.algorithm.tat() || marked(i));
                charge.limits.retain(|&(i, _)| back(i));
                Some(refund_places(rule, &charge.limits, r))
            }
            _ => None,
        };
        if units == 0 || charge.limits.is_empty() {
            return;
        }
        let most = max_amount(rule);
        let key = (charge.rule, charge.identity, kind);
        if let Some(p) = self.waiting.0.get(&key).and_then(|id| self.charges.get_mut(id)) {
            if let Some(sum) = p.amount.checked_add(units).filter(|s| *s <= most) {
                p.amount = sum;
                p.responses += 1;
                keep_older_marks(&mut p.charge.reserved, charge.reserved.as_ref());
                return;
            }
        }
        let charge = Charge { identity: key.1.clone(), ..charge };
        let now = host.now_ms();
        let pending = PendingCharge { charge, amount: units, responses: 1, refund_at };
        if self.charges.len() >= MAX_CHARGES {
            self.settle_charge(host, pending, Err(StoreError::Overloaded), now);
            return;
        }
        let id = self.next_charge;
        self.next_charge = self.next_charge.wrapping_add(1);
        self.charges.insert(id, pending);
        self.waiting.0.insert(key, id);
        let queued = self.queued(Owner::Charge(id), now).map(|q| self.queue.push(q));
        if let Some(Err(q)) = queued {
            self.refuse_overloaded(host, q.owner, now);
        }
        self.pump(host);
    }

    /// Charge `id` leaves the queue (for a call, or failed): later charges
    /// of its client start a new entry.
    pub(super) fn charge_leaves_queue(&mut self, id: u64) {
        let Some(c) = self.charges.get(&id) else { return };
        let rule = self.config.rules.get(c.charge.rule);
        let reserved = c.charge.reserved.as_ref().filter(|_| c.refund_at.is_some());
        let kind = rule.zip(reserved).map(|(rule, r)| refund_places(rule, &c.charge.limits, r));
        let key = (c.charge.rule, c.charge.identity.clone(), kind);
        if self.waiting.0.get(&key) == Some(&id) {
            self.waiting.0.remove(&key);
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
                    if refunds_may_undo(rule, l) {
                        continue;
                    }
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
            // A refund the store did not take leaves the client charged its
            // worst case: it pays more, never less, and nothing is spent here.
            Err(e) if c.refund_at.is_some() => {
                let reason = e.to_string();
                let now = host.now_ms();
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
                let now = host.now_ms();
                fallback::charge(host, config.deny_cache.slots, &limits, now);
                let reason = e.to_string();
                if let Some(line) = self.incidents.record(Incident::LostCharge, now, c.responses, c.amount, &reason) {
                    host.warn(&line);
                }
            }
        }
    }
}
