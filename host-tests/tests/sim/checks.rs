//! The invariants, each named as README's Guarantees table and
//! docs/simulation.md name it, checked on what the world saw: after every
//! step, when a stream is decided, when its response passes, and once
//! everything settled. Every check is counted by name.

use std::collections::BTreeMap;

use host_tests::wasm_host::{HeaderMap, State};
use ratelimit::algorithm::Algorithm;
use ratelimit::fingerprint::{entry_fingerprint, IdentityDigest};
use ratelimit::outcome::LimitOutcome;
use ratelimit::response::{most_restrictive, retry_after_seconds, Shown};
use ratelimit::spec::{LimitCall, LimitSpec, Op};

use crate::bounds::{bucket_overrun, bucket_room, in_fixed_window, in_log_window, sliding_estimate, Use};
use crate::rules::Kind;
use crate::world::{World, VMS};

/// How many times each invariant was checked.
#[derive(Clone, Debug, Default)]
pub struct Checks(pub BTreeMap<&'static str, u64>);

impl Checks {
    pub fn count(&mut self, name: &'static str) {
        *self.0.entry(name).or_default() += 1;
    }

    pub fn add(&mut self, other: &Checks) {
        for (name, n) in &other.0 {
            *self.0.entry(name).or_default() += n;
        }
    }

    /// Checks of the invariants (`NAMES`; not their breakdowns).
    pub fn total(&self) -> u64 {
        NAMES.iter().map(|n| self.of(n)).sum()
    }

    /// How many times `name` was checked.
    pub fn of(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }
}

/// Every invariant, as named.
pub const NAMES: [&str; 20] = [
    "exact.fixed_window",
    "exact.sliding_window",
    "exact.sliding_log",
    "exact.token_bucket",
    "exact.gcra",
    "exact.token_bucket_leased",
    "exact.gcra_leased",
    "concurrency.in_flight",
    "concurrency.after_outage",
    "concurrency.released",
    "charges.once",
    "charges.exact",
    "reserved.never_over",
    "reserved.settled",
    "fallback.share",
    "deny_cache.sound",
    "model.agrees",
    "memory.shared",
    "no_trap",
    "healthy_store_decides",
];

/// `model.agrees` in calm schedules, by algorithm, for decisions made at
/// least one window (a bucket: its whole refill) after the client's first
/// of that rule: the model followed the store across roll-overs and
/// refills. A breakdown of `model.agrees`, each required like an invariant.
pub const AGREES_ROLLED: [(Algorithm, &str); 6] = [
    (Algorithm::FixedWindow, "model.agrees, calm, rolled over: fixed_window"),
    (Algorithm::SlidingWindow, "model.agrees, calm, rolled over: sliding_window"),
    (Algorithm::SlidingLog, "model.agrees, calm, rolled over: sliding_log"),
    (Algorithm::TokenBucket, "model.agrees, calm, rolled over: token_bucket"),
    (Algorithm::Gcra, "model.agrees, calm, rolled over: gcra"),
    (Algorithm::Concurrency, "model.agrees, calm, rolled over: concurrency"),
];

/// Counts a `model.agrees` check of stream `i`'s decisions, and its
/// breakdown by algorithm (`AGREES_ROLLED`).
fn count_agrees(world: &World, i: usize) {
    world.count("model.agrees");
    if !world.calm {
        return;
    }
    let t = &world.streams[i];
    for d in &t.decisions {
        let first = world
            .streams
            .iter()
            .filter(|s| s.user == t.user)
            .flat_map(|s| &s.decisions)
            .filter(|e| e.rule == d.rule && e.reached)
            .map(|e| e.travel_ms)
            .min()
            .unwrap_or(d.travel_ms);
        for l in d.decision.limits.iter().filter(|l| d.travel_ms - first >= l.spec.window_ms) {
            if let Some(&(_, name)) = AGREES_ROLLED.iter().find(|(a, _)| *a == l.spec.algorithm) {
                world.count(name);
            }
        }
    }
}

/// The invariant of an algorithm's bound.
fn exact_name(a: Algorithm) -> &'static str {
    match a {
        Algorithm::FixedWindow => "exact.fixed_window",
        Algorithm::SlidingWindow => "exact.sliding_window",
        Algorithm::SlidingLog => "exact.sliding_log",
        Algorithm::TokenBucket => "exact.token_bucket",
        Algorithm::Gcra => "exact.gcra",
        Algorithm::Concurrency => "concurrency.in_flight",
    }
}

