//! Properties of the model on random histories of uses, checks and
//! charges, for every algorithm: every retry_after is exact (one
//! millisecond earlier still refused, at that instant admitted), and every
//! reply is within the bounds `ScriptCall::decode` accepts.

use super::{LimitSpec, LimitState};
use crate::algorithm::Algorithm;
use crate::outcome::LimitOutcome;
use crate::spec::{DecisionCall, LimitCall, Op, TOP};
use crate::store::script_call::ScriptCall;
use crate::time::Instant;

/// xorshift64*: a seeded, dependency-free PRNG for reproducible cases.
pub(super) struct Rng(pub u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// A small random limit of `algorithm`, now and then a huge one.
    pub fn spec(&mut self, algorithm: Algorithm) -> LimitSpec {
        if self.below(8) == 0 {
            // The largest window for a small limit: exact math near 2^53.
            let limit = 1 + self.below(3);
            let burst = 1 + self.below(3);
            return LimitSpec { algorithm, limit, window_ms: ((1 << 53) - 1) / limit.max(burst), burst };
        }
        LimitSpec {
            algorithm,
            limit: 1 + self.below(12),
            window_ms: [7, 50, 333, 1000, 2500][self.below(5) as usize],
            burst: 1 + self.below(12),
        }
    }

    /// A random op within (or just past) the limit's capacity; no charge
    /// on sliding_log.
    pub fn op(&mut self, spec: &LimitSpec) -> Op {
        let capacity = capacity(spec);
        match self.below(4) {
            0 | 1 => Op::Use(1 + self.below(capacity + 1)),
            2 => Op::Check(1 + self.below(capacity + 1)),
            _ if spec.algorithm == Algorithm::SlidingLog => Op::Use(1),
            _ => Op::Charge(1 + self.below(3 * capacity)),
        }
    }
}

/// Units the limit can hold.
pub(super) fn capacity(spec: &LimitSpec) -> u64 {
    if matches!(spec.algorithm, Algorithm::TokenBucket | Algorithm::Gcra) {
        spec.burst
    } else {
        spec.limit
    }
}

/// Whether the op's state is kept: an admitted use, or a charge.
pub(super) fn writes(op: Op, d: &LimitOutcome) -> bool {
    matches!(op, Op::Charge(_)) || (matches!(op, Op::Use(_)) && d.allowed)
}

/// The decision as the script's four integers.
fn wire(d: &LimitOutcome) -> [i64; 4] {
    let int = |x: u64| i64::try_from(x).unwrap();
    [i64::from(d.allowed), int(d.remaining), int(d.reset_ms), d.retry_after_ms.map_or(-1, int)]
}

#[test]
#[wasm_bindgen_test::wasm_bindgen_test]
fn retry_after_is_exact_and_replies_are_bounded_for_every_algorithm_and_op() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut checked = 0;
    for case in 0..500 {
        let spec = rng.spec(Algorithm::RATES[case % 5]);
        let offset = if spec.algorithm == Algorithm::FixedWindow { rng.below(spec.window_ms) } else { 0 };
        let mut state = LimitState::empty(spec.algorithm);
        let mut now = 1_700_000_000_000 + rng.below(10_000);
        for _ in 0..60 {
            now += [0, 0, 1, 3, 40, 200, 900][rng.below(7) as usize];
            let op = rng.op(&spec);
            let (d, next) = state.decide(&spec, now, op, offset);
            let limits = [LimitCall { rule: "r", spec, op, offset_ms: Some(offset) }];
            let call = ScriptCall::new("t", Instant::from_ms(now), &[DecisionCall { identity: "c", limits: &limits }]);
            assert_eq!(call.decode(&wire(&d).to_vec().into()), Ok(vec![Ok(vec![d])]), "{spec:?} {op:?}: out of bounds");
            if writes(op, &d) {
                state = next;
            }
            if d.allowed {
                continue;
            }
            let Some(retry) = d.retry_after_ms else {
                assert!(op.amount() > capacity(&spec), "{spec:?} {op:?}: -1 for an amount that fits");
                continue;
            };
            if retry == TOP {
                continue; // saturated: the true wait is longer than 2^53 - 1 ms
            }
            // A charge reports when one unit is back; the others when the amount fits.
            let probe = if let Op::Charge(_) = op { Op::Check(1) } else { Op::Check(op.amount()) };
            assert!(retry > 0, "{spec:?}: denied with retry 0 at {now}");
            let early = state.decide(&spec, now + retry - 1, probe, offset).0;
            assert!(!early.allowed, "{spec:?} {op:?}: admitted 1 ms early");
            assert!(state.decide(&spec, now + retry, probe, offset).0.allowed, "{spec:?} {op:?}: refused at retry");
            checked += 1;
        }
    }
    assert!(checked > 3000, "only {checked} denials checked");
}
