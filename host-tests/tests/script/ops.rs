//! Hand-derived tables of checks (`k`) and charges (`g`) per algorithm,
//! with debts: a charge past the limit admits nothing until it is repaid,
//! and retry_after is exact (1 ms earlier refused, at it admitted). A check
//! never writes; a charge always does. Then refunds (`f`) of reservations
//! (`v` on buckets).

use ratelimit::algorithm::Algorithm::*;
use ratelimit::spec::Op::{self, Charge as G, Check as K, Reserve as V, Use as U};
use ratelimit::spec::{LimitSpec, Mark};

use crate::fixture::{limit, row, spec, Fixture, Row, T0};
use ratelimit::time::Instant;

/// (ms after T0, op, (allowed, remaining, reset_ms, retry_after_ms; -1 = never))
type Step = (u64, Op, Row);

fn run(spec: LimitSpec, steps: &[Step]) {
    let mut f = Fixture::new();
    for (i, &(t, op, want)) in steps.iter().enumerate() {
        let before = f.snapshot_at(T0 + t);
        let got = f.one("c", T0 + t, &[limit(spec, op)]);
        assert_eq!(row(&got[0]), want, "{} step {} (t={t}, {op:?})", spec.algorithm.name(), i + 1);
        if let K(_) = op {
            assert_eq!(f.snapshot(), before, "{} step {}: a check wrote", spec.algorithm.name(), i + 1);
            assert!(f.written.is_empty(), "{} step {}: a check set a TTL", spec.algorithm.name(), i + 1);
        }
        if let G(_) = op {
            assert_eq!(f.written.len(), 1, "{} step {}: a charge always writes", spec.algorithm.name(), i + 1);
        }
    }
}

#[test]
fn sliding_window_checks_charges_and_debt() {
    run(
        spec(SlidingWindow, 5, 1000, 5),
        &[
            (0, K(5), (true, 5, 0, 0)),   // the whole limit remains; nothing to reset
            (0, K(6), (false, 5, 0, -1)), // a reserve above the limit never fits
            (0, G(3), (true, 2, 2000, 0)),
            // 7 > 5: a debt. Next window 7 x (1 - f) + 1 <= 5 from f = 429/1000.
            (100, G(4), (false, 0, 1900, 1329)),
            (1428, K(1), (false, 0, 572, 1)), // 7 x 0.572 + 1 > 5: one ms early
            (1429, K(1), (true, 1, 571, 0)),  // 7 x 0.571 = 3.997: room for 1
            (1429, U(1), (true, 0, 1571, 0)),
            (1429, U(1), (false, 0, 1571, 143)), // 7 x (1 - f) + 2 <= 5 from f = 572/1000
            (3000, K(5), (true, 5, 0, 0)),       // two windows later the debt is gone
            // A debt of 200 limits: the next window is refused until f = 996/1000.
            (3000, G(1000), (false, 0, 2000, 1996)),
            (4995, K(1), (false, 0, 5, 1)),
            (4996, K(1), (true, 1, 4, 0)),
        ],
    );
}

#[test]
fn fixed_window_checks_charges_and_debt() {
    run(
        spec(FixedWindow, 5, 1000, 5),
        &[
            (0, K(5), (true, 5, 1000, 0)),
            (0, K(6), (false, 5, 1000, -1)),
            (100, U(2), (true, 3, 900, 0)),
            (200, G(10), (false, 0, 800, 800)), // 12 of 5: nothing until the window ends
            (999, K(1), (false, 0, 1, 1)),
            (999, U(1), (false, 0, 1, 1)),
            (1000, K(5), (true, 5, 1000, 0)), // the debt ends with its window
            (1000, G(4), (true, 1, 1000, 0)), // one unit still remains
            (1000, G(1), (false, 0, 1000, 1000)),
        ],
    );
}