/// The outcome a decision's limits had in the store, as far as known:
/// the module's verdict when the store's reply reached it, else the model.
fn allowed(world: &World, stream: usize, decision: usize) -> Option<bool> {
    let t = &world.streams[stream];
    let d = &t.decisions[decision];
    if !d.reached {
        return Some(false);
    }
    if d.answered == Some(true) && t.decisions.len() == 1 {
        if let Some(state) = &t.verdict {
            return Some(*state == State::Continued);
        }
    }
    d.model.as_ref().map(|m| m.iter().all(|o| o.allowed))
}

/// A use of limit `limit` of a stream's decision, with what it counts.
#[derive(Clone, Copy, Debug)]
struct Seen {
    caller_ms: u64,
    store_ms: u64,
    travel_ms: u64,
    units: u64,
    offset_ms: u64,
    /// The store admitted it (`None`: unknown).
    allowed: Option<bool>,
    stream: usize,
}

/// Every use the store ran of limit `limit` of rule `rule` for `user` in
/// epoch `epoch`, in the order it ran them. Units: the op's amount; for
/// a reservation settled, what it was charged in the end (0 for one whose
/// client left before the store's answer: it gets it back whole).
fn seen(world: &World, rule: usize, user: usize, limit: usize, epoch: u32) -> Vec<Seen> {
    let mut out = Vec::new();
    for (s, t) in world.streams.iter().enumerate().filter(|(_, t)| t.user == user) {
        for (k, d) in t.decisions.iter().enumerate() {
            if d.rule != rule || d.epoch != epoch || !d.reached {
                continue;
            }
            let Some(l) = d.decision.limits.get(limit) else { continue };
            let amount = match l.op {
                Op::Use(a) | Op::Reserve(a) => a,
                _ => continue,
            };
            let units = match (t.reserved > 0, t.admitted, t.charged) {
                (true, Some(_), Some(c)) => c,
                (true, None, _) if t.verdict.is_some() || !t.live => 0,
                _ => amount,
            };
            out.push(Seen {
                caller_ms: d.caller_ms,
                store_ms: d.store_ms,
                travel_ms: d.travel_ms,
                units,
                offset_ms: l.offset_ms.unwrap_or(0),
                allowed: allowed(world, s, k),
                stream: s,
            });
        }
    }
    out.sort_by_key(|u| u.travel_ms);
    out
}

/// The window indices of a limit (`window_ms`, shifted by `offset_ms`)
/// that the proxies' wall clock stepped back into or within: there the
/// store may forget a count before the proxies leave its window (its key
/// expires on the store's clock), so one more limit may be admitted.
fn stepped_back(world: &World, window_ms: u64, offset_ms: u64) -> Vec<u64> {
    let w = window_ms.max(1);
    world
        .wall_backs
        .iter()
        .flat_map(|&(_, wall, ms)| ((wall - ms + offset_ms) / w)..=((wall + offset_ms) / w))
        .collect()
}

/// After every step: the upper bounds, streams in flight, shared memory,
/// traps. Every violation found (the first of each check).
pub fn after_step(world: &mut World) -> Vec<String> {
    let mut found = Vec::new();
    for host in &world.hosts {
        let traps = host.traps();
        if !traps.is_empty() {
            found.push(format!("no_trap: {traps:?}"));
        }
    }
    world.count("no_trap");
    for host in &world.hosts {
        let keys = host.shared_keys();
        for table in ["ratelimit.lease.", "ratelimit.deny.", "ratelimit.fallback.", "ratelimit.breaker."] {
            let n = keys.iter().filter(|k| k.starts_with(table)).count();
            if n > world.rules.slots {
                found.push(format!("memory.shared: {n} keys of {table}*, {} slots", world.rules.slots));
            }
        }
    }
    world.count("memory.shared");
    for rule in 0..world.rules.len() {
        for user in 0..crate::schedule::USERS {
            for epoch in 0..=world.epoch {
                if let Err(v) = rate_bounds(world, rule, user, epoch) {
                    found.push(format!("{v} (client u{user})"));
                }
            }
        }
    }
    found.extend(crate::slots::in_flight(world).err());
    found.extend(crate::slots::after_outage(world).err());
    found.extend(fallback_share(world).err());
    found
}

