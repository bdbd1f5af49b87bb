//! The model of a concurrency limit: the slots held, each with when it
//! expires (`lua/concurrency.lua`).

use std::collections::BTreeMap;

use crate::algorithm::CC_RETRY_MS;
use crate::outcome::LimitOutcome;
use crate::spec::{LimitSpec, Op, PermitId};

/// Slots by id, each with its expiry (ms, the store's clock).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PermitsState(BTreeMap<PermitId, u64>);

impl PermitsState {
    /// Slots held at `now`.
    pub fn held(&self, now: u64) -> u64 {
        self.0.values().filter(|&&until| until > now).count() as u64
    }

    /// Decides `op` at `now`: the outcome, and the slots after it.
    pub fn decide(&self, spec: &LimitSpec, now: u64, op: Op) -> (LimitOutcome, PermitsState) {
        let mut next = PermitsState(self.0.iter().filter(|(_, &until)| until > now).map(|(&k, &v)| (k, v)).collect());
        let count = next.0.len() as u64;
        // A take's streams held outside the store count in what remains.
        let mut outside = 0;
        let (allowed, retry) = match op {
            Op::Release(id) => (next.0.remove(&id).is_some(), 0),
            Op::Renew(id) => (next.0.insert(id, now + spec.window_ms).is_some(), 0),
            _ if count + op.amount() <= spec.limit => {
                if let Op::Take(id, here) = op {
                    next.0.insert(id, now + spec.window_ms);
                    outside = here;
                }
                (true, 0)
            }
            _ => (false, CC_RETRY_MS),
        };
        let remaining = spec.limit.saturating_sub(next.0.len() as u64 + outside);
        (LimitOutcome { allowed, remaining, reset_ms: 0, retry_after_ms: Some(retry), overridden: None }, next)
    }
}
