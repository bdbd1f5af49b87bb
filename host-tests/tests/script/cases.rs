//! Table-driven cases per algorithm at controlled instants: the first
//! request, exhausting the limit, the exact retry_after instant (1 ms earlier
//! is refused, at it admitted), rollover, cost > 1 and cost beyond capacity.

use ratelimit::algorithm::Algorithm::*;
use ratelimit::outcome::LimitOutcome;
use ratelimit::spec::LimitSpec;

use crate::fixture::{spec, Fixture, T0};
use ratelimit::time::Instant;

/// (ms after T0, cost, allowed, remaining, reset_ms, retry_after_ms; -1 = never)
type Row = (u64, u64, bool, u64, u64, i64);

fn run(limit: LimitSpec, rows: &[Row]) {
    let mut f = Fixture::new();
    for (i, &(t, cost, allowed, remaining, reset_ms, retry)) in rows.iter().enumerate() {
        let got = f.decide("c1", T0 + t, &[limit], cost);
        let want = LimitOutcome {
            allowed,
            remaining,
            reset_ms,
            retry_after_ms: if retry < 0 { None } else { Some(retry as u64) },
            overridden: None,
        };
        assert_eq!(got, vec![want], "{} row {} (t={t}, cost={cost})", limit.algorithm.name(), i + 1);
    }
}

#[test]
fn sliding_window_table() {
    run(
        spec(SlidingWindow, 5, 1000, 5),
        &[
            (0, 1, true, 4, 2000, 0), // first request
            (100, 1, true, 3, 1900, 0),
            (100, 1, true, 2, 1900, 0),
            (100, 1, true, 1, 1900, 0),
            (100, 1, true, 0, 1900, 0),     // exhausted
            (999, 1, false, 0, 1001, 201),  // next window: 5 x 0.8 + 1 fits at e=200
            (1199, 1, false, 0, 801, 1),    // 5 x 0.801 + 1 > 5: one ms early
            (1200, 1, true, 0, 1800, 0),    // 5 x 0.8 + 1 = 5: exactly then
            (1500, 1, true, 0, 1500, 0),    // f = 0.5: 5 x 0.5 + 2 = 4.5
            (1500, 1, false, 0, 1500, 100), // 2.5 + 3 > 5; fits at e=600
            (1599, 1, false, 0, 1401, 1),
            (1600, 1, true, 0, 1400, 0),     // 5 x 0.4 + 3 = 5
            (3000, 1, true, 4, 2000, 0),     // two windows later: window 1 forgotten
            (3000, 4, true, 0, 2000, 0),     // cost 4
            (3000, 1, false, 0, 2000, 1200), // 5 x 0.8 + 1 fits at 4200
            (5000, 6, false, 5, 0, -1),      // cost above the limit never fits
        ],
    );
}

#[test]
fn fixed_window_table() {
    run(
        spec(FixedWindow, 5, 1000, 5),
        &[
            (0, 1, true, 4, 1000, 0),
            (500, 4, true, 0, 500, 0),
            (999, 1, false, 0, 1, 1),
            (1000, 1, true, 4, 1000, 0), // rollover, exactly at retry_after
            (1000, 5, false, 4, 1000, 1000),
            (1000, 6, false, 4, 1000, -1),
            (1500, 4, true, 0, 500, 0),
        ],
    );
}

#[test]
fn token_bucket_table() {
    // 5 per second (one token per 200 ms), capacity 5.
    run(
        spec(TokenBucket, 5, 1000, 5),
        &[
            (0, 1, true, 4, 200, 0),
            (0, 4, true, 0, 1000, 0),
            (0, 1, false, 0, 1000, 200),
            (199, 1, false, 0, 801, 1),
            (200, 1, true, 0, 1000, 0),
            (100_000, 1, true, 4, 200, 0), // refilled to capacity, not beyond
            (100_000, 5, false, 4, 200, 200),
            (100_000, 6, false, 4, 200, -1), // larger than capacity
        ],
    );
}