/// The most each limit admits, from the uses the store ran.
fn rate_bounds(world: &mut World, rule: usize, user: usize, epoch: u32) -> Result<(), String> {
    let r = world.rules.get(rule).clone();
    let leased = r.kind == Kind::Leased;
    if leased {
        return leased_bound(world, rule, user, epoch);
    }
    if !matches!(r.kind, Kind::Rate | Kind::FailOpen | Kind::SlotAndWindow | Kind::Reserved | Kind::ReservedBody) {
        return Ok(());
    }
    for (i, spec) in r.specs.iter().enumerate() {
        let all = seen(world, rule, user, i, epoch);
        let uses: Vec<Seen> = all.iter().copied().filter(|u| u.allowed == Some(true)).collect();
        if uses.is_empty() {
            continue;
        }
        let reserved = matches!(r.kind, Kind::Reserved | Kind::ReservedBody);
        let name = if reserved { "reserved.never_over" } else { exact_name(spec.algorithm) };
        // Reservations taken before a flush may give back into the counts after it.
        let slack: u64 = if reserved && epoch > 0 {
            world
                .streams
                .iter()
                .filter(|t| t.rule == rule && t.user == user && t.epoch < epoch)
                .map(|t| t.reserved)
                .sum()
        } else {
            0
        };
        world.count(name);
        match spec.algorithm {
            Algorithm::FixedWindow => {
                let offset = uses[0].offset_ms;
                let backs = stepped_back(world, spec.window_ms, offset);
                let mut by_index: BTreeMap<u64, u64> = BTreeMap::new();
                for u in &uses {
                    *by_index.entry((u.caller_ms + offset) / spec.window_ms).or_default() += u.units;
                }
                for (index, n) in by_index {
                    let extra = backs.iter().filter(|&&b| b == index).count() as u64 * spec.limit;
                    if n > spec.limit + extra + slack {
                        return Err(format!(
                            "{name}: {n} units admitted in window {index} of {} per {} ms ({extra} more after the wall clock stepped back, {slack} refunds from before a flush)",
                            spec.limit, spec.window_ms
                        ));
                    }
                }
            }
            Algorithm::SlidingWindow => {
                let backs = stepped_back(world, spec.window_ms, 0);
                let points: Vec<Use> = uses.iter().map(|u| Use { at: u.caller_ms, units: u.units }).collect();
                for (k, u) in uses.iter().enumerate() {
                    let index = u.caller_ms / spec.window_ms;
                    if backs.iter().any(|&b| b == index || b + 1 == index) {
                        continue;
                    }
                    let estimate = sliding_estimate(&points[..=k], spec.window_ms, u.caller_ms);
                    let most = u128::from(spec.limit + slack) * u128::from(spec.window_ms);
                    if estimate > most {
                        return Err(format!(
                            "{name}: admitted at {} with an estimate of {:.3} of {} per {} ms",
                            u.caller_ms,
                            estimate as f64 / spec.window_ms as f64,
                            spec.limit,
                            spec.window_ms
                        ));
                    }
                }
            }
            Algorithm::SlidingLog => {
                let points: Vec<Use> = uses.iter().map(|u| Use { at: u.travel_ms, units: u.units }).collect();
                for (k, u) in points.iter().enumerate() {
                    let n = in_log_window(&points[..=k], spec.window_ms, u.at);
                    if n > spec.limit {
                        return Err(format!("{name}: {n} admitted within {} ms, limit {}", spec.window_ms, spec.limit));
                    }
                }
            }
            Algorithm::TokenBucket | Algorithm::Gcra => {
                let points: Vec<Use> = uses.iter().map(|u| Use { at: u.travel_ms, units: u.units }).collect();
                if let Some((j, k, taken, most)) =
                    bucket_overrun(&points, spec.limit, spec.window_ms, spec.burst + slack)
                {
                    let refunded = refunds_between(world, rule, user, uses[j].store_ms, uses[k].store_ms);
                    let choices = uses[j..=k].iter().any(|u| world.streams[u.stream].choices > 1);
                    return Err(format!(
                        "{name}: {taken} units admitted within {} ms (store time), at most {most} (burst {} + {} per {} ms{}); uses from {} to {}{}{}",
                        points[k].at - points[j].at,
                        spec.burst,
                        spec.limit,
                        spec.window_ms,
                        if slack > 0 { format!(", {slack} refunds from before a flush") } else { String::new() },
                        uses[j].store_ms,
                        uses[k].store_ms,
                        if refunded > 0 { format!("; refunds of {refunded} units landed within it") } else { String::new() },
                        if choices { "; a request within it asked n > 1 completions" } else { "" }
                    ));
                }
            }
            Algorithm::Concurrency => {}
        }
    }
    Ok(())
}

