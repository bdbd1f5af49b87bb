//! One request's way through the limiter, host-independent:
//! `begin` matches rules, builds identities, answers from the deny cache or
//! plans one store call per identity; `on_reply` takes each call's result;
//! when all are in, the verdict: continue (with headers), 429 or 503.

use crate::algorithm::Algorithm;
use crate::breaker::{self, Gate};
use crate::config::{BodyInvalid, Config, Cost, Counts, FailureMode, Limit, Price, Rule};
use crate::deny_cache::DenyCache;
use crate::error_body::Denied;
use crate::fallback::FallbackLimit;
use crate::fingerprint::IdentityDigest;
use crate::identity::{identity_within, Identity};
use crate::keys::{cluster_slot, HashSlot};
use crate::metrics::{Event, Metrics};
use crate::outcome::LimitOutcome;
use crate::ratelimit_fields::PartitionKey;
use crate::request::{Request, RequestSource};
use crate::response::{
    bad_request, most_restrictive, too_many_requests, unavailable, Headers, LocalReply, PolicyRef, Shown,
};
use crate::shared::SharedData;
use crate::spec::{Mark, Op, SlotId};
use crate::store::StoreError;

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
    /// This worker's count of each leasing client's requests: only a
    /// client hot here reads the lease table (`None`: every one does).
    pub heat: Option<&'a RefCell<Heat>>,
}

/// How a request ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Let it through; add these headers to the response, charge these
    /// costs once the response reports them, and hold these concurrency
    /// slots until the stream ends.
    Continue(Headers, Vec<Charge>, Vec<Hold>),
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
    pub reserved: Option<Reserved>,
    /// The price of the request's model, when the rule prices its usage.
    pub price: Option<Arc<Price>>,
}

/// A reservation the store took for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reserved {
    /// Units taken from each limit counting cost.
    pub units: u64,
    /// The clock the store took them on (their windows' keys).
    pub at_ms: u64,
    /// The mark of each token bucket or GCRA it was taken from (by index
    /// into the rule's limits): what their refunds carry.
    pub marks: Vec<(usize, Mark)>,
}

/// A concurrency slot a stream holds until it ends: in the store (released
/// and renewed there), or, taken while the store failed, in this proxy's
/// local share.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// The rule (index into the configuration's rules).
    pub rule: usize,
    /// Its concurrency limit (index into the rule's limits).
    pub limit: usize,
    /// The escaped identity.
    pub identity: String,
    /// Its hash slot.
    pub slot: HashSlot,
    /// The slot's id in the store.
    pub id: SlotId,
    /// The identity's digest (the local share's fingerprint).
    pub digest: IdentityDigest,
    /// Held in the local share, not in the store.
    pub local: bool,
}

impl Hold {
    /// Its limit's entry in the local share.
    pub fn local_share(&self, config: &Config) -> Option<FallbackLimit> {
        let rule = config.rules.get(self.rule)?;
        Some(fallback_limit(rule, rule.limits.get(self.limit)?, &self.digest, 1))
    }

    /// Gives back a slot of the local share (`local`), counted as released.
    pub fn release_locally<S, M>(&self, config: &Config, shared: &S, metrics: &M, now_ms: u64)
    where
        S: SharedData + ?Sized,
        M: Metrics + ?Sized,
    {
        if let Some(share) = self.local_share(config) {
            crate::fallback::release_slot(shared, config.deny_cache.slots, &share, now_ms);
        }
        metrics.count(self.rule, Event::SlotReleased);
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
    /// Decided without the store (no rule applies, a cached denial, or the
    /// breaker is open).
    Done(Outcome),
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
    clock_ms: Option<u64>,
    /// The price of each priced rule (by index), from the request's model.
    prices: Vec<(usize, Arc<Price>)>,
    /// The marks of the buckets its reservations were taken from (by index
    /// into `limits`), once the store admitted it.
    marks: Vec<(usize, Mark)>,
}

impl PlannedDecision {
    /// The charge of rule `r` on this decision's identity.
    fn charge(&self, r: usize, rule: &Rule, reserved: Option<Reserved>) -> Charge {
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
            reserved,
            price,
        }
    }