#[test]
fn token_bucket_checks_charges_and_debt_capped_at_one_bucket() {
    // 5 per second (a token every 200 ms), capacity 5.
    run(
        spec(TokenBucket, 5, 1000, 5),
        &[
            (0, K(5), (true, 5, 0, 0)),
            (0, K(6), (false, 5, 0, -1)),
            (0, G(3), (true, 2, 600, 0)),
            // 13 charged of 5 tokens: the debt stops at -5 (2 s to refill,
            // 1.2 s until one token is back), not -8.
            (0, G(10), (false, 0, 2000, 1200)),
            (1199, K(1), (false, 0, 801, 1)),
            (1200, U(1), (true, 0, 1000, 0)),
            (1200, U(1), (false, 0, 1000, 200)),
            (2200, K(5), (true, 5, 0, 0)),
        ],
    );
}

#[test]
fn gcra_checks_charges_and_debt_capped_at_one_tolerance_past_it() {
    // 5 per second (one per 200 ms), 2 back to back.
    run(
        spec(Gcra, 5, 1000, 2),
        &[
            (0, K(2), (true, 2, 0, 0)),
            (0, K(3), (false, 2, 0, -1)),
            // 5 charged, 2 tolerated: the TAT stops 800 ms ahead, not 1000.
            (0, G(5), (false, 0, 800, 600)),
            (599, K(1), (false, 0, 201, 1)),
            (600, U(1), (true, 0, 400, 0)),
            (600, G(1), (false, 0, 600, 400)),
            (1000, U(1), (true, 0, 400, 0)),
        ],
    );
}

#[test]
fn gcra_counts_in_thirds_of_a_millisecond() {
    // 3 per second: one every 333.33 ms (1000 units of 1/3 ms), 2 back to back.
    run(
        spec(Gcra, 3, 1000, 2),
        &[
            (0, U(1), (true, 1, 334, 0)),
            (0, U(1), (true, 0, 667, 0)),
            (0, U(1), (false, 0, 667, 334)),
            (333, K(1), (false, 0, 334, 1)), // 1001 units ahead: one unit too many
            (334, U(1), (true, 0, 666, 0)),
            (334, G(1), (false, 0, 1000, 666)),
            (1000, K(1), (true, 1, 334, 0)),
        ],
    );
}

#[test]
fn sliding_log_checks() {
    run(
        spec(SlidingLog, 5, 1000, 5),
        &[
            (0, K(5), (true, 5, 0, 0)),
            (0, K(6), (false, 5, 0, -1)),
            (0, U(2), (true, 3, 1000, 0)),
            (100, U(3), (true, 0, 1000, 0)),
            (200, K(1), (false, 0, 900, 800)), // the oldest entry (0) leaves at 1000
            (200, K(3), (false, 0, 900, 900)), // the third oldest (100) at 1100
            (1000, K(2), (true, 2, 100, 0)),
            (1000, K(3), (false, 2, 100, 100)),
        ],
    );
}

/// A refund (`f`) of a reservation at T0 + `at`.
fn f(amount: u64, at: u64) -> Op {
    Op::Refund { amount, at: Instant::from_ms(T0 + at), mark: None }
}

#[test]
fn sliding_window_refunds_go_back_into_the_reservations_window() {
    run(
        spec(SlidingWindow, 10, 1000, 10),
        &[
            (100, U(8), (true, 2, 1900, 0)), // a reservation of 8
            (200, f(5, 100), (true, 0, 0, 0)),
            (200, K(5), (true, 7, 1800, 0)),  // it cost 3
            (1100, U(4), (true, 3, 1900, 0)), // 3 x 0.9 + 4 = 6.7
            // Into the previous window, whose count now weighs 0.8: 1 x 0.8 + 4.
            (1200, f(2, 100), (true, 0, 0, 0)),
            (1200, K(6), (false, 5, 1800, 800)), // the next window: 4 x (1 - f) + 6 <= 10 at once
            (1200, K(5), (true, 5, 1800, 0)),
            (1200, f(100, 1100), (true, 0, 0, 0)), // never below 0
            (1200, K(9), (true, 9, 800, 0)),
            (3500, f(5, 100), (true, 0, 0, 0)), // its window is gone: nothing
            (3500, K(10), (true, 10, 0, 0)),
        ],
    );
}