/// Units the store refunded to `user` of rule `rule` between the store's
/// instants `from` and `to`.
fn refunds_between(world: &World, rule: usize, user: usize, from: u64, to: u64) -> u64 {
    let key = (world.identity_of(user, rule), world.rules.get(rule).name.to_string());
    let Some(s) = world.ledger.settled.get(&key) else { return 0 };
    s.refunds.iter().filter(|(at, _)| (from..=to).contains(at)).map(|(_, n)| n).sum()
}

/// `exact.token_bucket_leased`, `exact.gcra_leased`: the requests a leased
/// bucket lets through, leases included, over any interval, at most what
/// the store gave out over it and the lease's `max_age` before it; after a
/// flush, plus what leases granted before it still admit.
fn leased_bound(world: &mut World, rule: usize, user: usize, epoch: u32) -> Result<(), String> {
    let r = world.rules.get(rule).clone();
    let spec = r.specs[0];
    let name = if spec.algorithm == Algorithm::Gcra { "exact.gcra_leased" } else { "exact.token_bucket_leased" };
    let (max_age, max_units) = if world.rules.version == 1 { (2_000, 8) } else { (2_000, 3) };
    let lease_slack = if epoch > 0 { (world.hosts.len() * VMS) as u64 * max_units } else { 0 };
    let points: Vec<Use> = world
        .streams
        .iter()
        .filter(|t| t.rule == rule && t.user == user && t.epoch == epoch)
        .filter_map(|t| t.admitted.map(|at| Use { at: world.travel_at(at), units: 1 }))
        .collect();
    if points.is_empty() {
        return Ok(());
    }
    world.count(name);
    let (limit, window) = (u128::from(spec.limit), u128::from(spec.window_ms));
    let mut sorted = points;
    sorted.sort_by_key(|u| u.at);
    for k in 0..sorted.len() {
        for j in 0..=k {
            let n = (k - j + 1) as u128;
            let span = u128::from(sorted[k].at - sorted[j].at + max_age);
            let most = u128::from(spec.burst + lease_slack) + limit * span / window + 1;
            if n > most {
                return Err(format!(
                    "{name}: {n} admitted within {} ms, at most {most} (burst {} + {} per {} ms over it and a lease's age, {lease_slack} leased before a flush)",
                    span - u128::from(max_age),
                    spec.burst,
                    spec.limit,
                    spec.window_ms
                ));
            }
        }
    }
    Ok(())
}

