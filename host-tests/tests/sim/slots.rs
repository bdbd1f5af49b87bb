//! The concurrency invariants: streams in flight, right after an outage,
//! and slots released once every stream ended (docs/concurrency.md).

use crate::rules::Kind;
use crate::world::{Tracked, World};

/// Whether stream `t` may have lost its slot in the store while it ran:
/// its proxy could not renew it for `max_hold / 2` (its store calls met
/// faults, or the wall clock the renewals are timed on stepped back that
/// far): then it counts again at its next renewal, one over until a
/// stream ends.
fn exposed(world: &World, t: &Tracked, max_hold: u64) -> bool {
    let Some(since) = t.admitted else { return false };
    let faulty: u64 =
        world.faulty[t.proxy].iter().map(|&(from, to)| to.min(world.host_ms).saturating_sub(from.max(since))).sum();
    let backs: u64 = world.wall_backs.iter().filter(|b| b.0 >= since).map(|b| b.2).sum();
    faulty + backs >= max_hold / 2
}

/// Streams of `user` let through by concurrency rule `rule` (and, for
/// `cc`, by `ccx`, which takes a `cc` slot) and not ended, begun since the
/// store last forgot its slots.
fn open<'a>(world: &'a World, user: usize, rule: &'a str) -> impl Iterator<Item = &'a Tracked> {
    world.streams.iter().filter(move |t| {
        let name = world.rules.get(t.rule).name;
        t.user == user
            && t.live
            && t.admitted.is_some()
            && t.epoch == world.epoch
            && (name == rule || (rule == "cc" && name == "ccx"))
    })
}

/// `concurrency.in_flight`: `cc` streams in flight never exceed its limit,
/// but for those that may have lost their slot.
pub fn in_flight(world: &mut World) -> Result<(), String> {
    let Some(cc) = world.rules.index("cc") else { return Ok(()) };
    let spec = world.rules.get(cc).specs[0];
    for user in 0..crate::schedule::USERS {
        let streams: Vec<&Tracked> = open(world, user, "cc").collect();
        let exposed = streams.iter().filter(|t| exposed(world, t, spec.window_ms)).count() as u64;
        let n = streams.len() as u64;
        world.count("concurrency.in_flight");
        if n.saturating_sub(exposed) > spec.limit {
            return Err(format!(
                "concurrency.in_flight: {n} streams in flight, limit {} ({exposed} may have lost their slot) (client u{user})",
                spec.limit
            ));
        }
    }
    Ok(())
}

/// `concurrency.after_outage`: a `co` stream the store let through leaves
/// at most the limit in flight, the streams the local shares let through
/// during an outage included, but for those it could not see: let through
/// by its own proxy's share after it was planned (concurrent with it,
/// during an outage), by another proxy's share (unseen here until that
/// proxy's next renewal: README's bound with a fleet), or that may have
/// lost their slot.
pub fn after_outage(world: &mut World) -> Result<(), String> {
    let Some(co) = world.rules.index("co").filter(|&r| world.rules.get(r).kind == Kind::SlotsOpen) else {
        return Ok(());
    };
    let spec = world.rules.get(co).specs[0];
    let step = world.step;
    let fresh: Vec<usize> = (0..world.streams.len())
        .filter(|&i| {
            let t = &world.streams[i];
            t.rule == co && t.admitted_step == step && t.by_store() && t.epoch == world.epoch
        })
        .collect();
    // When the store ran a stream's decision (its place among all).
    let ran = |t: &Tracked| t.decisions.iter().map(|d| d.seq).max();
    for i in fresh {
        let s = &world.streams[i];
        // In flight when the store admitted it: not the streams another
        // decision admitted after it (theirs is checked in turn).
        let streams: Vec<&Tracked> = open(world, s.user, "co").filter(|t| !(t.by_store() && ran(t) > ran(s))).collect();
        let local = |t: &&&Tracked| !t.by_store();
        let unseen = streams.iter().filter(local).filter(|t| t.proxy == s.proxy && t.admitted_step > s.begun).count();
        let others = streams.iter().filter(local).filter(|t| t.proxy != s.proxy).count();
        let exposed = streams.iter().filter(|t| exposed(world, t, spec.window_ms)).count();
        let n = streams.len();
        world.count("concurrency.after_outage");
        if n.saturating_sub(unseen + others + exposed) > spec.limit as usize {
            return Err(format!(
                "concurrency.after_outage: the store admitted a stream while {n} are in flight ({unseen} let through since it was planned, {others} by other proxies' shares, {exposed} may have lost their slot), limit {} (client u{}, a stream begun at step {})",
                spec.limit, s.user, s.begun
            ));
        }
    }
    Ok(())
}

/// `concurrency.released`: once every stream ended and every call
/// settled, a client's slots left in the store are only those a release
/// the store did not take left to expire and those of streams a reload
/// took away.
pub fn released(world: &mut World) -> Result<(), String> {
    for name in ["cc", "co"] {
        let Some(rule) = world.rules.index(name) else { continue };
        let failures = u64::try_from(world.sum(&format!("ratelimit.{name}.slot_store_errors")).max(0)).unwrap_or(0);
        for user in 0..crate::schedule::USERS {
            let reloaded = world
                .streams
                .iter()
                .filter(|t| t.user == user && t.reloaded)
                .filter(|t| {
                    let n = world.rules.get(t.rule).name;
                    n == name || (name == "cc" && n == "ccx")
                })
                .count() as u64;
            let left = world.slots_held(user, rule);
            world.count("concurrency.released");
            if left > failures + reloaded {
                return Err(format!(
                    "concurrency.released: {left} {name} slots left in the store after every stream ended, {failures} releases failed, {reloaded} streams lost in reloads (client u{user})"
                ));
            }
        }
    }
    Ok(())
}
