//! A request whose headers could not be read whole (more field lines than
//! the filter reads, a serialization it cannot parse, a hostcall that
//! failed): no rule's match can be evaluated, and no rule may be skipped
//! for it, or a client could escape every limit by sending enough header
//! lines. Every enforced rule applies through its failure policy (open:
//! the fallback bucket, closed: 503), all such requests sharing one
//! identity; each is counted as a bad request.

use super::plan::plan_limits;
use super::{Decided, Env, Pending, PlannedDecision};
use crate::fingerprint::IdentityDigest;
use crate::identity::digest;
use crate::keys::cluster_slot;
use crate::metrics::{Event, Metrics};
use crate::shared::SharedData;
use crate::store::StoreError;
use crate::time::Instant;

/// The escaped identity every unreadable request shares (`~U` is no
/// escaped text, so no client's identity is this).
const UNREADABLE: &str = "~Unreadable";

/// The outcome of an unreadable request at `now_ms`.
pub(super) fn outcome<S, M>(env: &Env<'_, S, M>, now: Instant) -> Decided
where
    S: SharedData + ?Sized,
    M: Metrics + ?Sized,
{
    let config = env.config;
    let identity = digest(UNREADABLE);
    let identity_digest = IdentityDigest::of(&identity);
    let slot = cluster_slot(&identity);
    let mut decisions = Vec::new();
    for group in config.groups.iter().filter(|g| !g.shadow) {
        let mut limits = Vec::new();
        for &r in &group.rules {
            let rule = &config.rules[r];
            env.metrics.count(r, Event::BadRequest);
            plan_limits(&mut limits, r, rule, rule.cost.max_at_request(), &identity_digest, env.random);
        }
        decisions.push(PlannedDecision {
            rules: group.rules.clone(),
            identity: identity.clone(),
            limits,
            slot,
            digest: identity_digest,
            partition: None,
            lease: None,
            result: Some(Err(StoreError::RequestUnreadable)),
            clock: None,
            prices: Vec::new(),
            marks: Vec::new(),
        });
    }
    Pending::new(now, decisions, Vec::new()).finish(env)
}