#[test]
fn fixed_window_refunds_go_back_into_the_reservations_window() {
    run(
        spec(FixedWindow, 10, 1000, 10),
        &[
            (100, U(8), (true, 2, 900, 0)),
            (900, f(6, 100), (true, 0, 0, 0)),
            (900, K(8), (true, 8, 100, 0)),
            (1000, U(10), (true, 0, 1000, 0)),
            (1500, f(2, 900), (true, 0, 0, 0)), // the previous window's key is gone
            (1500, K(1), (false, 0, 500, 500)),
        ],
    );
}

/// A step of a reservation's life: (ms after T0, what is done, the reply as
/// a table row; for a reservation, the row its mark stands for).
enum Life {
    /// A reservation of this many units, whose mark is kept (`v`).
    Reserve(u64),
    /// The kept reservation's refund of this many units (`f`).
    Refund(u64),
    /// Anything else, on the same bucket.
    Op(Op),
}

/// Runs a reservation's life on `spec`.
fn live(spec: LimitSpec, steps: &[(u64, Life, Row)]) {
    let mut f = Fixture::new();
    let mut mark = None;
    for (i, (t, step, want)) in steps.iter().enumerate() {
        let op = match step {
            Life::Reserve(units) => V(*units),
            Life::Refund(amount) => Op::Refund { amount: *amount, at: Instant::from_ms(T0), mark },
            Life::Op(op) => *op,
        };
        let mut got = f.one("c", T0 + t, &[limit(spec, op)])[0];
        if let Life::Reserve(_) = step {
            let (outcome, m) = Mark::of(&spec, &got).unwrap_or_else(|| panic!("step {}: no mark in {got:?}", i + 1));
            (got, mark) = (outcome, Some(m));
        }
        assert_eq!(row(&got), *want, "{} step {} (t={t})", spec.algorithm.name(), i + 1);
    }
}

/// 10,000 tokens per 10 s, 10,000 at once: a token a ms.
fn ten_thousand(algorithm: ratelimit::algorithm::Algorithm) -> LimitSpec {
    spec(algorithm, 10_000, 10_000, 10_000)
}

#[test]
fn token_bucket_refunds_lower_the_lead_never_past_a_full_bucket() {
    live(
        spec(TokenBucket, 10, 1000, 10),
        &[
            (0, Life::Reserve(8), (true, 2, 800, 0)),
            (100, Life::Refund(5), (true, 0, 0, 0)), // 7 missing after 100 ms, 2 after the refund
            (100, Life::Op(K(8)), (true, 8, 200, 0)),
            (100, Life::Refund(100), (true, 0, 0, 0)),
            (100, Life::Op(K(10)), (true, 10, 0, 0)),
        ],
    );
}

#[test]
fn a_refund_after_the_bucket_refilled_gives_nothing_back() {
    // Issue 41: 9,050 reserved and held while the bucket refills; 9,990
    // spent; then the refund of 9,040. Had the request cost 10 from the
    // start, the bucket would hold 10 now, as it does: nothing comes back,
    // and 1,000 more wait until 990 ms have refilled.
    for algorithm in [TokenBucket, Gcra] {
        live(
            ten_thousand(algorithm),
            &[
                (0, Life::Reserve(9_050), (true, 950, 9_050, 0)),
                (10_500, Life::Op(U(9_990)), (true, 10, 9_990, 0)),
                (10_600, Life::Refund(9_040), (true, 0, 0, 0)),
                (10_600, Life::Op(U(1_000)), (false, 110, 9_890, 890)),
                (11_490, Life::Op(U(1_000)), (true, 0, 10_000, 0)),
            ],
        );
    }
}

