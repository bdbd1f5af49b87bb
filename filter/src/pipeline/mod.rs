//! One request's way through the limiter, host-independent:
//! `begin` matches rules, builds identities, answers from the deny cache or
//! plans one store call per identity; `on_reply` takes each call's result;
//! when all are in, the verdict: continue (with headers), 429 or 503.

use crate::breaker::{self, Gate, Health};
use crate::call::{DecisionCall, LimitCall, Op, ScriptCall};
use crate::config::{Config, FailureMode, Rule};
use crate::decision::Decision;
use crate::deny_cache::{DenyCache, DenyEntry};
use crate::fallback::{self, FallbackLimit};
use crate::fingerprint::{entry_fingerprint, IdentityDigest};
use crate::identity::identity;
use crate::keys::cluster_slot;
use crate::metrics::{Event, Metrics};
use crate::request::{Request, RequestSource};
use crate::response::{
    most_restrictive, rate_limit_headers, too_many_requests, unavailable, Headers, LocalReply, Shown,
};
use crate::shared::SharedData;
use crate::store::StoreError;

/// The host services a request's evaluation needs.
pub struct Env<'a, S: SharedData + ?Sized, M: Metrics + ?Sized> {
    /// The configuration in force.
    pub config: &'a Config,
    /// Shared data (deny cache, fallback buckets, breaker).
    pub shared: &'a S,
    /// Counters.
    pub metrics: &'a M,
}

/// How a request ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Let it through; add these headers to the response.
    Continue(Headers),
    /// Answer it with this.
    Reply(LocalReply),
}

/// What to do after `begin`.
#[derive(Debug)]
pub enum Start {
    /// Decided without the store (no rule applies, a cached denial, or the
    /// breaker is open).
    Done(Outcome),
    /// Make these calls, then feed each result to `Pending::on_reply`.
    Wait(Pending),
}

/// One planned store call: the rules of one identity.
#[derive(Debug)]
pub struct PlannedCall {
    /// Indices of the rules it decides, in call order.
    pub rules: Vec<usize>,
    /// KEYS and ARGV for the script.
    pub script: ScriptCall,
    /// The identity's digest, for deny-cache and fallback fingerprints.
    digest: IdentityDigest,
    /// The Redis Cluster hash slot of its keys (its slot breaker).
    slot: u16,
    result: Option<Result<Vec<Decision>, StoreError>>,
}

impl PlannedCall {
    /// Whether the call is still to be made (a breaker may have answered it).
    pub fn is_waiting(&self) -> bool {
        self.result.is_none()
    }
}