/// `fallback.share`: while the store fails, a proxy admits at most
/// `limit / fleet_size` per window per client of the open rate (`fo`),
/// counted for clients whose fallback entry no other client or rule of
/// the schedule can take over (a taken-over entry starts afresh), one
/// share more in a window the wall clock stepped back into or within.
fn fallback_share(world: &mut World) -> Result<(), String> {
    let Some(fo) = world.rules.index("fo").filter(|&r| world.rules.get(r).kind == Kind::FailOpen) else {
        return Ok(());
    };
    let spec = world.rules.get(fo).specs[0];
    let share = spec.limit / world.hosts.len() as u64;
    let slots = world.rules.slots as u64;
    // Entries that can be written: open rules' and charges' of every client.
    let writers: Vec<(usize, usize, u64)> = (0..world.rules.len())
        .filter(|&r| {
            matches!(
                world.rules.get(r).kind,
                Kind::SlotsOpen
                    | Kind::FailOpen
                    | Kind::ChargedHeader
                    | Kind::ChargedBody
                    | Kind::Reserved
                    | Kind::ReservedBody
            )
        })
        .flat_map(|r| (0..crate::schedule::USERS).map(move |u| (r, u)))
        .flat_map(|(r, u)| {
            let id = IdentityDigest::of(&world.identity_of(u, r));
            world
                .rules
                .get(r)
                .fingerprints
                .iter()
                .map(move |fp| (r, u, entry_fingerprint(*fp, &id) % slots))
                .collect::<Vec<_>>()
        })
        .collect();
    for user in 0..crate::schedule::USERS {
        let mine = writers.iter().find(|(r, u, _)| *r == fo && *u == user).map(|w| w.2);
        let Some(slot) = mine else { continue };
        if writers.iter().any(|(r, u, s)| *s == slot && (*r, *u) != (fo, user)) {
            continue;
        }
        for proxy in 0..world.hosts.len() {
            let mut by_window: BTreeMap<u64, u64> = BTreeMap::new();
            for t in world.streams.iter().filter(|t| t.rule == fo && t.user == user && t.proxy == proxy) {
                if t.admitted.is_some() && !t.by_store() {
                    *by_window.entry(t.begun_wall / spec.window_ms).or_default() += 1;
                }
            }
            if by_window.is_empty() {
                continue;
            }
            world.count("fallback.share");
            // A window the wall clock stepped back out of and came back to
            // starts afresh (the entry holds one window): one share more.
            let backs = stepped_back(world, spec.window_ms, 0);
            let over = |(w, n): &(u64, u64)| *n > share * (1 + backs.iter().filter(|b| *b == w).count() as u64);
            if let Some((w, n)) = by_window.into_iter().find(over) {
                return Err(format!(
                    "fallback.share: proxy {proxy} admitted {n} of client u{user} in window {w} while the store failed, its share is {share}"
                ));
            }
        }
    }
    Ok(())
}

/// The outcomes shown for a stream decided by one store decision.
fn shown(specs: &[LimitSpec], outcomes: &[LimitOutcome]) -> Vec<Shown> {
    specs.iter().zip(outcomes).map(|(s, o)| Shown { limit: s.limit, outcome: *o, policy: None }).collect()
}

/// A stream was decided: `model.agrees`, `deny_cache.sound` and the lower
/// side of the `exact.*` bounds.
pub fn on_verdict(world: &mut World, i: usize) {
    if let Err(v) = verdict_checks(world, i) {
        world.violations.push(format!("{v} (client u{}, stream #{i})", world.streams[i].user));
    }
}

fn verdict_checks(world: &mut World, i: usize) -> Result<(), String> {
    let t = &world.streams[i];
    let r = world.rules.get(t.rule).clone();
    let status = match &t.verdict {
        Some(State::Continued) => 200,
        Some(State::Replied(reply)) => reply.status,
        _ => return Ok(()),
    };
    if t.cached {
        return deny_cache_sound(world, i);
    }
    // model.agrees: a verdict from the store's reply is the model's.
    if r.kind == Kind::Leased || !t.by_store() || t.decisions.iter().any(|d| d.model.is_none()) {
        return Ok(());
    }
    let outcomes: Vec<&Vec<LimitOutcome>> = t.decisions.iter().filter_map(|d| d.model.as_ref()).collect();
    let admit = outcomes.iter().all(|o| o.iter().all(|o| o.allowed));
    count_agrees(world, i);
    let expected = if admit { 200 } else { 429 };
    if status != expected {
        return Err(format!(
            "model.agrees: {} answered {status}, the model {} ({:?})",
            r.name,
            if admit { "admits" } else { "refuses" },
            outcomes
        ));
    }
    let single = t.decisions.len() == 1;
    if !admit && single {
        let Some(State::Replied(reply)) = &t.verdict else { return Ok(()) };
        let worst = most_restrictive(&shown(&r.specs, outcomes[0])).unwrap();
        let want = retry_after_seconds(&worst.outcome).to_string();
        let got = reply.headers.text("retry-after").unwrap_or("-");
        if got != want {
            return Err(format!("model.agrees: {} Retry-After {got}, the model {want} ({:?})", r.name, outcomes[0]));
        }
        if r.kind != Kind::Slots && r.kind != Kind::SlotsOpen {
            let got = reply.headers.text("x-ratelimit-remaining").unwrap_or("-");
            let want = worst.outcome.remaining.to_string();
            if got != want {
                return Err(format!(
                    "model.agrees: {} refused with remaining {got}, the model {want} ({:?})",
                    r.name, outcomes[0]
                ));
            }
        }
    }
    if !admit && single && world.calm && r.kind == Kind::Rate {
        lower_bounds(world, i)?;
    }
    Ok(())
}

