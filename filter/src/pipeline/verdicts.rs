//! One rule's verdict from its store decisions (with the denials to
//! cache), or from its failure policy when the store failed (the fallback
//! bucket: its shares are this verdict, taken in shared data at once).

use super::{fallback_limit, DecidedBy, Env, Pending, PlannedDecision, Verdict};
use crate::algorithm::Algorithm;
use crate::config::{Cost, Counts, FailureMode, Limit, Rule};
use crate::deny_cache::DenyEntry;
use crate::fallback::{self, FallbackLimit};
use crate::fingerprint::entry_fingerprint;
use crate::metrics::{Event, Metrics};
use crate::outcome::LimitOutcome;
use crate::response::{PolicyRef, Shown};
use crate::shared::SharedData;

impl Pending {
    /// The verdict of rule `r` from its limits' outcomes, and the denials
    /// to remember in the deny cache (entry fingerprint, entry); `consumed`
    /// tells whether its call admitted the request (else an allowing rule
    /// spent nothing and is not counted).
    pub(super) fn store_verdict<S, M>(
        &self,
        env: &Env<'_, S, M>,
        r: usize,
        d: &PlannedDecision,
        outcomes: &[LimitOutcome],
        consumed: bool,
    ) -> (Verdict, Vec<(u64, DenyEntry)>)
    where
        S: SharedData + ?Sized,
        M: Metrics + ?Sized,
    {
        let config = env.config;
        let rule = &config.rules[r];
        let identity = &d.digest;
        let shown: Vec<Shown> = rule
            .limits
            .iter()
            .zip(outcomes)
            .enumerate()
            .map(|(i, (l, outcome))| Shown {
                limit: outcome.limit_or(l.spec.limit),
                outcome: *outcome,
                policy: Some(PolicyRef { rule: r, limit: i, partition: d.partition }),
            })
            .collect();
        let concurrency = |l: &crate::config::Limit| l.spec.algorithm == Algorithm::Concurrency;
        if shown.iter().all(|s| s.outcome.allowed) {
            if consumed {
                env.metrics.count(r, Event::Allowed);
                if rule.limits.iter().any(concurrency) {
                    env.metrics.count(r, Event::PermitTaken);
                }
            }
            return (Verdict::Allowed(shown, DecidedBy::Store), Vec::new());
        }
        if rule.limits.iter().zip(&shown).any(|(l, s)| concurrency(l) && !s.outcome.allowed) {
            env.metrics.count(r, Event::PermitRefused);
        }
        // A cost the caller names differs per request: a denial of one
        // cost says nothing of the next request's.
        let cacheable = !matches!(rule.cost, Cost::RequestHeader { .. });
        let mut denials = Vec::new();
        if config.deny_cache.enabled && cacheable {
            // A concurrency denial is never cached: a permit frees whenever a
            // stream ends, and the next request must see it. Nor is a
            // reservation's (see `refunds_may_undo`).
            let cached = |l: &&crate::config::Limit| !concurrency(l) && !refunds_may_undo(rule, l);
            for (l, s) in rule.limits.iter().zip(&shown).filter(|(l, _)| cached(l)) {
                if let (false, Some(retry)) = (s.outcome.allowed, s.outcome.retry_after_ms) {
                    if retry > 0 {
                        let within = config.overrides.map(|o| o.within);
                        let entry = DenyEntry::of(self.now, &s.outcome, retry, within);
                        denials.push((entry_fingerprint(l.fingerprint, identity), entry));
                    }
                }
            }
        }
        env.metrics.count(r, if rule.shadow { Event::ShadowDenied } else { Event::Denied });
        (Verdict::Denied(shown, DecidedBy::Store), denials)
    }

    pub(super) fn failure_verdict<S, M>(&self, env: &Env<'_, S, M>, r: usize, d: &PlannedDecision) -> Verdict
    where
        S: SharedData + ?Sized,
        M: Metrics + ?Sized,
    {
        let config = env.config;
        let rule = &config.rules[r];
        if rule.shadow {
            return Verdict::Unenforced;
        }
        if rule.failure_mode == FailureMode::Closed {
            env.metrics.count(r, Event::FailClosed);
            return Verdict::FailClosed;
        }
        let limits: Vec<FallbackLimit> = rule
            .limits
            .iter()
            .enumerate()
            .map(|(i, l)| fallback_limit(rule, l, &d.digest, d.amount(r, i, rule, l)))
            .collect();
        let outcomes = fallback::admit(env.shared, config.deny_cache.slots, &limits, self.now);
        let shown: Vec<Shown> = limits
            .iter()
            .zip(outcomes)
            .enumerate()
            .map(|(i, (l, outcome))| Shown {
                limit: l.share,
                outcome,
                policy: Some(PolicyRef { rule: r, limit: i, partition: d.partition }),
            })
            .collect();
        if shown.iter().all(|s| s.outcome.allowed) {
            env.metrics.count(r, Event::FallbackAllowed);
            if rule.limits.iter().any(|l| l.spec.algorithm == Algorithm::Concurrency) {
                env.metrics.count(r, Event::PermitTakenLocally);
            }
            Verdict::Allowed(shown, DecidedBy::Fallback)
        } else {
            env.metrics.count(r, Event::FallbackDenied);
            Verdict::Denied(shown, DecidedBy::Fallback)
        }
    }
}

/// Whether a denial by limit `l` of `rule` may stop being true before the
/// store's retry instant through refunds: a limit counting cost in
/// reservation mode refused this request's worst case against what
/// requests in flight hold, and their settlements (on any proxy) give back
/// what they did not use; a smaller request may fit at once. Such a denial
/// is never cached: the store decides each one.
pub fn refunds_may_undo(rule: &Rule, l: &Limit) -> bool {
    rule.cost.reservation().is_some() && l.counts == Counts::Cost
}
