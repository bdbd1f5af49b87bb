//! A request waiting for its store decisions: each decision's result as
//! it comes, and once all are in, the verdict and its effects.

use super::denial::refusal;
use super::response_fields::response_headers;
use super::{Charge, Decided, DecidedBy, Effects, Env, Outcome, Permit, PlannedDecision, Taken, Trace, Verdict};
use crate::config::{Config, FailureMode};
use crate::metrics::{Event, Metrics};
use crate::outcome::LimitOutcome;
use crate::response::{most_restrictive, unavailable, Shown};
use crate::shared::SharedData;
use crate::store::StoreError;
use crate::time::Instant;

/// A request waiting for its store decisions.
#[derive(Debug)]
pub struct Pending {
    pub(super) now: Instant,
    /// The decisions to make, by index.
    pub decisions: Vec<PlannedDecision>,
    /// Outcomes known before calling (leases, shadow rules answered from
    /// the cache).
    known: Vec<(usize, Verdict)>,
}

impl Pending {
    /// A request planned at `now_ms`: its decisions, and what is known.
    pub(super) fn new(now: Instant, decisions: Vec<PlannedDecision>, known: Vec<(usize, Verdict)>) -> Pending {
        Pending { now, decisions, known }
    }

    /// Takes the result of decision `index` (one `LimitOutcome` per limit, in
    /// order); the outcome once every decision is in. A decision whose
    /// result is already in is ignored. (The breakers are the caller's: a
    /// store call that carried many decisions counts once.)
    /// Decision `index` is decided in a call on `clock` (the caller's
    /// clock the call carries).
    pub fn decided_on(&mut self, index: usize, clock: Instant) {
        if let Some(d) = self.decisions.get_mut(index) {
            d.clock = Some(clock);
        }
    }

    pub fn on_reply<S, M>(
        &mut self,
        env: &Env<'_, S, M>,
        index: usize,
        result: Result<Vec<LimitOutcome>, StoreError>,
    ) -> Option<Decided>
    where
        S: SharedData + ?Sized,
        M: Metrics + ?Sized,
    {
        let d = self.decisions.get_mut(index)?;
        if d.result.is_some() {
            return None;
        }
        // A reply that does not cover every limit decided nothing (an
        // empty one would otherwise read as "all allowed").
        let result = match result {
            Ok(v) if v.len() != d.limits.len() => {
                Err(StoreError::Malformed("the reply does not cover the decision's limits"))
            }
            Ok(mut v) => {
                d.take_marks(env.config, &mut v);
                Ok(v)
            }
            other => other,
        };
        d.result = Some(result);
        self.decisions.iter().all(|d| d.result.is_some()).then(|| self.finish(env))
    }

