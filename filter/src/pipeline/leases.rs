//! Where a request meets leases: whether a planned decision's rules take
//! one (every rule of it must), its fingerprint, and a request admitted
//! from a live lease in the proxy (a draw from the proxy's table), with
//! the fields it would have had from the store.

use super::plan::plan_limits;
use super::{DecidedBy, Env, PlannedLimit, Verdict};
use crate::algorithm::Algorithm;
use crate::config::Config;
use crate::fingerprint::{combine, combine_more, entry_fingerprint, IdentityDigest};
use crate::lease::{LeaseParams, LeaseRecord, LeasedRequest, Span};
use crate::metrics::{Event, Metrics};
use crate::outcome::LimitOutcome;
use crate::ratelimit_fields::PartitionKey;
use crate::response::{PolicyRef, Shown};
use crate::shared::SharedData;
use crate::spec::Op;
use crate::time::Instant;

/// A decision whose rules take leases: what identifies its lease, and what
/// one is asked and kept with. Built for every request of a leased rule,
/// so it holds only what spending a lease needs; the rest is derived when
/// one is asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseCandidate {
    /// The lease's fingerprint: the identity, and every limit of the
    /// decision with the units a request takes from it.
    pub fingerprint: u64,
    /// The tightest settings of its rules.
    pub params: LeaseParams,
    /// The decision's limits, as a request uses them (each `Op::Use`).
    pub limits: Vec<PlannedLimit>,
}

impl LeaseCandidate {
    /// Per limit, in the decision's order: units one request takes.
    pub fn per_request(&self) -> impl Iterator<Item = u64> + '_ {
        self.limits.iter().map(|l| match l.op {
            Op::Use(units) => units,
            _ => 0,
        })
    }

    /// Per limit: what ends leased units.
    pub fn spans(&self, config: &Config) -> Vec<Span> {
        let span = |l: &PlannedLimit| {
            let limit = config.rules.get(l.rule)?.limits.get(l.limit)?;
            Some(match limit.spec.algorithm {
                Algorithm::SlidingWindow | Algorithm::FixedWindow => {
                    Span::Window { window_ms: limit.spec.window_ms, offset_ms: l.offset_ms.unwrap_or(0) }
                }
                _ => Span::Tokens { window_ms: limit.spec.window_ms, limit: limit.spec.limit },
            })
        };
        // A limit it cannot find: tokens that never refill to a known
        // capacity, so the lease ends when granted (never admits wrongly).
        self.limits.iter().map(|l| span(l).unwrap_or(Span::Tokens { window_ms: u64::MAX, limit: 1 })).collect()
    }
}

/// The lease candidate of a decision of `rules` for `identity`; `None`
/// unless every rule takes leases (leased rules cost a fixed amount, and
/// every limit is used, not only checked, at request time).
pub(super) fn candidate_for(config: &Config, rules: &[usize], identity: &IdentityDigest) -> Option<LeaseCandidate> {
    let mut params = LeaseParams { max_units: u64::MAX, max_age_ms: u64::MAX, fleet_size: 1 };
    let mut limits = Vec::new();
    for &r in rules {
        let rule = config.rules.get(r)?;
        let lease = rule.lease?;
        params.max_units = params.max_units.min(lease.max_units);
        params.max_age_ms = params.max_age_ms.min(lease.max_age_ms);
        params.fleet_size = params.fleet_size.max(rule.fleet_size.get());
        // Leased rules have no concurrency limit: no permit id is drawn.
        plan_limits(&mut limits, r, rule, rule.cost.max_at_request(), identity, 0);
    }
    if limits.is_empty() {
        return None;
    }
    // "lease" as the seed: never equal to the same limits' other fingerprints.
    let mut fingerprint = combine(0x006c_6561_7365, &[]);
    for l in &limits {
        let Op::Use(amount) = l.op else { return None };
        let limit = config.rules.get(l.rule)?.limits.get(l.limit)?;
        fingerprint = combine_more(fingerprint, &[entry_fingerprint(limit.fingerprint, identity), amount]);
    }
    Some(LeaseCandidate { fingerprint, params, limits })
}

/// The verdicts of `rules` for a request the worker drew from `lease` at
/// `now_ms` (counted: allowed, by a lease).
pub(super) fn drawn<S, M>(
    env: &Env<'_, S, M>,
    rules: &[usize],
    c: &LeaseCandidate,
    lease: &LeaseRecord,
    partition: Option<PartitionKey>,
    now: Instant,
) -> Vec<(usize, Verdict)>
where
    S: SharedData + ?Sized,
    M: Metrics + ?Sized,
{
    for &r in rules {
        env.metrics.count(r, Event::Allowed);
        env.metrics.count(r, Event::LeaseAllowed);
    }
    let held = LeasedRequest { requests_left: lease.requests_left, limits: &lease.limits };
    admitted(env.config, rules, &c.limits, held, partition, now)
}

/// The verdicts of `rules` for a request admitted from `lease` at
/// `now_ms`: every limit allowed, `remaining` what the store held outside
/// the lease at its grant plus what the lease still holds (never more than
/// the store could have granted then; capped at the limit's capacity),
/// `reset` as exact as the store's.
fn admitted(
    config: &Config,
    rules: &[usize],
    limits: &[PlannedLimit],
    lease: LeasedRequest<'_>,
    partition: Option<PartitionKey>,
    now: Instant,
) -> Vec<(usize, Verdict)> {
    let now_ms = now.ms();
    let mut out: Vec<(usize, Verdict)> =
        rules.iter().map(|&r| (r, Verdict::Allowed(Vec::new(), DecidedBy::Lease))).collect();
    for (l, leased) in limits.iter().zip(lease.limits) {
        let Some(limit) = config.rules.get(l.rule).and_then(|r| r.limits.get(l.limit)) else { continue };
        // As an operator's override had the store grant it, if one did.
        let spec = Some(leased.limit).filter(|&n| n > 0).and_then(|n| limit.spec.overridden(n)).unwrap_or(limit.spec);
        let capacity = match spec.algorithm {
            Algorithm::TokenBucket | Algorithm::Gcra => spec.burst,
            _ => spec.limit,
        };
        let in_lease = lease.requests_left.saturating_mul(leased.per_request);
        let shown = Shown {
            limit: spec.limit,
            outcome: LimitOutcome {
                allowed: true,
                remaining: leased.remaining_at_grant.saturating_add(in_lease).min(capacity),
                reset_ms: leased.reset_at_ms.saturating_sub(now_ms),
                retry_after_ms: Some(0),
                overridden: None,
            },
            policy: Some(PolicyRef { rule: l.rule, limit: l.limit, partition }),
        };
        if let Some((_, Verdict::Allowed(v, _))) = out.iter_mut().find(|(r, _)| *r == l.rule) {
            v.push(shown);
        }
    }
    out
}
