//! One request's way through the limiter, host-independent, as stages read
//! top to bottom (`begin.rs` drives them, one key group of rules at a
//! time): the rules that apply (`matched`), the client's identity
//! (`identify`), a live lease (`leases`: the worker draws from it), the
//! refusals that need no store (`costs`: the body, the price, a stated
//! cost), the deny cache (`reads`), the store decision (`plan`). Then
//! `Pending::on_reply` takes each decision's result, and when all are in
//! gives the verdict (`pending`): continue (with headers), 429 or 503,
//! with the effects the worker applies (denials to cache, what to give
//! back). The pipeline reads shared data but never writes it, except the
//! fallback shares that are the verdict of a failed store (`verdicts`).

use crate::algorithm::Algorithm;
use crate::breaker::Gate;
use crate::config::{Config, Counts, Limit, Price, Rule};
use crate::deny_cache::DenyEntry;
use crate::fallback::FallbackLimit;
use crate::fingerprint::IdentityDigest;
use crate::keys::HashSlot;
use crate::lease::LeaseRecord;
use crate::metrics::{Event, Metrics};
use crate::outcome::LimitOutcome;
use crate::ratelimit_fields::PartitionKey;
use crate::response::{Headers, LocalReply, PolicyRef, Shown};
use crate::shared::SharedData;
use crate::spec::{Mark, Op, PermitId};
use crate::store::StoreError;
use crate::time::Instant;

/// The host services a request's evaluation needs.
pub struct Env<'a, S: SharedData + ?Sized, M: Metrics + ?Sized> {
    /// The configuration in force.
    pub config: &'a Config,
    /// Shared data (deny cache, fallback buckets, breaker).
    pub shared: &'a S,
    /// Counters.
    pub metrics: &'a M,
    /// A random number for this request (Retry-After jitter).
    pub random: u64,
}

/// What the pipeline asks the worker to claim in shared data, atomically,
/// with what came of it.
pub trait Claims {
    /// One request drawn from the client's live lease in the proxy's
    /// table, if the client is hot on this worker and one is live: the
    /// lease as it is after the draw.
    fn draw(&mut self, lease: &LeaseCandidate, now: Instant) -> Option<LeaseRecord>;
    /// Whether the store may be called for keys in `slot` now (`Probe`: a
    /// half-open breaker's one probe, claimed).
    fn gate(&mut self, slot: HashSlot, now: Instant) -> Gate;
}

/// A request decided, and what the worker does for it in shared state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decided {
    /// How it ends.
    pub outcome: Outcome,
    /// The effects to apply.
    pub effects: Effects,
    /// What the access log tells of it (`None`: no rule applied).
    pub trace: Option<Box<Trace>>,
}

impl Decided {
    /// Let through, with nothing to add, charge or hold.
    pub fn pass() -> Decided {
        let outcome = Outcome::Continue(Vec::new(), Vec::new(), Vec::new());
        Decided { outcome, effects: Effects::default(), trace: None }
    }

    /// Answered with `reply` by rule `r`, refused by `by` before the store,
    /// nothing taken.
    pub fn refused(reply: LocalReply, r: usize, by: DecidedBy) -> Decided {
        Decided {
            outcome: Outcome::Reply(reply),
            effects: Effects::default(),
            trace: Some(Box::new(Trace::refused(r, by))),
        }
    }
}

/// What the worker applies to shared state for a decided request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// Denials to remember in the deny cache, by entry fingerprint.
    pub denials: Vec<(u64, DenyEntry)>,
    /// What the store or the local share gave that goes back.
    pub give_back: Taken,
}

/// What a request or a decision took that goes back: permits (in the
/// store or the local share) and reservations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Taken {
    /// Concurrency permits, to release.
    pub permits: Vec<Permit>,
    /// Reservations, to refund whole.
    pub reservations: Vec<Charge>,
}

