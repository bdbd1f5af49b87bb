//! A request's way to its decisions, read top to bottom: for each key
//! group of rules, the rules that apply (`matched`), the client's identity
//! (`identify`), a live lease (`leases`: the worker draws), the refusals
//! that need no store (`costs`), the deny cache (`reads`), the store
//! decision (`plan`); then the breakers (the worker claims a probe). A
//! live lease comes before the deny cache: its units are paid for, so a
//! denial this proxy cached since (the store had none left outside
//! leases) must not strand them.

use crate::time::Instant;
use std::cell::OnceCell;

use super::costs::{cost_of, RuleCost};
use super::denial::refusal;
use super::identify::{identify, Who};
use super::leases::{candidate_for, drawn};
use super::matched::matched;
use super::plan::{count_local_streams, plan_limits};
use super::reads::cached_denial;
use super::{
    unreadable, Claims, Decided, DecidedBy, Effects, Env, Outcome, Pending, PlannedDecision, Start, Trace, Verdict,
};
use crate::breaker::Gate;
use crate::config::KeyGroup;
use crate::deny_cache::DenyCache;
use crate::keys::cluster_slot;
use crate::metrics::{Event, Metrics};
use crate::request::{Request, RequestSource};
use crate::shared::SharedData;
use crate::store::StoreError;

/// What one key group makes of a request.
enum Group {
    /// None of its rules applies (or a key part is absent).
    Skip,
    /// Decided without the store: verdicts known now.
    Known(Vec<(usize, Verdict)>),
    /// A store decision, and the verdicts known now (shadow rules denied
    /// from the cache).
    Decide(Box<PlannedDecision>, Vec<(usize, Verdict)>),
}

/// Starts evaluating a request. `clock` is read once,
/// and only if a rule applies: a request no rule matches costs no clock
/// hostcall.
pub fn begin<R, S, M>(env: &Env<'_, S, M>, source: &R, clock: impl Fn() -> Instant, claims: &mut dyn Claims) -> Start
where
    R: RequestSource + ?Sized,
    S: SharedData + ?Sized,
    M: Metrics + ?Sized,
{
    begin_request(env, &Request::new(source), clock, claims)
}

/// `begin` for a request already being read (its caller reads it further).
pub fn begin_request<R, S, M>(
    env: &Env<'_, S, M>,
    req: &Request<'_, R>,
    clock: impl Fn() -> Instant,
    claims: &mut dyn Claims,
) -> Start
where
    R: RequestSource + ?Sized,
    S: SharedData + ?Sized,
    M: Metrics + ?Sized,
{
    let read_once = OnceCell::new();
    let now = || *read_once.get_or_init(&clock);
    if req.headers().is_unreadable() {
        return Start::Done(unreadable::outcome(env, now()));
    }
    let mut decisions = Vec::new();
    let mut known = Vec::new();
    for group in &env.config.groups {
        match plan_group(env, req, group, &now, claims) {
            Err(decided) => return Start::Done(*decided),
            Ok(Group::Skip) => {}
            Ok(Group::Known(verdicts)) => known.extend(verdicts),
            Ok(Group::Decide(d, verdicts)) => {
                known.extend(verdicts);
                decisions.push(*d);
            }
        }
    }
    if decisions.is_empty() && known.is_empty() {
        return Start::Done(Decided::pass());
    }
    let mut pending = Pending::new(now(), decisions, known);
    for d in &mut pending.decisions {
        if claims.gate(d.slot, now()) == Gate::Open {
            d.result = Some(Err(StoreError::BreakerOpen));
        }
    }
    if pending.decisions.iter().all(|d| !d.is_waiting()) {
        return Start::Done(pending.finish(env));
    }
    Start::Wait(pending)
}

/// One key group's stages, in order; the refusal or denial that ends the
/// request now.
fn plan_group<R, S, M>(
    env: &Env<'_, S, M>,
    req: &Request<'_, R>,
    group: &KeyGroup,
    now: &dyn Fn() -> Instant,
    claims: &mut dyn Claims,
) -> Result<Group, Box<Decided>>
where
    R: RequestSource + ?Sized,
    S: SharedData + ?Sized,
    M: Metrics + ?Sized,
{
    let config = env.config;
    let matched = matched(env, req, group)?;
    let Some(&first) = matched.first() else { return Ok(Group::Skip) };
    let Some(who) = identify(env, req, group, first)? else { return Ok(Group::Skip) };
    let lease = candidate_for(config, &matched, &who.digest);
    if let Some(c) = &lease {
        if let Some(record) = claims.draw(c, now()) {
            return Ok(Group::Known(drawn(env, &matched, c, &record, who.partition, now())));
        }
    }
    let cache = DenyCache::new(env.shared, config.deny_cache.slots);
    let mut d = PlannedDecision::new(&who, cluster_slot(&who.identity));
    let mut known = Vec::new();
    for &r in &matched {
        let rule = &config.rules[r];
        let Some(cost) = cost_of(env, req, r)? else { continue };
        let cached =
            config.deny_cache.enabled.then(|| cached_denial(&cache, r, rule, &who.digest, who.partition, now()));
        if let Some(shown) = cached.flatten() {
            env.metrics.count(r, Event::DenyCacheHit);
            if !rule.shadow {
                env.metrics.count(r, Event::Denied);
                let reply = refusal(config, r, &shown, &[shown], now(), env.random);
                let trace = Trace { rule: r, by: DecidedBy::DenyCache, shown: Some(shown), reservation: None };
                let outcome = Outcome::Reply(reply);
                return Err(Box::new(Decided { outcome, effects: Effects::default(), trace: Some(Box::new(trace)) }));
            }
            env.metrics.count(r, Event::ShadowDenied);
            known.push((r, Verdict::Denied(vec![shown], DecidedBy::DenyCache)));
            continue;
        }
        d.plan_rule(env, r, cost, now());
    }
    if d.rules.is_empty() {
        return Ok(if known.is_empty() { Group::Skip } else { Group::Known(known) });
    }
    // Leased rules are never shadow and cost a fixed amount, so none of
    // them was dropped: the candidate is the decision's.
    d.lease = lease.filter(|_| d.rules == matched);
    Ok(Group::Decide(Box::new(d), known))
}

impl PlannedDecision {
    /// An empty decision for `who`, its keys in `slot`.
    fn new(who: &Who, slot: crate::keys::HashSlot) -> PlannedDecision {
        PlannedDecision {
            rules: Vec::new(),
            identity: who.identity.clone(),
            limits: Vec::new(),
            slot,
            digest: who.digest,
            partition: who.partition,
            lease: None,
            result: None,
            clock: None,
            prices: Vec::new(),
            marks: Vec::new(),
        }
    }

    /// Adds rule `r`'s limits for a request costing `cost` at `price`.
    fn plan_rule<S, M>(&mut self, env: &Env<'_, S, M>, r: usize, cost: RuleCost, now: Instant)
    where
        S: SharedData + ?Sized,
        M: Metrics + ?Sized,
    {
        if let Some(price) = cost.price {
            self.prices.push((r, price));
        }
        self.rules.push(r);
        let first = self.limits.len();
        plan_limits(&mut self.limits, r, &env.config.rules[r], cost.units, &self.digest, env.random);
        count_local_streams(env.shared, env.config, &mut self.limits[first..], &self.digest, now);
    }
}
