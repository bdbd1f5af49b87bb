//! Reference model of the decision script: the same integer math in Rust.
//!
//! Used to check the Lua against an independent implementation on random
//! sequences, and by the benchmarks' accuracy simulation. An absent or
//! expired key in Redis is the model's "no state": if a key's TTL were too
//! short, the script and the model would disagree.

#[cfg(test)]
mod exactness;
mod gcra;
mod sliding_log;
mod token_bucket;
mod windows;

use crate::algorithm::Algorithm;
use crate::decision::Decision;

pub use gcra::GcraState;
pub use sliding_log::LogState;
pub use token_bucket::BucketState;
pub use windows::WindowCounts;

/// One limit's parameters as the script receives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitSpec {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Requests (cost units) per window.
    pub limit: u64,
    /// Window length in milliseconds.
    pub window_ms: u64,
    /// Bucket capacity (token_bucket) or back-to-back requests (gcra).
    pub burst: u64,
}

/// The stored state of one limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LimitState {
    /// sliding_window and fixed_window: counts per window index.
    Windows(WindowCounts),
    /// token_bucket.
    Bucket(BucketState),
    /// sliding_log.
    Log(LogState),
    /// gcra.
    Gcra(GcraState),
}

impl LimitState {
    /// The state of a limit nobody has used yet.
    pub fn empty(algorithm: Algorithm) -> LimitState {
        match algorithm {
            Algorithm::SlidingWindow | Algorithm::FixedWindow => LimitState::Windows(WindowCounts::default()),
            Algorithm::TokenBucket => LimitState::Bucket(BucketState::default()),
            Algorithm::SlidingLog => LimitState::Log(LogState::default()),
            Algorithm::Gcra => LimitState::Gcra(GcraState::default()),
        }
    }

    /// Decides one limit at `now` for `cost`; the second value is the state
    /// to keep if the whole request is admitted.
    pub fn check(&self, spec: &LimitSpec, now: u64, cost: u64) -> (Decision, LimitState) {
        match self {
            LimitState::Windows(w) => {
                let (d, next) = if spec.algorithm == Algorithm::FixedWindow {
                    w.check_fixed(spec, now, cost)
                } else {
                    w.check_sliding(spec, now, cost)
                };
                (d, LimitState::Windows(next))
            }
            LimitState::Bucket(b) => {
                let (d, next) = b.check(spec, now, cost);
                (d, LimitState::Bucket(next))
            }
            LimitState::Log(l) => {
                let (d, next) = l.check(spec, now, cost);
                (d, LimitState::Log(next))
            }
            LimitState::Gcra(g) => {
                let (d, next) = g.check(spec, now, cost);
                (d, LimitState::Gcra(next))
            }
        }
    }
}

/// All the limits of one client, decided all-or-nothing like the script.
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
    pub fn decide(&mut self, caller_now: u64, store_now: u64, costs: &[u64]) -> Vec<Decision> {
        let mut decisions = Vec::with_capacity(self.limits.len());
        let mut next = Vec::with_capacity(self.limits.len());
        for ((spec, state), cost) in self.limits.iter().zip(costs) {
            let now = if spec.algorithm.windowed() { caller_now } else { store_now };
            let (d, s) = state.check(spec, now, *cost);
            decisions.push(d);
            next.push(s);
        }
        if decisions.iter().all(|d| d.allowed) {
            for ((_, state), s) in self.limits.iter_mut().zip(next) {
                *state = s;
            }
        }
        decisions
    }
}

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

/// A denied decision.
pub(crate) fn denied(remaining: i128, reset: i128, retry: Option<i128>) -> Decision {
    Decision {
        allowed: false,
        remaining: to_u64(remaining),
        reset_ms: to_u64(reset),
        retry_after_ms: retry.map(to_u64),
    }
}

/// An allowed decision.
pub(crate) fn allowed(remaining: i128, reset: i128) -> Decision {
    Decision { allowed: true, remaining: to_u64(remaining), reset_ms: to_u64(reset), retry_after_ms: Some(0) }
}