#[test]
fn token_bucket_capacity_is_independent_of_rate() {
    // 5 per second, but only 2 back to back.
    run(
        spec(TokenBucket, 5, 1000, 2),
        &[
            (0, 1, true, 1, 200, 0),
            (0, 1, true, 0, 400, 0),
            (0, 1, false, 0, 400, 200),
            (10_000, 2, true, 0, 400, 0),
            (10_000, 3, false, 0, 400, -1),
        ],
    );
}

#[test]
fn sliding_log_table() {
    run(
        spec(SlidingLog, 5, 1000, 5),
        &[
            (0, 1, true, 4, 1000, 0),
            (100, 2, true, 2, 1000, 0),
            (200, 2, true, 0, 1000, 0),
            (300, 1, false, 0, 900, 700), // the entry at 0 leaves at 1000
            (999, 1, false, 0, 201, 1),
            (1000, 1, true, 0, 1000, 0),
            (1000, 2, false, 0, 1000, 100), // the 2nd oldest (100) must leave
            (1100, 2, true, 0, 1000, 0),
            (1100, 6, false, 0, 1000, -1),
        ],
    );
}

#[test]
fn sliding_log_keeps_one_member_per_admitted_request_within_one_ms() {
    let mut f = Fixture::new();
    let limit = spec(SlidingLog, 10, 1000, 10);
    f.decide("c1", T0, &[limit], 3);
    f.decide("c1", T0, &[limit], 2);
    f.decide("c1", T0, &[limit], 9); // denied: must not be logged
    let key = &Fixture::call("c1", T0, &[limit], 1).keys[0];
    let members: Vec<String> = redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).query(&mut f.conn).unwrap();
    let want: Vec<String> = (0..5).map(|i| format!("{T0}:{i}")).collect();
    assert_eq!(members, want);
}

#[test]
fn gcra_table() {
    // 5 per second = one per 200 ms, 2 back to back.
    run(
        spec(Gcra, 5, 1000, 2),
        &[
            (0, 1, true, 1, 200, 0),
            (0, 1, true, 0, 400, 0),
            (0, 1, false, 0, 400, 200),
            (199, 1, false, 0, 201, 1),
            (200, 1, true, 0, 400, 0),
            (1000, 2, true, 0, 400, 0), // idle again: a burst of 2 at once
            (5000, 3, false, 2, 0, -1), // more than the burst never fits
        ],
    );
}

#[test]
fn production_script_sha_is_what_redis_computes() {
    let mut f = Fixture::new();
    let sha = host_tests::script::load(&mut f.conn, ratelimit::script::SCRIPT);
    assert_eq!(sha, ratelimit::script::sha1_hex());
}

#[test]
fn every_key_written_has_a_real_ttl_no_longer_than_needed() {
    // The plain test build: Redis keeps the TTLs the script sets.
    use ratelimit::spec::{DecisionCall, Op};
    let mut f = Fixture::new();
    for (i, algorithm) in [SlidingWindow, FixedWindow, TokenBucket, SlidingLog, Gcra].into_iter().enumerate() {
        let limit = spec(algorithm, 5, 60_000, 3);
        let op = if algorithm == SlidingLog { Op::Use(2) } else { Op::Charge(20) };
        let limits = [crate::fixture::limit(limit, Op::Use(1)), crate::fixture::limit(limit, op)];
        for (j, l) in limits.iter().enumerate() {
            let identity = format!("c{i}{j}");
            let call = ratelimit::store::script_call::ScriptCall::new(
                "t",
                Instant::from_ms(T0),
                &[DecisionCall { identity: &identity, limits: std::slice::from_ref(l) }],
            );
            let sha = f.plain_sha.clone();
            host_tests::script::evalsha(&mut f.conn, &sha, &call, Some(T0)).unwrap();
            let ttl: i64 = redis::cmd("PTTL").arg(&call.keys[0]).query(&mut f.conn).unwrap();
            let max = crate::fixture::max_ttl(&limit);
            assert!(ttl > 0 && ttl <= max, "{}: PTTL {ttl}, max {max}", call.keys[0]);
        }
    }
}
