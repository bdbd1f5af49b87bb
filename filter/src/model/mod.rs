//! Reference model of the decision script: the same integer math in Rust,
//! written plainly in i128 where the script keeps pairs and saturations.
//!
//! Used to check the Lua against an independent implementation on random
//! batches, and by the benchmarks' accuracy simulation. The model never
//! forgets a state: an absent or expired key in Redis must behave exactly
//! like the stale state the model keeps (see `stale.rs`), and a key whose
//! TTL were too short would make the script and the model disagree.

#[cfg(test)]
mod exactness;
mod sliding_log;
mod slots;
#[cfg(test)]
mod stale;
mod tat;
mod windows;

use std::collections::BTreeMap;

use crate::algorithm::Algorithm;
use crate::keys::key_code;
use crate::outcome::LimitOutcome;
use crate::spec::{DecisionCall, LimitSpec, Op, TOP};

pub use sliding_log::LogState;
pub use slots::PermitsState;
pub use tat::TatState;
pub use windows::WindowCounts;

/// The stored state of one limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LimitState {
    /// sliding_window and fixed_window: counts per window index.
    Windows(WindowCounts),
    /// token_bucket and gcra: how far the client is ahead of its allowance.
    Tat(TatState),
    /// sliding_log.
    Log(LogState),
    /// concurrency.
    Permits(PermitsState),
}

impl LimitState {
    /// The state of a limit nobody has used yet.
    pub fn empty(algorithm: Algorithm) -> LimitState {
        match algorithm {
            Algorithm::SlidingWindow | Algorithm::FixedWindow => LimitState::Windows(WindowCounts::default()),
            Algorithm::TokenBucket | Algorithm::Gcra => LimitState::Tat(TatState::default()),
            Algorithm::SlidingLog => LimitState::Log(LogState::default()),
            Algorithm::Concurrency => LimitState::Permits(PermitsState::default()),
        }
    }

    /// Decides one limit at `now` (the clock its algorithm reads), a fixed
    /// window shifted by `offset_ms`. The second value is the state to keep
    /// if the op writes: a use the whole decision admits, or a charge.
    pub fn decide(&self, spec: &LimitSpec, now: u64, op: Op, offset_ms: u64) -> (LimitOutcome, LimitState) {
        match self {
            LimitState::Windows(w) => {
                let (d, next) = if spec.algorithm == Algorithm::FixedWindow {
                    w.fixed(spec, now, op, offset_ms)
                } else {
                    w.sliding(spec, now, op)
                };
                (d, LimitState::Windows(next))
            }
            LimitState::Tat(t) => {
                let (d, next) = t.decide(spec, now, op);
                (d, LimitState::Tat(next))
            }
            LimitState::Log(l) => {
                let (d, next) = l.decide(spec, now, op);
                (d, LimitState::Log(next))
            }
            LimitState::Permits(s) => {
                let (d, next) = s.decide(spec, now, op);
                (d, LimitState::Permits(next))
            }
        }
    }

    /// A use of `cost` on aligned windows: `decide` with `Op::Use`.
    pub fn check(&self, spec: &LimitSpec, now: u64, cost: u64) -> (LimitOutcome, LimitState) {
        self.decide(spec, now, Op::Use(cost), 0)
    }
}

