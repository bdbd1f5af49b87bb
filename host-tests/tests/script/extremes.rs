//! Every algorithm at the largest and the smallest values the configuration
//! accepts (limit × window and burst × window below 2^53, cost up to
//! 1,000,000, sliding_log up to 10,000), against the model, decision by
//! decision: the script's pairs and saturations must match plain i128 math.

use ratelimit::algorithm::Algorithm::{self, *};
use ratelimit::model::Model;
use ratelimit::spec::LimitSpec;
use ratelimit::spec::Op::{self, Charge as G, Check as K, Use as U};
use ratelimit::spec::{DecisionCall, LimitCall};

use crate::fixture::{max_ttl, spec, Fixture, T0};

const MAX: u64 = (1 << 53) - 1;
const COST: u64 = 1_000_000;

/// Runs `steps` (ms to advance, op) on one limit against the model. Fixed
/// windows run shifted by the largest offset, window - 1.
fn against_model(spec: LimitSpec, steps: &[(u64, Op)]) {
    let mut f = Fixture::new();
    let mut model = Model::new();
    let offset_ms = (spec.algorithm == FixedWindow).then(|| spec.window_ms - 1);
    let mut now = T0;
    for (i, &(advance, op)) in steps.iter().enumerate() {
        now += advance;
        assert!(now < MAX, "the steps must keep now below 2^53");
        let limits = [LimitCall { rule: "r", spec, op, offset_ms }];
        let batch = [DecisionCall { identity: "c", limits: &limits }];
        let got = f.run(now, &batch).unwrap_or_else(|e| panic!("{spec:?} step {i} ({op:?}): {e}"));
        assert_eq!(got, model.decide_all(now, now, &batch), "{spec:?} step {} ({op:?} at +{})", i, now - T0);
        for (key, ttl) in &f.written {
            assert!(*ttl >= 0 && *ttl <= max_ttl(&spec), "{key}: PTTL {ttl}, max {}", max_ttl(&spec));
        }
    }
}

/// Uses, checks and charges at `cost` and at the capacity, into debt and
/// out of it, over steps of 0, 1 ms, half a window and a window or two.
fn workout(spec: LimitSpec, cost: u64) -> Vec<(u64, Op)> {
    let capacity = if matches!(spec.algorithm, TokenBucket | Gcra) { spec.burst } else { spec.limit };
    let w = spec.window_ms;
    // Charges as large as the protocol takes (amount × window < 2^53).
    let charge = if spec.algorithm == SlidingLog { U(cost) } else { G(MAX / w) };
    let mut steps = vec![(0, K(capacity)), (0, U(cost)), (0, U(capacity)), (1, K(capacity))];
    if (capacity + 1).saturating_mul(w) <= MAX {
        steps.push((0, U(capacity + 1))); // never fits
    }
    steps.extend([(0, charge), (0, charge), (1, K(1)), (1, U(cost))]);
    // Later steps only where now stays below 2^53.
    for advance in [w / 2, w, 1, 2 * w, w / 3, 1 << 40, 1 << 49] {
        if advance < (MAX - T0) / 8 {
            steps.extend([(advance, K(cost)), (0, U(cost)), (0, charge), (1, U(1))]);
        }
    }
    steps
}

fn each_algorithm(limit: u64, window_ms: u64, burst: u64, cost: u64) {
    for algorithm in Algorithm::RATES {
        if algorithm == SlidingLog && limit > 10_000 {
            continue;
        }
        let burst = if matches!(algorithm, TokenBucket | Gcra) { burst } else { limit };
        let s = spec(algorithm, limit, window_ms, burst);
        against_model(s, &workout(s, cost));
    }
}

#[test]
fn the_largest_limit_of_one_ms_windows() {
    each_algorithm(MAX, 1, MAX, COST);
}

#[test]
fn the_largest_window_of_a_limit_of_one() {
    each_algorithm(1, MAX, 1, 1);
}

#[test]
fn the_largest_limit_and_burst_of_a_day_at_the_largest_cost() {
    each_algorithm(MAX / 86_400_000, 86_400_000, MAX / 86_400_000, COST);
}

#[test]
fn buckets_whose_debt_passes_two_to_the_53_units() {
    // 2 x burst x window ~ 2^54 units: the script keeps it as a pair.
    for algorithm in [TokenBucket, Gcra] {
        for limit in [1, 3, 1 << 20] {
            let window = (1 << 32) / limit.min(1 << 10);
            let s = spec(algorithm, limit, window, MAX / window);
            against_model(s, &workout(s, 1));
        }
    }
}

#[test]
fn sliding_log_at_its_largest_limit_and_cost() {
    let s = spec(SlidingLog, 10_000, MAX / 10_000, 10_000);
    against_model(s, &workout(s, 10_000));
    // One call logs 10,000 entries: the ZADDs are chunked.
    let mut f = Fixture::new();
    let log = spec(SlidingLog, 10_000, 1000, 10_000);
    assert!(f.decide("c", T0, &[log], 10_000)[0].allowed);
    let card: u64 = redis::cmd("ZCARD").arg("t:{c}:r:sl:1000").query(&mut f.conn).unwrap();
    assert_eq!(card, 10_000);
    let d = f.decide("c", T0 + 999, &[log], 1);
    assert_eq!((d[0].allowed, d[0].retry_after_ms), (false, Some(1)));
}

#[test]
fn the_smallest_limits() {
    each_algorithm(1, 1, 1, 1);
    each_algorithm(1, 2, 1, 1);
}