/// How a request ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Let it through; add these headers to the response, charge these
    /// costs once the response reports them, and hold these concurrency
    /// slots until the stream ends.
    Continue(Headers, Vec<Charge>, Vec<Permit>),
    /// Answer it with this.
    Reply(LocalReply),
}

/// A cost to charge after the response: the usage one rule's limits
/// counting cost will be charged, for one identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Charge {
    /// The rule (index into the configuration's rules).
    pub rule: usize,
    /// The escaped identity.
    pub identity: String,
    /// Its hash slot.
    pub slot: HashSlot,
    /// The limits to charge (indices into the rule's limits) and their
    /// staggered window offsets.
    pub limits: Vec<(usize, Option<u64>)>,
    /// The identity's digest (deny cache and fallback fingerprints).
    pub digest: IdentityDigest,
    /// What the store reserved for it at admission (reservation mode),
    /// to settle: `None` when nothing was (the check-then-charge mode, or
    /// a request the local fallback admitted while the store failed).
    pub reservation: Option<Reservation>,
    /// The price of the request's model, when the rule prices its usage.
    pub price: Option<Arc<Price>>,
}

/// A reservation the store took for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// Units taken from each limit counting cost.
    pub units: u64,
    /// The clock the store took them on (their windows' keys).
    pub at: Instant,
    /// The mark of each token bucket or GCRA it was taken from (by index
    /// into the rule's limits): what their refunds carry.
    pub marks: Vec<(usize, Mark)>,
}

/// A concurrency permit a stream holds until it ends: in the store (released
/// and renewed there), or, taken while the store failed, in this proxy's
/// local share.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permit {
    /// The rule (index into the configuration's rules).
    pub rule: usize,
    /// Its concurrency limit (index into the rule's limits).
    pub limit: usize,
    /// The escaped identity.
    pub identity: String,
    /// Its hash slot.
    pub slot: HashSlot,
    /// The permit's id in the store.
    pub id: PermitId,
    /// The identity's digest (the local share's fingerprint).
    pub digest: IdentityDigest,
    /// Held in the local share, not in the store.
    pub local: bool,
}

impl Permit {
    /// Its limit's entry in the local share.
    pub fn local_share(&self, config: &Config) -> Option<FallbackLimit> {
        let rule = config.rules.get(self.rule)?;
        Some(fallback_limit(rule, rule.limits.get(self.limit)?, &self.digest, 1))
    }

    /// Gives back a permit of the local share (`local`), counted as released.
    pub fn release_locally<S, M>(&self, config: &Config, shared: &S, metrics: &M, now: Instant)
    where
        S: SharedData + ?Sized,
        M: Metrics + ?Sized,
    {
        if let Some(share) = self.local_share(config) {
            crate::fallback::release_permit(shared, config.deny_cache.slots, &share, now);
        }
        metrics.count(self.rule, Event::PermitReleased);
    }
}

/// Limit `l` of `rule` in the local fallback, for the identity of `digest`,
/// taking `cost` units (a concurrency limit: streams held, not a window).
pub fn fallback_limit(rule: &Rule, l: &Limit, digest: &IdentityDigest, cost: u64) -> FallbackLimit {
    FallbackLimit {
        fingerprint: crate::fingerprint::entry_fingerprint(l.fingerprint, digest),
        share: l.spec.limit / rule.fleet_size.get(),
        window_ms: l.spec.window_ms,
        cost,
        hold_ms: (l.spec.algorithm == Algorithm::Concurrency).then_some(l.spec.window_ms),
    }
}

/// What to do after `begin`.
#[derive(Debug)]
pub enum Start {
    /// Decided without the store (no rule applies, a refusal, a cached
    /// denial, a lease, or the breaker is open).
    Done(Decided),
    /// Make these calls, then feed each result to `Pending::on_reply`.
    Wait(Pending),
}

/// One limit of a planned decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedLimit {
    /// The rule (index into the configuration's rules).
    pub rule: usize,
    /// The limit (index into the rule's limits).
    pub limit: usize,
    /// What the script does with it.
    pub op: Op,
    /// fixed_window staggered per client: this client's window offset.
    pub offset_ms: Option<u64>,
}

