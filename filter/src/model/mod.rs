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
mod overrides;
mod sliding_log;
mod slots;
#[cfg(test)]
mod stale;
mod tat;
mod windows;

use std::collections::BTreeMap;

use crate::algorithm::Algorithm;
use crate::keys::key_code;
use crate::outcome::{LimitOutcome, Overridden};
use crate::spec::{DecisionCall, LimitSpec, Op, TOP};

pub use overrides::ModelOverride;
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

/// What an override does to one limit of a decision.
enum Override {
    /// Refused, with this time left.
    Blocked(u64),
    /// Decided with this spec.
    Limit(LimitSpec),
    /// Decided as configured (the override names no other limit for it).
    Kept,
}

/// Every limit's state, keyed like the script's keys, decided in batches
/// like the script: in order, each decision seeing those before it.
#[derive(Clone, Debug, Default)]
pub struct Model {
    limits: BTreeMap<LimitKey, LimitState>,
    /// Operators' overrides by client and rule, when decisions read them
    /// (`ScriptCall::with_overrides`).
    overrides: Option<BTreeMap<(String, String), ModelOverride>>,
}

/// A limit's key in the model.
fn limit_key(identity: &str, l: &crate::spec::LimitCall<'_>) -> LimitKey {
    // A concurrency key has no window in its name (see `keys`).
    let window = if l.spec.algorithm == Algorithm::Concurrency { 0 } else { l.spec.window_ms };
    (identity.to_string(), l.rule.to_string(), key_code(&l.spec, l.offset_ms), window)
}

impl Model {
    /// No state at all.
    pub fn new() -> Model {
        Model::default()
    }

    /// Decisions read overrides from now on (none is set yet).
    pub fn read_overrides(&mut self) {
        self.overrides.get_or_insert_with(BTreeMap::new);
    }

    /// An operator writes `text` with `ttl_ms` left as the override of
    /// `rule` for `identity` (and decisions read overrides).
    pub fn set_override(&mut self, identity: &str, rule: &str, text: &str, ttl_ms: u64) {
        let o = ModelOverride::parse(text, ttl_ms);
        self.overrides.get_or_insert_with(BTreeMap::new).insert((identity.into(), rule.into()), o);
    }

    /// The override of `rule` for `identity` is gone (deleted, expired).
    pub fn clear_override(&mut self, identity: &str, rule: &str) {
        if let Some(o) = &mut self.overrides {
            o.remove(&(identity.to_string(), rule.to_string()));
        }
    }

    /// What the override of `rule` for `identity` says now, if one is set.
    pub fn override_of(&self, identity: &str, rule: &str) -> Option<&ModelOverride> {
        self.overrides.as_ref()?.get(&(identity.to_string(), rule.to_string()))
    }

    /// Decides one decision: sliding and fixed windows on `caller_now`, the
    /// others on `store_now` (Redis TIME). A request-time decision writes
    /// its uses only if every limit allows; a charge always writes. Read
    /// with overrides, a request-time decision applies a reset first (its
    /// limits' counts gone, concurrency's kept), and is refused by a block;
    /// every limit an override names is decided with its limit.
    pub fn decide(&mut self, caller_now: u64, store_now: u64, decision: &DecisionCall<'_>) -> Vec<LimitOutcome> {
        let charge = decision.limits.iter().any(|l| l.op.after_the_fact());
        let reads = self.overrides.is_some() && decision.limits.iter().any(|l| l.op.reads_overrides());
        let mut read = false;
        let mut reset = false;
        let mut plans: Vec<Option<Override>> = Vec::with_capacity(decision.limits.len());
        for l in decision.limits {
            let o = self.override_of(decision.identity, l.rule).filter(|_| reads).cloned();
            read |= o.is_some();
            plans.push(o.as_ref().map(|o| match o.spec_of(&l.spec) {
                _ if o.block && !charge => Override::Blocked(o.ttl_ms),
                Some(spec) => Override::Limit(spec),
                None => Override::Kept,
            }));
            if o.is_some_and(|o| o.reset && !charge) {
                reset = true;
                if l.spec.algorithm != Algorithm::Concurrency {
                    self.limits.remove(&limit_key(decision.identity, l));
                }
            }
        }
        if reset {
            for l in decision.limits {
                let key = (decision.identity.to_string(), l.rule.to_string());
                let Some(o) = self.overrides.as_mut().and_then(|m| m.get_mut(&key)) else { continue };
                o.reset = false;
                if o.is_empty() {
                    self.clear_override(decision.identity, l.rule);
                }
            }
        }
        let mut outcomes = Vec::with_capacity(decision.limits.len());
        let mut writes = Vec::with_capacity(decision.limits.len());
        for (l, plan) in decision.limits.iter().zip(&plans) {
            let key = limit_key(decision.identity, l);
            let spec = match plan {
                Some(Override::Blocked(ttl)) => {
                    let overridden = Some(Overridden { limit: 0, reset });
                    outcomes.push(LimitOutcome {
                        allowed: false,
                        remaining: 0,
                        reset_ms: *ttl,
                        retry_after_ms: Some(*ttl),
                        overridden,
                    });
                    continue;
                }
                Some(Override::Limit(spec)) => *spec,
                _ => l.spec,
            };
            let empty;
            let state = match self.limits.get(&key) {
                Some(s) => s,
                None => {
                    empty = LimitState::empty(l.spec.algorithm);
                    &empty
                }
            };
            let now = if l.spec.algorithm.windowed() { caller_now } else { store_now };
            let (mut d, next) = state.decide(&spec, now, l.op, l.offset_ms.unwrap_or(0));
            if !matches!(l.op, Op::Check(_)) {
                writes.push((key, next));
            }
            if read {
                d.overridden = Some(Overridden { limit: spec.limit, reset });
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
    LimitOutcome {
        allowed: true,
        remaining: to_u64(remaining),
        reset_ms: to_u64(reset),
        retry_after_ms: Some(0),
        overridden: None,
    }
}
