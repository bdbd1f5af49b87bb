//! The store decision of one key group: what each limit of each rule
//! applying asks of the script, for one identity.

use super::reads::window_offset;
use super::{fallback_limit, PlannedLimit};
use crate::algorithm::Algorithm;
use crate::config::{Config, Cost, Counts, Rule};
use crate::fingerprint::IdentityDigest;
use crate::shared::SharedData;
use crate::spec::{Op, PermitId};
use crate::time::Instant;

/// What the limits of rule `r` do for a request of `cost` (a cost known
/// after the response is only checked against the reserve now, unless it
/// is reserved: then `cost` is the request's worst case); a
/// concurrency limit takes a permit whose id comes from `random`.
pub(super) fn plan_limits(
    out: &mut Vec<PlannedLimit>,
    r: usize,
    rule: &Rule,
    cost: u64,
    digest: &IdentityDigest,
    random: u64,
) {
    for (i, l) in rule.limits.iter().enumerate() {
        let op = match (l.counts, &rule.cost) {
            _ if l.spec.algorithm == Algorithm::Concurrency => Op::Take(permit_id(random, r, i), 0),
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

/// Each take of a concurrency permit in `limits` also counts the client's
/// streams this proxy admitted from its local share while the store failed
/// and has not moved into the store yet (a renewal moves them once the
/// store answers): the store cannot see them, and right after an outage
/// the client must still hold at most `limit` streams. One shared-data
/// read per concurrency limit decided.
pub(super) fn count_local_streams<S: SharedData + ?Sized>(
    shared: &S,
    config: &Config,
    limits: &mut [PlannedLimit],
    digest: &IdentityDigest,
    now: Instant,
) {
    for l in limits {
        let Op::Take(id, _) = l.op else { continue };
        let Some(rule) = config.rules.get(l.rule) else { continue };
        let Some(limit) = rule.limits.get(l.limit) else { continue };
        let share = fallback_limit(rule, limit, digest, 1);
        l.op = Op::Take(id, crate::fallback::streams_held(shared, config.deny_cache.slots, &share, now));
    }
}

/// A permit id for limit `i` of rule `r` of a request whose random number is
/// `random`: ids of one request differ, and the ids of the fleet's
/// streams collide no more than random 64-bit numbers do (each VM's
/// generator is seeded from the host's entropy). Never 0.
fn permit_id(random: u64, r: usize, i: usize) -> PermitId {
    let salt = ((r as u64) << 32) ^ (i as u64);
    PermitId(crate::fingerprint::combine(random, &[salt]).max(1))
}