    pub(super) fn finish<S, M>(&mut self, env: &Env<'_, S, M>) -> Decided
    where
        S: SharedData + ?Sized,
        M: Metrics + ?Sized,
    {
        let config = env.config;
        let now = self.now;
        // Permits a decision whose answer was lost may hold all the same:
        // released, to be sure (releasing one never taken changes nothing).
        let mut effects =
            Effects { give_back: Taken { permits: self.maybe_taken(), ..Taken::default() }, ..Effects::default() };
        let mut verdicts = std::mem::take(&mut self.known);
        for d in &self.decisions {
            match &d.result {
                Some(Ok(decisions)) => {
                    // The script is all or nothing: one denial and nobody consumed.
                    let consumed = decisions.iter().all(|d| d.allowed);
                    let mut rest = decisions.as_slice();
                    for &r in &d.rules {
                        let rule = &config.rules[r];
                        let (mine, tail) = rest.split_at(rule.limits.len().min(rest.len()));
                        rest = tail;
                        let (verdict, denials) = self.store_verdict(env, r, d, mine, consumed);
                        effects.denials.extend(denials);
                        verdicts.push((r, verdict));
                    }
                }
                Some(Err(e)) => {
                    for &r in &d.rules {
                        match e {
                            // Counted where it was found.
                            StoreError::BreakerOpen | StoreError::RequestUnreadable => {}
                            StoreError::Overloaded => env.metrics.count(r, Event::Overloaded),
                            _ => env.metrics.count(r, Event::StoreError),
                        }
                        verdicts.push((r, self.failure_verdict(env, r, d)));
                    }
                }
                // finish runs once every decision has its result.
                None => {}
            }
        }
        // A real denial is a 429; a fail-closed store failure, a 503 only
        // when nothing denied; never one for the other.
        let denied = verdicts.iter().filter_map(|(r, v)| match v {
            Verdict::Denied(shown, _) if !config.rules[*r].shadow => Some((r, shown)),
            _ => None,
        });
        // A client an operator blocks is refused as blocked whatever else denied it.
        let worst = denied
            .filter_map(|(r, shown)| {
                let blocked = shown.iter().find(|s| s.outcome.blocked()).copied();
                blocked.or_else(|| most_restrictive(shown)).map(|s| (*r, s))
            })
            .max_by_key(|(_, s)| {
                (s.outcome.blocked(), s.outcome.retry_after_ms.unwrap_or(u64::MAX), s.outcome.reset_ms)
            });
        let permits = self.permits(config, &verdicts);
        let refusal = match worst {
            Some((r, shown)) => {
                let all: Vec<Shown> = verdicts
                    .iter()
                    .filter(|(r, _)| !config.rules[*r].shadow)
                    .flat_map(|(_, v)| v.shown().iter().copied())
                    .collect();
                let by = verdicts.iter().find(|(v, _)| *v == r).map_or(DecidedBy::Store, |(_, v)| v.by());
                Some((refusal(config, r, &shown, &all, now, env.random), self.trace(config, r, by, Some(shown))))
            }
            None => verdicts
                .iter()
                .find(|(_, v)| *v == Verdict::FailClosed)
                .map(|&(r, _)| (unavailable(), self.trace(config, r, DecidedBy::Unavailable, None))),
        };
        if let Some((reply, trace)) = refusal {
            // Refused after all: what the store or the local share gave it goes back.
            effects.give_back.permits.extend(permits);
            effects.give_back.reservations = self.reserved_so_far(config);
            return Decided { outcome: Outcome::Reply(reply), effects, trace: Some(Box::new(trace)) };
        }
        let charges = self.charges(config, &verdicts);
        let trace = self.admitted_trace(config, &verdicts).map(Box::new);
        let outcome = Outcome::Continue(response_headers(config, &verdicts, now), charges, permits);
        Decided { outcome, effects, trace }
    }

    /// The trace of rule `r` decided by `by` through `shown`, with the
    /// reservation the request asked of it.
    fn trace(&self, config: &Config, r: usize, by: DecidedBy, shown: Option<Shown>) -> Trace {
        let reservation = config.rules.get(r).and_then(|rule| {
            let d = self.decisions.iter().find(|d| d.rules.contains(&r))?;
            d.reserved_units(r, rule)
        });
        Trace { rule: r, by, shown, reservation }
    }

    /// The trace of a request let through: its most restrictive limit among
    /// the enforced rules' (the shadow rules' when only they applied; a
    /// concurrency limit only when no rate limit applied, as the response's
    /// fields), or the first rule when none has one (a shadow rule whose
    /// store failed).
    fn admitted_trace(&self, config: &Config, verdicts: &[(usize, Verdict)]) -> Option<Trace> {
        let enforced = |(r, _): &&(usize, Verdict)| !config.rules[*r].shadow;
        let pick = |of: &[&(usize, Verdict)]| {
            let shown: Vec<Shown> = of.iter().flat_map(|(_, v)| v.shown().iter().copied()).collect();
            let rates: Vec<Shown> = shown.iter().copied().filter(|s| !super::is_concurrency(config, s)).collect();
            let worst = most_restrictive(&rates).or_else(|| most_restrictive(&shown))?;
            let r = worst.policy.map(|p| p.rule)?;
            let by = of.iter().find(|(v, _)| *v == r).map(|(_, v)| v.by())?;
            Some(self.trace(config, r, by, Some(worst)))
        };
        let all: Vec<&(usize, Verdict)> = verdicts.iter().collect();
        let mine: Vec<&(usize, Verdict)> = verdicts.iter().filter(enforced).collect();
        pick(&mine).or_else(|| pick(&all)).or_else(|| {
            let (r, v) = verdicts.first()?;
            Some(self.trace(config, *r, v.by(), None))
        })
    }

    /// What the store already gave decisions that answered (and may have
    /// given those whose answer was lost), while others are still out:
    /// what a stream that ends now gives back.
    pub fn taken(&self, config: &Config) -> Taken {
        let mut permits: Vec<Permit> =
            self.decisions.iter().filter(|d| d.admitted()).flat_map(|d| d.takes(false)).collect();
        permits.extend(self.maybe_taken());
        Taken { permits, reservations: self.reserved_so_far(config) }
    }

    /// Permits decisions whose answer was lost may hold.
    fn maybe_taken(&self) -> Vec<Permit> {
        self.decisions
            .iter()
            .filter(|d| matches!(&d.result, Some(Err(e)) if e.may_have_run()))
            .flat_map(|d| d.takes(false))
            .collect()
    }

    /// Reservations the store already took for decisions that answered
    /// (admitted): what a request refused after all, or a stream that ends
    /// now, gives back whole.
    fn reserved_so_far(&self, config: &Config) -> Vec<Charge> {
        let decided = |d: &PlannedDecision| d.clock.map(|clock| d.reservations(config, clock));
        self.decisions.iter().filter(|d| d.admitted()).filter_map(decided).flatten().collect()
    }

    /// The concurrency permits a request let through holds: each taken in
    /// the store by a decision that admitted, or in the local share by a
    /// rule whose store failed and whose fallback admitted.
    fn permits(&self, config: &Config, verdicts: &[(usize, Verdict)]) -> Vec<Permit> {
        let mut out = Vec::new();
        for d in &self.decisions {
            let (local, admitted) = match &d.result {
                Some(Ok(outcomes)) => (false, outcomes.iter().all(|o| o.allowed)),
                Some(Err(_)) => (true, false),
                None => continue,
            };
            out.extend(d.takes(local).filter(|h| {
                let rule = &config.rules[h.rule];
                let fallback_admitted = local
                    && !rule.shadow
                    && rule.failure_mode == FailureMode::Open
                    && verdicts.iter().any(|(v, verdict)| *v == h.rule && matches!(verdict, Verdict::Allowed(..)));
                admitted || fallback_admitted
            }));
        }
        out
    }

    /// The charges a request let through owes: every allowed rule whose
    /// cost is known only after the response.
    fn charges(&self, config: &Config, verdicts: &[(usize, Verdict)]) -> Vec<Charge> {
        let mut out = Vec::new();
        for d in &self.decisions {
            for &r in &d.rules {
                let rule = &config.rules[r];
                let allowed = verdicts.iter().any(|(v, verdict)| *v == r && matches!(verdict, Verdict::Allowed(..)));
                if !rule.cost.after_response() || !allowed {
                    continue;
                }
                out.push(d.charge(r, rule, d.reservation(r, rule)));
            }
        }
        out
    }
}