    /// What it reserves if the store admits it (decided on `clock_ms`), one
    /// charge per rule in reservation mode: to give back whole when its
    /// stream is gone before the answer (the request never went on).
    pub fn reservations(&self, config: &Config, clock_ms: u64) -> Vec<Charge> {
        let mut out = Vec::new();
        for &r in &self.rules {
            let Some(rule) = config.rules.get(r) else { continue };
            if let Some(units) = self.reserved_units(r, rule) {
                out.push(self.charge(r, rule, Some(Reserved { units, at_ms: clock_ms, marks: self.marks_of(r) })));
            }
        }
        out
    }

    /// Whether it takes a reservation if the store admits it.
    pub fn reserves(&self, config: &Config) -> bool {
        self.rules.iter().any(|&r| config.rules.get(r).is_some_and(|rule| self.reserved_units(r, rule).is_some()))
    }

    /// The units rule `r` (in reservation mode) asks its limits counting cost.
    fn reserved_units(&self, r: usize, rule: &Rule) -> Option<u64> {
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
            if let Some((outcome, mark)) = Mark::of(&limit.spec, o) {
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
    fn reserved(&self, r: usize, rule: &Rule) -> Option<Reserved> {
        let at_ms = self.clock_ms.filter(|_| self.admitted())?;
        Some(Reserved { units: self.reserved_units(r, rule)?, at_ms, marks: self.marks_of(r) })
    }

    /// The units limit `i` of rule `r` asks of the store: the request's
    /// own reservation, or what every request of the rule asks.
    fn amount(&self, r: usize, i: usize, rule: &Rule, l: &Limit) -> u64 {
        match self.limits.iter().find(|p| p.rule == r && p.limit == i) {
            Some(p) if rule.cost.reservation().is_some() && l.counts == Counts::Cost => p.op.amount(),
            _ => rule.request_amount(l),
        }
    }

    /// The slots it takes in the store if it is admitted (`local`: or in
    /// the local share, when its store failed).
    pub fn takes(&self, local: bool) -> impl Iterator<Item = Hold> + '_ {
        self.limits.iter().filter_map(move |l| match l.op {
            Op::Take(id, _) => Some(Hold {
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

/// A request waiting for its store decisions.
#[derive(Debug)]
pub struct Pending {
    now_ms: u64,
    /// The decisions to make, by index.
    pub decisions: Vec<PlannedDecision>,
    /// Outcomes known before calling (shadow rules answered from the cache).
    known: Vec<(usize, Verdict)>,
    /// Slots taken in the store for a request another rule then refused:
    /// the caller releases them (`take_stranded`).
    stranded: Vec<Hold>,
    /// Reservations taken in the store for a request another rule then
    /// refused: the caller gives them back (`take_stranded_reservations`).
    stranded_reservations: Vec<Charge>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Verdict {
    /// Every limit admitted the request.
    Allowed(Vec<Shown>),
    /// A limit denied it (every limit's outcome, the denied among them).
    Denied(Vec<Shown>),
    FailClosed,
    Unenforced,
}

impl Verdict {
    /// The limits' outcomes, if the verdict has any.
    fn shown(&self) -> &[Shown] {
        match self {
            Verdict::Allowed(s) | Verdict::Denied(s) => s,
            _ => &[],
        }
    }
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
    begin_request(env, &Request::new(source), clock)
}

/// `begin` for a request already being read (its caller reads it further).
pub fn begin_request<R, S, M>(env: &Env<'_, S, M>, req: &Request<'_, R>, clock: impl Fn() -> u64) -> Start
where
    R: RequestSource + ?Sized,
    S: SharedData + ?Sized,
    M: Metrics + ?Sized,
{
    let read_once = std::cell::OnceCell::new();
    let now = || *read_once.get_or_init(&clock);
    let config = env.config;
    if req.headers().is_unreadable() {
        return Start::Done(unreadable::outcome(env, now()));
    }
    let cache = DenyCache::new(env.shared, config.deny_cache.slots);
    let mut decisions = Vec::new();
    let mut known = Vec::new();
    for group in &config.groups {
        let mut matched = Vec::new();
        for &r in &group.rules {
            let rule = &config.rules[r];
            if !rule.matcher.matches_headers(req) {
                continue;
            }
            let body = rule.request_body.unwrap_or_default();
            match rule.matcher.body_holds(req, body.max_bytes) {
                Ok(true) => matched.push(r),
                Ok(false) => {}
                // A body it cannot read: the rule's choice, never a free pass by default.
                Err(_) if rule.shadow || body.invalid == BodyInvalid::Absent => {}
                Err(problem) => {
                    env.metrics.count(r, Event::BadRequest);
                    return Start::Done(Outcome::Reply(body_refusal(&problem, &rule.name, "match.body")));
                }
            }
        }
        let Some(&first) = matched.first() else { continue };
        let max_body = group.body.map_or(u64::MAX, |b| b.max_bytes);
        let identity = match identity_within(&group.key, group.identity, req, config.xff_trusted_hops, max_body) {
            Identity::Key(k) => k,
            Identity::Absent => continue,
            Identity::Conflicting(part) => {
                // Which value the upstream would use is unknown: refuse,
                // unless every matched rule only watches (shadow).
                if group.shadow {
                    continue;
                }
                env.metrics.count(first, Event::BadRequest);
                let what = format!("{} has several different values", part_name(&group.key[part]));
                return Start::Done(Outcome::Reply(bad_request(
                    "ambiguous_identity",
                    &config.rules[first].name,
                    &what,
                )));
            }
            Identity::BodyUnreadable(part, problem) => {
                if group.shadow || group.body.is_some_and(|b| b.invalid == BodyInvalid::Absent) {
                    continue;
                }
                env.metrics.count(first, Event::BadRequest);
                let part = part_name(&group.key[part]);
                return Start::Done(Outcome::Reply(body_refusal(&problem, &config.rules[first].name, &part)));
            }
        };
        let digest = IdentityDigest::of(&identity);
        let ietf = group.rules.iter().any(|&r| config.rules[r].headers.unwrap_or(config.headers).ietf);
        let partition = ietf.then(|| PartitionKey::of(&identity));
        // A live lease first: its units are paid for, so a denial this
        // proxy cached since (the store had none left outside leases) must
        // not strand them.
        let lease = leases::candidate_for(config, &matched, &digest);
        if let Some(c) = &lease {
            let hot =
                env.heat.is_none_or(|h| h.borrow_mut().observe(c.fingerprint, now(), c.params.max_age_ms) >= HOT_AFTER);
            let admit = |held: LeasedRequest<'_>| leases::admitted(config, &matched, &c.limits, held, partition, now());
            if let Some(verdicts) = if hot { leases::spend(env, c, now(), admit) } else { None } {
                for &r in &matched {
                    env.metrics.count(r, Event::Allowed);
                    env.metrics.count(r, Event::LeaseAllowed);
                }
                known.extend(verdicts);
                continue;
            }
        }
        let mut rules = Vec::new();
        let mut limits = Vec::new();
        let mut prices = Vec::new();
        for &r in &matched {
            let rule = &config.rules[r];
            let settings = rule.request_body.unwrap_or_default();
            let price = match rule.cost.prices().map(|p| pricing::price_of(req.body(), p, settings)) {
                None => None,
                Some(Ok(price)) => Some(price),
                Some(Err(_)) if rule.shadow => continue,
                Some(Err(problem)) => {
                    env.metrics.count(r, Event::BadRequest);
                    return Start::Done(Outcome::Reply(pricing::unpriced(&problem, &rule.name)));
                }
            };
            let cost = match &rule.cost {
                Cost::RequestHeader { name, max, default } => match header_cost(req, name, *max, *default) {
                    Some(c) => c,
                    None if rule.shadow => continue,
                    None => {
                        env.metrics.count(r, Event::BadRequest);
                        let what = format!("{name} must be one integer from 1 to {max}");
                        return Start::Done(Outcome::Reply(bad_request("bad_request_cost", &rule.name, &what)));
                    }
                },
                Cost::Response { reservation: Some(reservation), max, .. } => {
                    let cap = rule
                        .limits
                        .iter()
                        .filter(|l| l.counts == Counts::Cost)
                        .map(Limit::capacity)
                        .fold(*max, u64::min);
                    match reservation::worst_case(req.body(), reservation, cap, settings, price.as_deref()) {
                        Ok(units) => units,
                        Err(_) if rule.shadow => continue,
                        Err((problem, part)) => {
                            env.metrics.count(r, Event::BadRequest);
                            return Start::Done(Outcome::Reply(body_refusal(&problem, &rule.name, &part)));
                        }
                    }
                }
                other => other.max_at_request(),
            };
            let cached = if config.deny_cache.enabled {
                cached_denial(&cache, r, rule, &digest, partition, now())
            } else {
                None
            };
            if let Some(shown) = cached {
                env.metrics.count(r, Event::DenyCacheHit);
                if !rule.shadow {
                    env.metrics.count(r, Event::Denied);
                    return Start::Done(Outcome::Reply(denial(config, r, &shown, &[shown], now(), env.random)));
                }
                env.metrics.count(r, Event::ShadowDenied);
                known.push((r, Verdict::Denied(vec![shown])));
                continue;
            }
            if let Some(price) = price {
                prices.push((r, price));
            }
            rules.push(r);
            let first = limits.len();
            plan_limits(&mut limits, r, rule, cost, &digest, env.random);
            count_local_streams(env.shared, config, &mut limits[first..], &digest, now());
        }
        if rules.is_empty() {
            continue;
        }
        // Leased rules are never shadow and cost a fixed amount, so none of
        // them was dropped: the candidate is the decision's.
        let lease = lease.filter(|_| rules == matched);
        let slot = cluster_slot(&identity);
        decisions.push(PlannedDecision {
            rules,
            identity,
            limits,
            slot,
            digest,
            partition,
            lease,
            result: None,
            clock_ms: None,
            prices,
            marks: Vec::new(),
        });
    }
    if decisions.is_empty() && known.is_empty() {
        return Start::Done(Outcome::Continue(Vec::new(), Vec::new(), Vec::new()));
    }
    let now_ms = now();
    let mut pending = Pending { now_ms, decisions, known, stranded: Vec::new(), stranded_reservations: Vec::new() };
    if pending.decisions.is_empty() {
        return Start::Done(pending.finish(env));
    }
    let probe_ms = config.store.timeout.ms().saturating_mul(2).saturating_add(1000);
    for d in &mut pending.decisions {
        if breaker::gate(env.shared, &config.store.breaker, d.slot, now_ms, probe_ms) == Gate::Open {
            d.result = Some(Err(StoreError::BreakerOpen));
        }
    }
    if pending.decisions.iter().all(|d| !d.is_waiting()) {
        return Start::Done(pending.finish(env));
    }
    Start::Wait(pending)
}

/// What the limits of rule `r` do for a request of `cost` (a cost known
/// after the response is only checked against the reserve now, unless it
/// is reserved: then `cost` is the request's worst case); a
/// concurrency limit takes a slot whose id comes from `random`.
fn plan_limits(out: &mut Vec<PlannedLimit>, r: usize, rule: &Rule, cost: u64, digest: &IdentityDigest, random: u64) {
    for (i, l) in rule.limits.iter().enumerate() {
        let op = match (l.counts, &rule.cost) {
            _ if l.spec.algorithm == Algorithm::Concurrency => Op::Take(slot_id(random, r, i), 0),
            (Counts::Requests, _) => Op::Use(1),
            (Counts::Cost, Cost::Response { reservation: None, reserve, .. }) => Op::Check(*reserve),
            // A bucket's reservation: its refund needs the bucket's mark.
            (Counts::Cost, Cost::Response { .. }) if l.spec.algorithm.tat() => Op::Reserve(cost),
            (Counts::Cost, _) => Op::Use(cost),
        };
        let offset_ms = l.staggered.then(|| window_offset(l.fingerprint, digest, l.spec.window_ms));
        out.push(PlannedLimit { rule: r, limit: i, op, offset_ms });
    }
}

/// Each take of a concurrency slot in `limits` also counts the client's
/// streams this proxy admitted from its local share while the store failed
/// and has not moved into the store yet (a renewal moves them once the
/// store answers): the store cannot see them, and right after an outage
/// the client must still hold at most `limit` streams. One shared-data
/// read per concurrency limit decided.
fn count_local_streams<S: SharedData + ?Sized>(
    shared: &S,
    config: &Config,
    limits: &mut [PlannedLimit],
    digest: &IdentityDigest,
    now_ms: u64,
) {
    for l in limits {
        let Op::Take(id, _) = l.op else { continue };
        let Some(rule) = config.rules.get(l.rule) else { continue };
        let Some(limit) = rule.limits.get(l.limit) else { continue };
        let share = fallback_limit(rule, limit, digest, 1);
        l.op = Op::Take(id, crate::fallback::streams_held(shared, config.deny_cache.slots, &share, now_ms));
    }
}

/// A slot id for limit `i` of rule `r` of a request whose random number is
/// `random`: ids of one request differ, and the ids of the fleet's
/// streams collide no more than random 64-bit numbers do (each VM's
/// generator is seeded from the host's entropy). Never 0.
fn slot_id(random: u64, r: usize, i: usize) -> SlotId {
    let salt = ((r as u64) << 32) ^ (i as u64);
    SlotId(crate::fingerprint::combine(random, &[salt]).max(1))
}

/// Whether `shown` is a concurrency limit's outcome.
fn is_concurrency(config: &Config, shown: &Shown) -> bool {
    shown.policy.is_some_and(|p| {
        config.rules.get(p.rule).and_then(|r| r.limits.get(p.limit)).map(|l| l.spec.algorithm)
            == Some(Algorithm::Concurrency)
    })
}

/// The 429 of rule `r` denying `worst`, with the fields its style asks
/// for. `all` holds the outcomes of every limit decided for the request;
/// `RateLimit-Policy` names those and every limit of rule `r` (a denial
/// from the deny cache decided only one of them).
fn denial(config: &Config, r: usize, worst: &Shown, all: &[Shown], now: u64, random: u64) -> LocalReply {
    let rule = &config.rules[r];
    let style = rule.headers.unwrap_or(config.headers);
    let limit = worst.policy.and_then(|p| rule.limits.get(p.limit));
    // A concurrency limit has no window: its body says streams at once.
    let window_ms = if is_concurrency(config, worst) { None } else { Some(limit.map_or(0, |l| l.spec.window_ms)) };
    // Tokens: a limit counting a cost that is not one per request.
    let tokens = limit.is_some_and(|l| l.counts == Counts::Cost) && !matches!(rule.cost, Cost::Fixed(1));
    let body = |retry_after| {
        let denied = Denied { rule: &rule.name, limit: worst.limit, window_ms, tokens, retry_after };
        crate::error_body::body(rule.error_body, &denied)
    };
    let mut reply = too_many_requests(worst, now, style.legacy, random, config.retry_after_jitter_ppm, body);
    if let Some(vendor) = style.vendor {
        reply.headers.extend(vendor_fields::vendor_fields(config, vendor, all, now));
    }
    if style.ietf {
        let partition = worst.policy.and_then(|p| p.partition);
        let of_rule =
            rule.limits.iter().enumerate().map(|(i, l)| (PolicyRef { rule: r, limit: i, partition }, l.spec.limit));
        let listed: Vec<Listed> = all.iter().filter_map(|s| s.policy.map(|p| (p, s.limit))).chain(of_rule).collect();
        reply.headers.extend(ietf_fields(config, &listed, all, true));
    }
    reply
}

impl Pending {
    /// Takes the result of decision `index` (one `LimitOutcome` per limit, in
    /// order); the outcome once every decision is in. A decision whose
    /// result is already in is ignored. (The breakers are the caller's: a
    /// store call that carried many decisions counts once.)
    /// Decision `index` is decided in a call on `clock_ms` (the caller's
    /// clock the call carries).
    pub fn decided_on(&mut self, index: usize, clock_ms: u64) {
        if let Some(d) = self.decisions.get_mut(index) {
            d.clock_ms = Some(clock_ms);
        }
    }

    pub fn on_reply<S, M>(
        &mut self,
        env: &Env<'_, S, M>,
        index: usize,
        result: Result<Vec<LimitOutcome>, StoreError>,
    ) -> Option<Outcome>
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

    fn finish<S, M>(&mut self, env: &Env<'_, S, M>) -> Outcome
    where
        S: SharedData + ?Sized,
        M: Metrics + ?Sized,
    {
        let config = env.config;
        let now = self.now_ms;
        // Slots a decision whose answer was lost may hold all the same:
        // released, to be sure (releasing a slot never taken changes nothing).
        let maybe: Vec<Hold> = self
            .decisions
            .iter()
            .filter(|d| matches!(&d.result, Some(Err(e)) if e.may_have_run()))
            .flat_map(|d| d.takes(false))
            .collect();
        self.stranded.extend(maybe);
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
                        verdicts.push((r, self.store_verdict(env, r, d, mine, consumed)));
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
            Verdict::Denied(shown) if !config.rules[*r].shadow => Some((r, shown)),
            _ => None,
        });
        let worst = denied
            .filter_map(|(r, shown)| most_restrictive(shown).map(|s| (*r, s)))
            .max_by_key(|(_, s)| (s.outcome.retry_after_ms.unwrap_or(u64::MAX), s.outcome.reset_ms));
        let holds = self.holds(config, &verdicts);
        if let Some((r, shown)) = worst {
            self.strand(env, holds);
            self.stranded_reservations = self.reserved_so_far(config);
            let all: Vec<Shown> = verdicts
                .iter()
                .filter(|(r, _)| !config.rules[*r].shadow)
                .flat_map(|(_, v)| v.shown().iter().copied())
                .collect();
            return Outcome::Reply(denial(config, r, &shown, &all, now, env.random));
        }
        if verdicts.iter().any(|(_, v)| *v == Verdict::FailClosed) {
            self.strand(env, holds);
            self.stranded_reservations = self.reserved_so_far(config);
            return Outcome::Reply(unavailable());
        }
        let charges = self.charges(config, &verdicts);
        Outcome::Continue(response_headers(config, &verdicts, now), charges, holds)
    }

    /// Slots taken for a request that is refused after all: those of the
    /// local share are released now, those in the store by the caller.
    fn strand<S, M>(&mut self, env: &Env<'_, S, M>, holds: Vec<Hold>)
    where
        S: SharedData + ?Sized,
        M: Metrics + ?Sized,
    {
        for hold in holds {
            if hold.local {
                hold.release_locally(env.config, env.shared, env.metrics, self.now_ms);
            } else {
                self.stranded.push(hold);
            }
        }
    }

    /// Slots the store already gave decisions that answered, while others
    /// are still out: what a stream that ends now must give back.
    pub fn taken_so_far(&self) -> Vec<Hold> {
        self.decisions.iter().filter(|d| d.admitted()).flat_map(|d| d.takes(false)).collect()
    }

    /// Reservations the store already took for decisions that answered
    /// (admitted): what a request refused after all, or a stream that ends
    /// now, gives back whole.
    pub fn reserved_so_far(&self, config: &Config) -> Vec<Charge> {
        let decided = |d: &PlannedDecision| d.clock_ms.map(|clock| d.reservations(config, clock));
        self.decisions.iter().filter(|d| d.admitted()).filter_map(decided).flatten().collect()
    }

    /// Slots the store gave a request that was refused after all: to release.
    pub fn take_stranded(&mut self) -> Vec<Hold> {
        std::mem::take(&mut self.stranded)
    }

    /// Reservations the store took for a request refused after all: to give back.
    pub fn take_stranded_reservations(&mut self) -> Vec<Charge> {
        std::mem::take(&mut self.stranded_reservations)
    }

    /// The concurrency slots a request let through holds: each taken in
    /// the store by a decision that admitted, or in the local share by a
    /// rule whose store failed and whose fallback admitted.
    fn holds(&self, config: &Config, verdicts: &[(usize, Verdict)]) -> Vec<Hold> {
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
                    && verdicts.iter().any(|(v, verdict)| *v == h.rule && matches!(verdict, Verdict::Allowed(_)));
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
                let allowed = verdicts.iter().any(|(v, verdict)| *v == r && matches!(verdict, Verdict::Allowed(_)));
                if !rule.cost.after_response() || !allowed {
                    continue;
                }
                out.push(d.charge(r, rule, d.reserved(r, rule)));
            }
        }
        out
    }
}

mod body_refusal;
mod leases;
mod pricing;
mod reads;
mod reservation;
mod response_fields;
#[cfg(test)]
mod tests;
mod unreadable;
mod vendor_fields;
mod verdicts;

use crate::lease::{Heat, LeasedRequest, HOT_AFTER};
pub use body_refusal::{body_refusal, body_timeout};
pub use leases::LeaseCandidate;
use reads::{cached_denial, header_cost, part_name, window_offset};
use response_fields::{ietf_fields, response_headers, Listed};
use std::cell::RefCell;
use std::sync::Arc;
pub use verdicts::refunds_may_undo;