/// In a calm schedule, a request the store refused had no room in some
/// limit, by the simulation's own count of what the store admitted before.
fn lower_bounds(world: &mut World, i: usize) -> Result<(), String> {
    let t = &world.streams[i];
    let (rule, user, epoch) = (t.rule, t.user, t.decisions[0].epoch);
    let d = t.decisions[0].clone();
    let r = world.rules.get(rule).clone();
    let mut room = Vec::new();
    for (l, spec) in r.specs.iter().enumerate() {
        let before: Vec<Seen> = seen(world, rule, user, l, epoch).into_iter().filter(|u| u.stream != i).collect();
        let before: Vec<Seen> = before.into_iter().filter(|u| u.travel_ms <= d.travel_ms).collect();
        if before.iter().any(|u| u.allowed.is_none()) {
            return Ok(());
        }
        let uses: Vec<Seen> = before.into_iter().filter(|u| u.allowed == Some(true)).collect();
        let (w, limit) = (spec.window_ms, spec.limit);
        let offset = d.decision.limits[l].offset_ms.unwrap_or(0);
        let fits = match spec.algorithm {
            Algorithm::FixedWindow => {
                let points: Vec<Use> = uses.iter().map(|u| Use { at: u.caller_ms, units: u.units }).collect();
                in_fixed_window(&points, w, offset, d.caller_ms) < limit
            }
            Algorithm::SlidingWindow => {
                let points: Vec<Use> = uses.iter().map(|u| Use { at: u.caller_ms, units: u.units }).collect();
                sliding_estimate(&points, w, d.caller_ms) + u128::from(w) <= u128::from(limit) * u128::from(w)
            }
            Algorithm::SlidingLog => {
                let points: Vec<Use> = uses.iter().map(|u| Use { at: u.store_ms, units: u.units }).collect();
                in_log_window(&points, w, d.store_ms) < limit
            }
            Algorithm::TokenBucket | Algorithm::Gcra => {
                let points: Vec<Use> = uses.iter().map(|u| Use { at: u.travel_ms, units: u.units }).collect();
                bucket_room(&points, limit, w, spec.burst, d.travel_ms) >= i128::from(w)
            }
            Algorithm::Concurrency => false,
        };
        room.push((spec.algorithm, fits));
    }
    for (algorithm, _) in &room {
        world.count(exact_name(*algorithm));
    }
    if room.iter().all(|(_, fits)| *fits) {
        return Err(format!(
            "{}: refused with room in every limit of {} (a request the limit has room for is admitted)",
            exact_name(room[0].0),
            r.name
        ));
    }
    Ok(())
}