/// One planned decision: every limit of the rules of one identity.
#[derive(Clone, Debug)]
pub struct PlannedDecision {
    /// Indices of the rules it decides, in order.
    pub rules: Vec<usize>,
    /// The escaped identity (the keys' hash tag).
    pub identity: String,
    /// The limits, rule by rule, in order.
    pub limits: Vec<PlannedLimit>,
    /// The Redis Cluster hash slot of its keys (its slot breaker).
    pub slot: HashSlot,
    /// The identity's digest, for deny-cache and fallback fingerprints.
    digest: IdentityDigest,
    /// Its partition key, when a rule of it sends the IETF fields.
    partition: Option<PartitionKey>,
    /// Its lease, when its rules take leases (none was live here).
    pub lease: Option<LeaseCandidate>,
    result: Option<Result<Vec<LimitOutcome>, StoreError>>,
    /// The clock the store decided it on (its keys' windows): where a
    /// reservation it took is given back.
    clock: Option<Instant>,
    /// The price of each priced rule (by index), from the request's model.
    prices: Vec<(usize, Arc<Price>)>,
    /// The marks of the buckets its reservations were taken from (by index
    /// into `limits`), once the store admitted it.
    marks: Vec<(usize, Mark)>,
}

impl PlannedDecision {
    /// The charge of rule `r` on this decision's identity.
    fn charge(&self, r: usize, rule: &Rule, reservation: Option<Reservation>) -> Charge {
        let limits = self
            .limits
            .iter()
            .filter(|l| l.rule == r && rule.limits.get(l.limit).is_some_and(|x| x.counts == Counts::Cost))
            .map(|l| (l.limit, l.offset_ms))
            .collect();
        let price = self.prices.iter().find(|(p, _)| *p == r).map(|(_, price)| price.clone());
        Charge {
            rule: r,
            identity: self.identity.clone(),
            slot: self.slot,
            limits,
            digest: self.digest,
            reservation,
            price,
        }
    }

    /// What it reserves if the store admits it (decided on `clock`), one
    /// charge per rule in reservation mode: to give back whole when its
    /// stream is gone before the answer (the request never went on).
    pub fn reservations(&self, config: &Config, clock: Instant) -> Vec<Charge> {
        let mut out = Vec::new();
        for &r in &self.rules {
            let Some(rule) = config.rules.get(r) else { continue };
            if let Some(units) = self.reserved_units(r, rule) {
                out.push(self.charge(r, rule, Some(Reservation { units, at: clock, marks: self.marks_of(r) })));
            }
        }
        out
    }

    /// Whether it takes a reservation if the store admits it.
    pub fn reserves(&self, config: &Config) -> bool {
        self.rules.iter().any(|&r| config.rules.get(r).is_some_and(|rule| self.reserved_units(r, rule).is_some()))
    }

    /// The units rule `r` (in reservation mode) asks its limits counting cost.
    pub(super) fn reserved_units(&self, r: usize, rule: &Rule) -> Option<u64> {
        rule.cost.reservation()?;
        let cost = |l: &&PlannedLimit| rule.limits.get(l.limit).is_some_and(|x| x.counts == Counts::Cost);
        self.limits.iter().filter(|l| l.rule == r).find(cost).map(|l| l.op.amount())
    }

    /// The marks of rule `r`'s buckets, by index into the rule's limits.
    fn marks_of(&self, r: usize) -> Vec<(usize, Mark)> {
        let limits = self.marks.iter().filter_map(|&(i, m)| self.limits.get(i).map(|l| (l, m)));
        limits.filter(|(l, _)| l.rule == r).map(|(l, m)| (l.limit, m)).collect()
    }

