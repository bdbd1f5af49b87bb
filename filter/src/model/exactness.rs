//! Property: every retry_after the model gives is exact, for every
//! algorithm, on random histories. One millisecond earlier the request is
//! still refused; at that instant it is admitted.

use super::{LimitSpec, LimitState};
use crate::algorithm::Algorithm;

/// xorshift64*: a seeded, dependency-free PRNG for reproducible cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
#[wasm_bindgen_test::wasm_bindgen_test]
fn retry_after_is_exact_for_every_algorithm() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut checked = 0;
    for case in 0..400 {
        let algorithm = Algorithm::ALL[case % 5];
        let limit = 1 + rng.below(12);
        let spec = LimitSpec {
            algorithm,
            limit,
            window_ms: [7, 50, 333, 1000, 2500][rng.below(5) as usize],
            burst: 1 + rng.below(12),
        };
        let mut state = LimitState::empty(algorithm);
        let mut now = 1_700_000_000_000 + rng.below(10_000);
        for _ in 0..60 {
            now += [0, 0, 1, 3, 40, 200, 900][rng.below(7) as usize];
            let capacity =
                if matches!(algorithm, Algorithm::TokenBucket | Algorithm::Gcra) { spec.burst } else { limit };
            let cost = 1 + rng.below(capacity);
            let (d, next) = state.check(&spec, now, cost);
            if d.allowed {
                state = next;
                continue;
            }
            let retry = d.retry_after_ms.expect("a cost within capacity always fits eventually");
            assert!(retry > 0, "{spec:?}: denied with retry 0 at {now}");
            assert!(!state.check(&spec, now + retry - 1, cost).0.allowed, "{spec:?} cost {cost}: admitted 1 ms early");
            assert!(state.check(&spec, now + retry, cost).0.allowed, "{spec:?} cost {cost}: refused at retry_after");
            checked += 1;
        }
    }
    assert!(checked > 1000, "only {checked} denials checked");
}