/// `deny_cache.sound`: a refusal from the deny cache never outlives the
/// store's own answer it came from, and (while the model follows the
/// store) the store would have refused the request too: a client whose
/// refunds landed is not refused from the cache.
fn deny_cache_sound(world: &mut World, i: usize) -> Result<(), String> {
    let t = &world.streams[i];
    let (proxy, user, rule, wall) = (t.proxy, t.user, t.rule, t.begun_wall);
    let r = world.rules.get(rule).clone();
    world.count("deny_cache.sound");
    // The store's refusals on this proxy that a cache entry can come from:
    // each until its retry instant (from the request's clock: the module's
    // own reckoning); unknown when neither the model nor a 429 of that
    // decision alone tells it.
    let mut until = Some(0);
    // A refusal from before the store last forgot everything (a flush) may
    // still be cached: no refund or clock made that one wrong.
    let mut before_a_flush = false;
    for s in world.streams.iter().filter(|s| s.proxy == proxy && s.user == user && !s.cached) {
        for d in s.decisions.iter().filter(|d| d.rule == rule && d.answered == Some(true)) {
            before_a_flush |= d.epoch < world.epoch;
            let retry = match (&d.model, &s.verdict) {
                (Some(m), _) => m.iter().filter(|o| !o.allowed).filter_map(|o| o.retry_after_ms).max(),
                (None, Some(State::Replied(reply))) if s.decisions.len() == 1 => {
                    reply.headers.text("retry-after").and_then(|r| r.parse::<u64>().ok()).map(|r| r * 1000)
                }
                (None, Some(State::Continued)) => None,
                _ => {
                    until = None;
                    break;
                }
            };
            until = until.map(|u| retry.map_or(u, |r| u.max(s.begun_wall + r)));
        }
    }
    match until {
        None => {}
        Some(until) if until > wall => {}
        _ => {
            return Err(format!(
            "deny_cache.sound: {} refused from the deny cache at {wall}, past every refusal the store gave ({until:?})",
            r.name
        ))
        }
    }
    if before_a_flush {
        return Ok(());
    }
    let identity = world.identity_of(user, rule);
    let Some(last) = world.ledger.last.get(&(identity, r.name.to_string())).cloned() else { return Ok(()) };
    let cost = if world.streams[i].reserved > 0 { world.streams[i].reserved } else { 1 };
    let store_ms = world.store_ms();
    let Some(model) = world.ledger.model.as_mut() else { return Ok(()) };
    let checks: Vec<LimitCall> = last
        .limits
        .iter()
        .map(|l| {
            let op = match l.op {
                Op::Check(a) => Op::Check(a),
                _ => Op::Check(cost),
            };
            LimitCall { rule: &l.rule, spec: l.spec, op, offset_ms: l.offset_ms }
        })
        .collect();
    let outcomes = model.decide(wall, store_ms, &last.call(&checks));
    if outcomes.iter().all(|o| o.allowed) {
        return Err(format!(
            "deny_cache.sound: {} refused from the deny cache at {wall}, the store would admit it ({outcomes:?}; {})",
            r.name,
            since_the_refusal(world, i)
        ));
    }
    Ok(())
}

/// What changed since the store's refusal a cached one of stream `i` came
/// from (the latest on its proxy): the units it was asked and this
/// request asks, and the refunds that landed since.
fn since_the_refusal(world: &World, i: usize) -> String {
    let t = &world.streams[i];
    let refused = world
        .streams
        .iter()
        .filter(|s| s.proxy == t.proxy && s.user == t.user && !s.cached)
        .flat_map(|s| &s.decisions)
        .filter(|d| d.rule == t.rule && d.answered == Some(true))
        .filter(|d| d.model.as_ref().is_some_and(|m| m.iter().any(|o| !o.allowed)))
        .max_by_key(|d| d.store_ms);
    let Some(d) = refused else { return "no refusal of the store known".into() };
    let amount = |op: Op| match op {
        Op::Use(a) | Op::Reserve(a) | Op::Check(a) => a,
        _ => 1,
    };
    let asked = d.decision.limits.iter().map(|l| amount(l.op)).max().unwrap_or(0);
    let identity = world.identity_of(t.user, t.rule);
    let name = world.rules.get(t.rule).name.to_string();
    let refunded: u64 = world
        .ledger
        .settled
        .get(&(identity, name))
        .map_or(0, |s| s.refunds.iter().filter(|(at, _)| *at >= d.store_ms).map(|(_, n)| n).sum());
    let cost = t.reserved.max(1);
    let what = if cost < asked {
        "a smaller request"
    } else if refunded > 0 {
        "refused after refunds"
    } else {
        "no smaller, no refund"
    };
    format!("{what}: the store refused {asked} units, {cost} asked here, {refunded} refunded since")
}

