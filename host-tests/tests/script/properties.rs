//! Randomized sequences: the script agrees with the Rust model decision by
//! decision, and every key it leaves has a TTL no longer than needed.

use proptest::prelude::*;
use ratelimit::algorithm::Algorithm;
use ratelimit::model::{ClientModel, LimitSpec};

use crate::fixture::{Fixture, TestClock};

fn limit_spec() -> impl Strategy<Value = LimitSpec> {
    (0..5usize, 1..12u64, prop::sample::select(vec![50u64, 120, 333, 1000, 2500]), 1..12u64)
        .prop_map(|(a, limit, window_ms, burst)| LimitSpec { algorithm: Algorithm::ALL[a], limit, window_ms, burst })
}

/// A client's limits (distinct algorithm and window, as the config requires)
/// and a sequence of (ms to advance, cost) steps.
fn scenario() -> impl Strategy<Value = (Vec<LimitSpec>, Vec<(u64, u64)>)> {
    let limits = prop::collection::vec(limit_spec(), 1..4).prop_map(|mut v| {
        v.sort_by_key(|s| (s.algorithm.code(), s.window_ms));
        v.dedup_by_key(|s| (s.algorithm.code(), s.window_ms));
        v
    });
    let steps = prop::collection::vec((prop::sample::select(vec![0u64, 0, 1, 7, 40, 150, 700, 3000]), 1..4u64), 1..60);
    (limits, steps)
}

/// The longest TTL a key of `spec` may need.
fn max_ttl(spec: &LimitSpec) -> i64 {
    let w = spec.window_ms as i64;
    match spec.algorithm {
        Algorithm::SlidingWindow => 2 * w,
        Algorithm::FixedWindow | Algorithm::SlidingLog => w,
        Algorithm::TokenBucket | Algorithm::Gcra => (spec.burst as i64 * w + spec.limit as i64 - 1) / spec.limit as i64,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn script_agrees_with_the_model_and_leaves_no_key_without_a_bounded_ttl((limits, steps) in scenario()) {
        let mut f = Fixture::new();
        let mut model = ClientModel::new(&limits);
        let mut clock = TestClock::new();
        for (i, &(advance, cost)) in steps.iter().enumerate() {
            let now = clock.advance(advance);
            let got = f.decide("c", now, &limits, cost);
            let want = model.decide(now, now, &vec![cost; limits.len()]);
            prop_assert_eq!(&got, &want, "step {} at +{} ms, cost {}, limits {:?}", i, now - crate::fixture::T0, cost, limits);
            for (key, ttl) in f.keys_with_ttl() {
                let spec = limits
                    .iter()
                    .find(|s| key.contains(&format!(":{}:{}", s.algorithm.code(), s.window_ms)))
                    .unwrap();
                // -1 = no TTL (the defect); -2 = expired since KEYS; 0 = under 1 ms left.
                prop_assert!(ttl != -1 && ttl <= max_ttl(spec), "{} has PTTL {} (max {})", key, ttl, max_ttl(spec));
            }
        }
    }
}