/// Where a limit's state lives: its keys' identity, rule, code and window.
type LimitKey = (String, String, &'static str, u64);

/// Every limit's state, keyed like the script's keys, decided in batches
/// like the script: in order, each decision seeing those before it.
#[derive(Clone, Debug, Default)]
pub struct Model {
    limits: BTreeMap<LimitKey, LimitState>,
}

impl Model {
    /// No state at all.
    pub fn new() -> Model {
        Model::default()
    }

    /// Decides one decision: sliding and fixed windows on `caller_now`, the
    /// others on `store_now` (Redis TIME). A request-time decision writes
    /// its uses only if every limit allows; a charge always writes.
    pub fn decide(&mut self, caller_now: u64, store_now: u64, decision: &DecisionCall<'_>) -> Vec<LimitOutcome> {
        let charge = decision.limits.iter().any(|l| l.op.after_the_fact());
        let mut outcomes = Vec::with_capacity(decision.limits.len());
        let mut writes = Vec::with_capacity(decision.limits.len());
        for l in decision.limits {
            // A concurrency key has no window in its name (see `keys`).
            let window = if l.spec.algorithm == Algorithm::Concurrency { 0 } else { l.spec.window_ms };
            let key: LimitKey =
                (decision.identity.to_string(), l.rule.to_string(), key_code(&l.spec, l.offset_ms), window);
            let empty;
            let state = match self.limits.get(&key) {
                Some(s) => s,
                None => {
                    empty = LimitState::empty(l.spec.algorithm);
                    &empty
                }
            };
            let now = if l.spec.algorithm.windowed() { caller_now } else { store_now };
            let (d, next) = state.decide(&l.spec, now, l.op, l.offset_ms.unwrap_or(0));
            if !matches!(l.op, Op::Check(_)) {
                writes.push((key, next));
            }
            outcomes.push(d);
        }
        if charge || outcomes.iter().all(|d| d.allowed) {
            self.limits.extend(writes);
        }
        outcomes
    }

    /// Decides a batch in order.
    pub fn decide_all(
        &mut self,
        caller_now: u64,
        store_now: u64,
        batch: &[DecisionCall<'_>],
    ) -> Vec<Vec<LimitOutcome>> {
        batch.iter().map(|d| self.decide(caller_now, store_now, d)).collect()
    }
}

/// All the limits of one client, each used for a cost, all or nothing.
#[derive(Clone, Debug)]
pub struct ClientModel {
    limits: Vec<(LimitSpec, LimitState)>,
}

impl ClientModel {
    /// A client with these limits and no history.
    pub fn new(specs: &[LimitSpec]) -> ClientModel {
        ClientModel { limits: specs.iter().map(|s| (*s, LimitState::empty(s.algorithm))).collect() }
    }

    /// Decides one request. Windowed algorithms use `caller_now`, the others
    /// `store_now` (Redis TIME), as the script does. Nothing is consumed
    /// unless every limit allows.
    pub fn decide(&mut self, caller_now: u64, store_now: u64, costs: &[u64]) -> Vec<LimitOutcome> {
        let mut outcomes = Vec::with_capacity(self.limits.len());
        let mut next = Vec::with_capacity(self.limits.len());
        for ((spec, state), cost) in self.limits.iter().zip(costs) {
            let now = if spec.algorithm.windowed() { caller_now } else { store_now };
            let (d, s) = state.check(spec, now, *cost);
            outcomes.push(d);
            next.push(s);
        }
        if outcomes.iter().all(|d| d.allowed) {
            for ((_, state), s) in self.limits.iter_mut().zip(next) {
                *state = s;
            }
        }
        outcomes
    }
}

/// 2^53 - 1, where the script saturates times and counts.
pub(crate) const TOP_I: i128 = TOP as i128;

/// floor(a / b) for b > 0.
pub(crate) fn floor_div(a: i128, b: i128) -> i128 {
    a.div_euclid(b)
}

/// ceil(a / b) for b > 0.
pub(crate) fn ceil_div(a: i128, b: i128) -> i128 {
    -(-a).div_euclid(b)
}

/// Narrows a non-negative model quantity to the u64 the decision carries.
pub(crate) fn to_u64(x: i128) -> u64 {
    u64::try_from(x.max(0)).unwrap_or(u64::MAX)
}

/// A denied decision; remaining floored at 0, `None` = never fits.
pub(crate) fn denied(remaining: i128, reset: i128, retry: Option<i128>) -> LimitOutcome {
    LimitOutcome {
        allowed: false,
        remaining: to_u64(remaining),
        reset_ms: to_u64(reset),
        retry_after_ms: retry.map(to_u64),
        overridden: None,
    }
}

/// An allowed decision; remaining floored at 0.
pub(crate) fn allowed(remaining: i128, reset: i128) -> LimitOutcome {
    LimitOutcome { allowed: true, remaining: to_u64(remaining), reset_ms: to_u64(reset), retry_after_ms: Some(0), overridden: None }
}