/// The response of a stream let through passed: its rate-limit fields are
/// the model's (`model.agrees`).
pub fn on_response(world: &mut World, i: usize, headers: &HeaderMap) {
    let t = &world.streams[i];
    let r = world.rules.get(t.rule).clone();
    if t.cached
        || t.decisions.len() != 1
        || !t.by_store()
        || matches!(r.kind, Kind::Leased | Kind::Slots | Kind::SlotsOpen)
    {
        return;
    }
    let Some(outcomes) = t.decisions[0].model.clone() else { return };
    count_agrees(world, i);
    let worst = most_restrictive(&shown(&r.specs, &outcomes)).unwrap();
    let got = (headers.text("x-ratelimit-remaining").unwrap_or("-"), headers.text("ratelimit-reset").unwrap_or("-"));
    let want = (worst.outcome.remaining.to_string(), worst.outcome.reset_ms.div_ceil(1000).to_string());
    if got != (want.0.as_str(), want.1.as_str()) {
        let v = format!(
            "model.agrees: {} let through with remaining {} reset {}, the model {} and {} ({outcomes:?}) (client u{}, stream #{i})",
            r.name, got.0, got.1, want.0, want.1, t.user
        );
        world.violations.push(v);
    }
}

/// Once every stream ended and every call settled: slots released,
/// charges made once (and exactly, in a calm schedule), reservations
/// settled. Every violation found.
pub fn wind_down(world: &mut World) -> Vec<String> {
    let mut found: Vec<String> = crate::slots::released(world).err().into_iter().collect();
    for rule in 0..world.rules.len() {
        let kind = world.rules.get(rule).kind;
        for user in 0..crate::schedule::USERS {
            let checked = match kind {
                Kind::ChargedHeader | Kind::ChargedBody => charges(world, rule, user),
                Kind::Reserved | Kind::ReservedBody => settled(world, rule, user),
                _ => Ok(()),
            };
            found.extend(checked.err());
        }
    }
    found
}

/// `charges.once`: the store never holds more of a budget than the ended
/// streams owe; `charges.exact`: in a calm schedule, exactly that.
fn charges(world: &mut World, rule: usize, user: usize) -> Result<(), String> {
    let owed: u64 = world.streams.iter().filter(|t| t.rule == rule && t.user == user).filter_map(|t| t.charged).sum();
    let held = world.window_counts(user, rule);
    let name = world.rules.get(rule).name;
    world.count("charges.once");
    if held > owed {
        return Err(format!(
            "charges.once: {held} units of {name} charged, the ended streams owe {owed} (client u{user})"
        ));
    }
    if world.calm {
        world.count("charges.exact");
        if held != owed {
            return Err(format!(
                "charges.exact: {held} units of {name} charged, the ended streams owe {owed} (a calm schedule, client u{user})"
            ));
        }
    }
    Ok(())
}

/// `reserved.settled`: every reservation the store took was settled to
/// what its stream used (given back whole for a stream gone before the
/// store's answer): in a calm schedule the store was given back exactly
/// the difference; a window never holds more than was reserved.
fn settled(world: &mut World, rule: usize, user: usize) -> Result<(), String> {
    let r = world.rules.get(rule).clone();
    let reserved: u64 = world.streams.iter().filter(|t| t.rule == rule && t.user == user).map(|t| t.reserved).sum();
    if r.specs[0].algorithm == Algorithm::FixedWindow {
        let held = world.window_counts(user, rule);
        world.count("reserved.settled");
        if held > reserved {
            return Err(format!(
                "reserved.settled: the store holds {held} units of {}, more than the {reserved} reserved (client u{user})",
                r.name
            ));
        }
    }
    if !world.calm {
        return Ok(());
    }
    // What the store took and what each stream used in the end.
    let mut owed_back = 0i128;
    for s in 0..world.streams.len() {
        let t = &world.streams[s];
        if t.rule != rule || t.user != user {
            continue;
        }
        for k in 0..t.decisions.len() {
            if allowed(world, s, k) == Some(true) {
                let used = world.streams[s].charged.unwrap_or(0);
                owed_back += i128::from(world.streams[s].reserved) - i128::from(used);
            }
        }
    }
    let identity = world.identity_of(user, rule);
    let got = world.ledger.settled.get(&(identity, r.name.to_string())).cloned().unwrap_or_default();
    let given_back = i128::from(got.refunded) - i128::from(got.charged);
    world.count("reserved.settled");
    if given_back != owed_back {
        return Err(format!(
            "reserved.settled: {} given back {given_back} units (refunds {} less charges {}), the streams leave {owed_back} unused (a calm schedule, client u{user})",
            r.name, got.refunded, got.charged
        ));
    }
    Ok(())
}