/// A request waiting for its store calls.
#[derive(Debug)]
pub struct Pending {
    now_ms: u64,
    /// The calls to make, by index.
    pub calls: Vec<PlannedCall>,
    /// Outcomes known before calling (shadow rules answered from the cache).
    known: Vec<(usize, Verdict)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Verdict {
    Allowed(Vec<Shown>),
    Denied(Vec<Shown>),
    FailClosed,
    Unenforced,
}

/// Starts evaluating a request. `clock` (ms since the epoch) is read once,
/// and only if a rule applies: a request no rule matches costs no clock
/// hostcall.
pub fn begin<R, S, M>(env: &Env<'_, S, M>, source: &R, clock: impl Fn() -> u64) -> Start
where
    R: RequestSource + ?Sized,
    S: SharedData + ?Sized,
    M: Metrics + ?Sized,
{
    let read_once = std::cell::OnceCell::new();
    let now = || *read_once.get_or_init(&clock);
    let config = env.config;
    let req = Request::new(source);
    let cache = DenyCache::new(env.shared, config.deny_cache.slots);
    let mut calls = Vec::new();
    let mut known = Vec::new();
    for group in &config.groups {
        let mut matched = group.rules.iter().copied().filter(|&r| config.rules[r].matcher.matches(&req)).peekable();
        if matched.peek().is_none() {
            continue;
        }
        let Some(identity) = identity(&group.key, &req, config.xff_trusted_hops) else { continue };
        let digest = IdentityDigest::of(&identity);
        let mut to_call = Vec::new();
        for r in matched {
            let rule = &config.rules[r];
            let cached = if config.deny_cache.enabled { cached_denial(&cache, rule, &digest, now()) } else { None };
            match cached {
                None => to_call.push(r),
                Some(shown) => {
                    env.metrics.count(r, Event::DenyCacheHit);
                    if !rule.shadow {
                        env.metrics.count(r, Event::Denied);
                        return Start::Done(Outcome::Reply(too_many_requests(
                            &rule.name,
                            &shown,
                            now(),
                            config.response_headers,
                        )));
                    }
                    env.metrics.count(r, Event::ShadowDenied);
                    known.push((r, Verdict::Denied(vec![shown])));
                }
            }
        }
        if !to_call.is_empty() {
            let limits: Vec<LimitCall> = to_call
                .iter()
                .flat_map(|&r| {
                    let rule = &config.rules[r];
                    rule.limits.iter().map(move |l| LimitCall {
                        rule: &rule.name,
                        spec: l.spec,
                        op: Op::Use(rule.cost),
                        offset_ms: None,
                    })
                })
                .collect();
            let script =
                ScriptCall::new(&config.domain, now(), &[DecisionCall { identity: &identity, limits: &limits }]);
            let slot = cluster_slot(&identity);
            calls.push(PlannedCall { rules: to_call, script, digest, slot, result: None });
        }
    }
    if calls.is_empty() && known.is_empty() {
        return Start::Done(Outcome::Continue(Vec::new()));
    }
    let now_ms = now();
    let mut pending = Pending { now_ms, calls, known };
    if pending.calls.is_empty() {
        return Start::Done(pending.finish(env));
    }
    let probe_ms = config.store.timeout_ms.saturating_mul(2).saturating_add(1000);
    for call in &mut pending.calls {
        if breaker::gate(env.shared, &config.store.breaker, call.slot, now_ms, probe_ms) == Gate::Open {
            call.result = Some(Err(StoreError::BreakerOpen));
        }
    }
    if pending.calls.iter().all(|c| !c.is_waiting()) {
        return Start::Done(pending.finish(env));
    }
    Start::Wait(pending)
}

/// The cached denial of any of `rule`'s limits for `identity`, if one is in force.
fn cached_denial<S: SharedData + ?Sized>(
    cache: &DenyCache<'_, S>,
    rule: &Rule,
    identity: &IdentityDigest,
    now_ms: u64,
) -> Option<Shown> {
    rule.limits.iter().find_map(|l| {
        let e = cache.lookup(entry_fingerprint(l.fingerprint, identity), now_ms)?;
        Some(Shown {
            limit: l.spec.limit,
            decision: Decision {
                allowed: false,
                remaining: e.remaining,
                reset_ms: e.reset_at_ms.saturating_sub(now_ms),
                retry_after_ms: Some(e.deny_until_ms - now_ms),
            },
        })
    })
}

impl Pending {
    /// Takes the result of call `index`; the outcome once every call is in.
    /// A call whose result is already in is ignored.
    pub fn on_reply<S, M>(
        &mut self,
        env: &Env<'_, S, M>,
        index: usize,
        result: Result<Vec<Decision>, StoreError>,
        now_ms: u64,
    ) -> Option<Outcome>
    where
        S: SharedData + ?Sized,
        M: Metrics + ?Sized,
    {
        let call = self.calls.get_mut(index)?;
        if call.result.is_some() {
            return None;
        }
        breaker::record(env.shared, &env.config.store.breaker, call.slot, now_ms, Health::of(&result));
        call.result = Some(result);
        self.calls.iter().all(|c| c.result.is_some()).then(|| self.finish(env))
    }

    fn finish<S, M>(&mut self, env: &Env<'_, S, M>) -> Outcome
    where
        S: SharedData + ?Sized,
        M: Metrics + ?Sized,
    {
        let config = env.config;
        let now = self.now_ms;
        let mut verdicts = std::mem::take(&mut self.known);
        for call in &self.calls {
            match &call.result {
                Some(Ok(decisions)) => {
                    // The script is all or nothing: one denial and nobody consumed.
                    let consumed = decisions.iter().all(|d| d.allowed);
                    let mut rest = decisions.as_slice();
                    for &r in &call.rules {
                        let rule = &config.rules[r];
                        let (mine, tail) = rest.split_at(rule.limits.len().min(rest.len()));
                        rest = tail;
                        verdicts.push((r, self.store_verdict(env, r, &call.digest, mine, consumed)));
                    }
                }
                Some(Err(e)) => {
                    for &r in &call.rules {
                        if *e != StoreError::BreakerOpen {
                            env.metrics.count(r, Event::StoreError);
                        }
                        verdicts.push((r, self.failure_verdict(env, r, &call.digest)));
                    }
                }
                // finish runs once every call has its result.
                None => {}
            }
        }
        // A real denial is a 429; a fail-closed store failure, a 503 only
        // when nothing denied; never one for the other.
        let denied = verdicts.iter().filter_map(|(r, v)| match v {
            Verdict::Denied(shown) if !config.rules[*r].shadow => Some((r, shown)),
            _ => None,
        });
        let worst = denied
            .filter_map(|(r, shown)| most_restrictive(shown).map(|s| (*r, s)))
            .max_by_key(|(_, s)| (s.decision.retry_after_ms.unwrap_or(u64::MAX), s.decision.reset_ms));
        if let Some((r, shown)) = worst {
            return Outcome::Reply(too_many_requests(&config.rules[r].name, &shown, now, config.response_headers));
        }
        if verdicts.iter().any(|(_, v)| *v == Verdict::FailClosed) {
            return Outcome::Reply(unavailable());
        }
        if !config.response_headers {
            return Outcome::Continue(Vec::new());
        }
        let all: Vec<Shown> = verdicts
            .iter()
            .flat_map(|(_, v)| match v {
                Verdict::Allowed(s) | Verdict::Denied(s) => s.as_slice(),
                _ => &[],
            })
            .copied()
            .collect();
        Outcome::Continue(most_restrictive(&all).map(|s| rate_limit_headers(&s, now)).unwrap_or_default())
    }

    /// The verdict of rule `r` from its decisions; `consumed` tells whether
    /// its call admitted the request (else an allowing rule spent nothing and
    /// is not counted).
    fn store_verdict<S, M>(
        &self,
        env: &Env<'_, S, M>,
        r: usize,
        identity: &IdentityDigest,
        decisions: &[Decision],
        consumed: bool,
    ) -> Verdict
    where
        S: SharedData + ?Sized,
        M: Metrics + ?Sized,
    {
        let config = env.config;
        let rule = &config.rules[r];
        let shown: Vec<Shown> =
            rule.limits.iter().zip(decisions).map(|(l, d)| Shown { limit: l.spec.limit, decision: *d }).collect();
        if shown.iter().all(|s| s.decision.allowed) {
            if consumed {
                env.metrics.count(r, Event::Allowed);
            }
            return Verdict::Allowed(shown);
        }
        if config.deny_cache.enabled {
            let cache = DenyCache::new(env.shared, config.deny_cache.slots);
            for (l, s) in rule.limits.iter().zip(&shown) {
                if let (false, Some(retry)) = (s.decision.allowed, s.decision.retry_after_ms) {
                    if retry > 0 {
                        let entry = DenyEntry {
                            deny_until_ms: self.now_ms + retry,
                            reset_at_ms: self.now_ms + s.decision.reset_ms,
                            remaining: s.decision.remaining,
                        };
                        cache.remember(entry_fingerprint(l.fingerprint, identity), entry);
                    }
                }
            }
        }
        env.metrics.count(r, if rule.shadow { Event::ShadowDenied } else { Event::Denied });
        Verdict::Denied(shown.into_iter().filter(|s| !s.decision.allowed).collect())
    }

    fn failure_verdict<S, M>(&self, env: &Env<'_, S, M>, r: usize, identity: &IdentityDigest) -> Verdict
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
            .map(|l| FallbackLimit {
                fingerprint: entry_fingerprint(l.fingerprint, identity),
                share: l.spec.limit / rule.fleet_size,
                window_ms: l.spec.window_ms,
            })
            .collect();
        let decisions = fallback::admit(env.shared, config.deny_cache.slots, &limits, rule.cost, self.now_ms);
        let shown: Vec<Shown> =
            limits.iter().zip(decisions).map(|(l, d)| Shown { limit: l.share, decision: d }).collect();
        if shown.iter().all(|s| s.decision.allowed) {
            env.metrics.count(r, Event::FallbackAllowed);
            Verdict::Allowed(shown)
        } else {
            env.metrics.count(r, Event::FallbackDenied);
            Verdict::Denied(shown.into_iter().filter(|s| !s.decision.allowed).collect())
        }
    }
}

#[cfg(test)]
mod tests;