    /// Takes the marks out of the store's `outcomes` of this decision: an
    /// admitted reservation of a bucket says its mark in place of its
    /// remaining, reset and retry; the mark is kept, and the outcome made
    /// what a use's would be (`Mark::of`).
    pub fn take_marks(&mut self, config: &Config, outcomes: &mut [LimitOutcome]) {
        for (i, (l, o)) in self.limits.iter().zip(outcomes.iter_mut()).enumerate() {
            let Op::Reserve(_) = l.op else { continue };
            let Some(limit) = config.rules.get(l.rule).and_then(|r| r.limits.get(l.limit)) else { continue };
            // The bucket as an override had the store decide it.
            let spec = o.overridden.and_then(|v| limit.spec.overridden(v.limit)).unwrap_or(limit.spec);
            if let Some((outcome, mark)) = Mark::of(&spec, o) {
                *o = outcome;
                self.marks.push((i, mark));
            }
        }
    }

    /// Whether the store answered and admitted it.
    fn admitted(&self) -> bool {
        matches!(&self.result, Some(Ok(outcomes)) if outcomes.iter().all(|o| o.allowed))
    }

    /// What the store reserved for rule `r` (in reservation mode) if it
    /// admitted this decision.
    fn reservation(&self, r: usize, rule: &Rule) -> Option<Reservation> {
        let at = self.clock.filter(|_| self.admitted())?;
        Some(Reservation { units: self.reserved_units(r, rule)?, at, marks: self.marks_of(r) })
    }

    /// The units limit `i` of rule `r` asks of the store: the request's
    /// own reservation, or what every request of the rule asks.
    fn amount(&self, r: usize, i: usize, rule: &Rule, l: &Limit) -> u64 {
        match self.limits.iter().find(|p| p.rule == r && p.limit == i) {
            Some(p) if rule.cost.reservation().is_some() && l.counts == Counts::Cost => p.op.amount(),
            _ => rule.request_amount(l),
        }
    }

    /// The permits it takes in the store if it is admitted (`local`: or in
    /// the local share, when its store failed).
    pub fn takes(&self, local: bool) -> impl Iterator<Item = Permit> + '_ {
        self.limits.iter().filter_map(move |l| match l.op {
            Op::Take(id, _) => Some(Permit {
                rule: l.rule,
                limit: l.limit,
                identity: self.identity.clone(),
                slot: self.slot,
                id,
                digest: self.digest,
                local,
            }),
            _ => None,
        })
    }

    /// Whether the decision is still to be made (a breaker may have answered it).
    pub fn is_waiting(&self) -> bool {
        self.result.is_none()
    }
}

/// One rule's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Verdict {
    /// Every limit admitted the request.
    Allowed(Vec<Shown>, DecidedBy),
    /// A limit denied it (every limit's outcome, the denied among them).
    Denied(Vec<Shown>, DecidedBy),
    FailClosed,
    Unenforced,
}

impl Verdict {
    /// The limits' outcomes, if the verdict has any.
    fn shown(&self) -> &[Shown] {
        match self {
            Verdict::Allowed(s, _) | Verdict::Denied(s, _) => s,
            _ => &[],
        }
    }

    /// What decided it.
    fn by(&self) -> DecidedBy {
        match self {
            Verdict::Allowed(_, by) | Verdict::Denied(_, by) => *by,
            Verdict::FailClosed | Verdict::Unenforced => DecidedBy::Unavailable,
        }
    }
}

mod begin;
mod body_refusal;
mod costs;
mod denial;
mod identify;
mod leases;
mod matched;
mod pending;
mod plan;
mod pricing;
mod reads;
mod reservation;
mod response_fields;
#[cfg(test)]
mod tests;
mod trace;
mod unreadable;
mod vendor_fields;
mod verdicts;

pub use begin::{begin, begin_request};
pub use body_refusal::{body_refusal, body_timeout};
use denial::is_concurrency;
pub use leases::LeaseCandidate;
pub use pending::Pending;
use std::sync::Arc;
pub use trace::{DecidedBy, Trace};
pub use verdicts::refunds_may_undo;
