//! Leases on the worker: a hot client's store decision brings a lease
//! decision along (queued right after it, so they usually share a call):
//! the same limits, each used `k` times a request's units, all or nothing
//! as any decision. Granted, its units are counted in the store already and
//! the lease goes to the proxy's lease table, where every worker spends it;
//! refused, the store's view of the limits is kept to size the next ask.
//! A lease is asked only with such a view at hand (a share of what
//! remains caps it): a hot client with none yet asks nothing, and its
//! decision's answer is kept as the view instead.

use crate::keys::HashSlot;
use crate::time::Instant;
use std::collections::BTreeSet;

use super::jobs::Job;
use super::{Host, Worker};
use crate::lease::{self, Heat, LeaseRecord, LeaseTable, LeasedLimit};
use crate::metrics::Event;
use crate::outcome::LimitOutcome;
use crate::pipeline::{LeaseCandidate, PlannedDecision, PlannedLimit};
use crate::store::StoreError;

/// Lease decisions in flight per worker at most (one per identity).
pub const MAX_LEASE_ASKS: usize = 4096;

/// A lease decision on its way to the store.
#[derive(Debug)]
pub(super) struct LeaseAsk {
    candidate: LeaseCandidate,
    /// Requests asked for.
    requests: u64,
    pub(super) rules: Vec<usize>,
    pub(super) identity: String,
    pub(super) slot: HashSlot,
    /// The decision's limits, each used `requests` times its units.
    pub(super) limits: Vec<PlannedLimit>,
    /// When it was asked: its windows are those of this instant or later.
    asked_at: Instant,
}

/// What the worker keeps for leases.
#[derive(Debug, Default)]
pub(super) struct Leases {
    pub(super) heat: Heat,
    /// Fingerprints with an ask in flight: one at a time per identity.
    asking: BTreeSet<u64>,
    /// Hot fingerprints with no view of their limits yet: their next
    /// decision's answer is kept as one. A hint: emptied when full.
    viewing: BTreeSet<u64>,
}

impl Leases {
    /// Whether some hot client waits for a view of its limits.
    pub(super) fn waits_for_views(&self) -> bool {
        !self.viewing.is_empty()
    }
}

impl Worker {
    /// The lease decision a hot client's `d` brings along, if any, queued.
    pub(super) fn ask_lease<H: Host>(&mut self, host: &H, d: &PlannedDecision, now: Instant) {
        let Some(c) = &d.lease else { return };
        let leases = &mut self.leases;
        if leases.asking.contains(&c.fingerprint) || leases.asking.len() >= MAX_LEASE_ASKS {
            return;
        }
        // Counted as the request was read (see `pipeline`). A client that
        // is not hot asks nothing and costs no shared-data read.
        let heat = leases.heat.estimate(c.fingerprint, now, c.params.max_age_ms);
        if heat < lease::HOT_AFTER {
            return;
        }
        // A table whose slots for this client all hold other clients' live
        // leases: no ask (a grant would push one out, its paid units lost).
        let probe = LeaseTable::new(host, self.config.deny_cache.slots).probe(c.fingerprint, now);
        let Some(previous) = probe.previous else {
            // No view of what remains: the first ask would be capped by
            // nothing, and one proxy could lease all that is left.
            if probe.room {
                if leases.viewing.len() >= MAX_LEASE_ASKS {
                    leases.viewing.clear();
                }
                leases.viewing.insert(c.fingerprint);
            }
            return;
        };
        let requests = lease::ask(&c.params, Some(&previous), heat, now);
        if requests == 0 || !probe.room {
            return;
        }
        let mut limits = Vec::with_capacity(d.limits.len());
        for (l, per) in d.limits.iter().zip(c.per_request()) {
            let Some(units) = per.checked_mul(requests) else { return };
            limits.push(PlannedLimit { op: crate::spec::Op::Use(units), ..*l });
        }
        leases.asking.insert(c.fingerprint);
        let ask = LeaseAsk {
            candidate: c.clone(),
            requests,
            rules: d.rules.clone(),
            identity: d.identity.clone(),
            slot: d.slot,
            limits,
            asked_at: now,
        };
        let job = self.jobs.add(Job::Lease(ask));
        let queued = self.queued(job, now).map(|q| self.queue.push(q));
        if let Some(Err(q)) = queued {
            self.deliver(host, q.job, Err(StoreError::Overloaded), now);
        }
    }

    /// A lease decision's result (`at`: when the store decided it).
    pub(super) fn settle_lease<H: Host>(
        &mut self,
        host: &H,
        ask: LeaseAsk,
        result: Result<Vec<LimitOutcome>, StoreError>,
        at: Instant,
    ) {
        self.leases.asking.remove(&ask.candidate.fingerprint);
        // A store that failed granted nothing; the request's own decision
        // follows its rule's policy.
        let Ok(outcomes) = result else { return };
        if outcomes.len() != ask.limits.len() {
            return;
        }
        let granted = if outcomes.iter().all(|o| o.allowed) { ask.requests } else { 0 };
        let c = &ask.candidate;
        let ends: Vec<lease::Granted> = c
            .spans(&self.config)
            .into_iter()
            .zip(&outcomes)
            .zip(&ask.limits)
            .map(|((span, o), l)| lease::Granted {
                span: span.at_limit(o.limit_or(0)),
                reset_ms: o.reset_ms,
                units: l.op.amount(),
            })
            .collect();
        // With overrides on, a lease is trusted no longer than `within`
        // after the store decided it: an override written since applies
        // on this proxy by then.
        let max_age_ms = match self.config.overrides {
            Some(o) => c.params.max_age_ms.min(o.within.ms()),
            None => c.params.max_age_ms,
        };
        let lease = LeaseRecord {
            fingerprint: c.fingerprint,
            expires_at_ms: lease::expires_at(ask.asked_at, max_age_ms, &ends),
            requests_left: granted,
            granted,
            granted_at_ms: at.ms(),
            limits: view(c, &outcomes, at),
        };
        LeaseTable::new(host, self.config.deny_cache.slots).grant(lease, host.now());
        if granted > 0 {
            for &r in &ask.rules {
                host.count(r, Event::LeaseGranted);
            }
        }
    }

    /// A request decision of lease candidate `c` answered (`at`: when the
    /// store decided it): if its client waits for a view, the answer is
    /// kept as one, a record of no requests (it never pushes out another
    /// client's live lease).
    pub(super) fn keep_view<H: Host>(&mut self, host: &H, c: &LeaseCandidate, outcomes: &[LimitOutcome], at: Instant) {
        if outcomes.len() != c.limits.len() || !self.leases.viewing.remove(&c.fingerprint) {
            return;
        }
        let record = LeaseRecord {
            fingerprint: c.fingerprint,
            expires_at_ms: at.ms(),
            requests_left: 0,
            granted: 0,
            granted_at_ms: at.ms(),
            limits: view(c, outcomes, at),
        };
        LeaseTable::new(host, self.config.deny_cache.slots).grant(record, host.now());
    }
}

/// What the store said of each limit of `c` at `at`, for the next ask.
fn view(c: &LeaseCandidate, outcomes: &[LimitOutcome], at: Instant) -> Vec<LeasedLimit> {
    outcomes
        .iter()
        .zip(c.per_request())
        .map(|(o, per_request)| LeasedLimit {
            remaining_at_grant: o.remaining,
            reset_at_ms: at.after(o.reset_ms).ms(),
            per_request,
            limit: o.overridden.map_or(0, |v| v.limit),
        })
        .collect()
}
