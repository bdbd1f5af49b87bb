//! Property: once a key's TTL has passed, its state decides exactly like no
//! state at all, for every algorithm and op. So a key Redis keeps a little
//! longer (or a stale state the model keeps forever) changes nothing, and
//! the TTL the script sets (the reset it reports when it writes) is enough.

use super::exactness::{writes, Rng};
use super::LimitState;
use crate::algorithm::Algorithm;

#[test]
#[wasm_bindgen_test::wasm_bindgen_test]
fn a_state_past_its_ttl_decides_like_an_absent_key() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut compared = 0;
    for case in 0..500 {
        let spec = rng.spec(Algorithm::RATES[case % 5]);
        if spec.window_ms > 1 << 40 {
            continue; // a TTL past 2^53 ms cannot be waited out
        }
        let offset = if spec.algorithm == Algorithm::FixedWindow { rng.below(spec.window_ms) } else { 0 };
        let mut state = LimitState::empty(spec.algorithm);
        let mut now = 1_700_000_000_000 + rng.below(10_000);
        let mut expires = None;
        for _ in 0..1 + rng.below(30) {
            now += [0, 1, 3, 40, 200, 900][rng.below(6) as usize];
            let op = rng.op(&spec);
            let (d, next) = state.decide(&spec, now, op, offset);
            if writes(op, &d) {
                state = next;
                expires = Some(now + d.reset_ms);
            }
        }
        let Some(expires) = expires else { continue };
        let empty = LimitState::empty(spec.algorithm);
        for later in [0, 1, 2, rng.below(3 * spec.window_ms)] {
            let at = expires + later;
            let op = rng.op(&spec);
            assert_eq!(
                state.decide(&spec, at, op, offset).0,
                empty.decide(&spec, at, op, offset).0,
                "{spec:?} {op:?} at expiry + {later}"
            );
            compared += 1;
        }
    }
    assert!(compared > 1000, "only {compared} comparisons");
}