#[test]
fn a_refund_when_nothing_else_was_spent_gives_back_all_of_it() {
    live(
        ten_thousand(TokenBucket),
        &[
            (0, Life::Reserve(9_050), (true, 950, 9_050, 0)),
            (1_000, Life::Refund(5_000), (true, 0, 0, 0)), // 8,050 missing, then 3,050
            (1_000, Life::Op(K(6_950)), (true, 6_950, 3_050, 0)),
            (1_000, Life::Op(K(6_951)), (false, 6_950, 3_050, 1)),
            // Held until most of it refilled: the rest is gone, as before.
            (9_000, Life::Refund(4_000), (true, 0, 0, 0)),
            (9_000, Life::Op(K(10_000)), (true, 10_000, 0, 0)),
        ],
    );
}

#[test]
fn a_refund_after_others_spent_gives_back_what_the_bucket_would_hold() {
    live(
        ten_thousand(Gcra),
        &[
            (0, Life::Reserve(4_000), (true, 6_000, 4_000, 0)),
            (100, Life::Op(U(3_000)), (true, 3_100, 6_900, 0)),
            // Never near full: the whole 3,500 back.
            (200, Life::Refund(3_500), (true, 0, 0, 0)),
            (200, Life::Op(K(6_700)), (true, 6_700, 3_300, 0)),
            (200, Life::Op(K(6_701)), (false, 6_700, 3_300, 1)),
        ],
    );
    live(
        ten_thousand(TokenBucket),
        &[
            (0, Life::Reserve(9_050), (true, 950, 9_050, 0)),
            (9_000, Life::Op(U(5_000)), (true, 4_950, 5_050, 0)),
            // 50 were still missing of the 9,050: had the request cost 10,
            // the bucket would miss the 5,000 alone.
            (9_000, Life::Refund(9_040), (true, 0, 0, 0)),
            (9_000, Life::Op(K(5_000)), (true, 5_000, 5_000, 0)),
            (9_000, Life::Op(K(5_001)), (false, 5_000, 5_000, 1)),
        ],
    );
}

#[test]
fn refunds_of_reservations_held_at_once_land_in_any_order() {
    // Four reservations of 20,000 at once (80,000 of 100,000 missing), each
    // using 3,000; their refunds land last taken first, then the others.
    // However they land, the bucket misses exactly the 12,000 used (less the
    // 200 refilled meanwhile): what one reservation gave back no longer
    // counts as added when the others' are judged.
    for algorithm in [TokenBucket, Gcra] {
        for order in [[3, 2, 1, 0], [1, 3, 0, 2], [0, 1, 2, 3]] {
            let spec = spec(algorithm, 100_000, 100_000, 100_000);
            let mut f = Fixture::new();
            let marks: Vec<Option<Mark>> = (0..4)
                .map(|_| {
                    let got = f.one("c", T0, &[limit(spec, V(20_000))])[0];
                    Mark::of(&spec, &got).map(|(_, m)| m)
                })
                .collect();
            for i in order {
                let refund = Op::Refund { amount: 17_000, at: Instant::from_ms(T0), mark: marks[i] };
                assert_eq!(row(&f.one("c", T0 + 200, &[limit(spec, refund)])[0]), (true, 0, 0, 0));
            }
            let left = f.one("c", T0 + 200, &[limit(spec, K(1))])[0];
            assert_eq!(row(&left).1, 88_200, "{} refunds in the order {order:?}", algorithm.name());
        }
        // The four merged into one refund (as a proxy merges refunds still
        // waiting for a call): the oldest mark, less the others' 51,000.
        let spec = spec(algorithm, 100_000, 100_000, 100_000);
        let mut f = Fixture::new();
        let oldest = Mark::of(&spec, &f.one("c", T0, &[limit(spec, V(20_000))])[0]).map(|(_, m)| m);
        for _ in 0..3 {
            f.one("c", T0, &[limit(spec, V(20_000))]);
        }
        let merged = oldest.map(|m| Mark { count: m.count + 51_000, ..m });
        let refund = Op::Refund { amount: 68_000, at: Instant::from_ms(T0), mark: merged };
        f.one("c", T0 + 200, &[limit(spec, refund)]);
        assert_eq!(row(&f.one("c", T0 + 200, &[limit(spec, K(1))])[0]).1, 88_200, "{} merged", algorithm.name());
    }
}
