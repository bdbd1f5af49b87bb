//! Bad arguments give a Redis error reply and change nothing: every
//! argument of the batch is checked before any key is touched.

use host_tests::script::evalsha;
use ratelimit::algorithm::Algorithm;
use ratelimit::call::{DecisionCall, LimitCall, Op, ScriptCall};

use crate::fixture::{spec, Fixture, T0};

#[test]
fn bad_specs_amounts_ops_and_offsets_are_refused_with_state_untouched() {
    let mut f = Fixture::new();
    let good = spec(Algorithm::TokenBucket, 5, 1000, 5);
    let sw = spec(Algorithm::SlidingWindow, 5, 1000, 5);
    f.decide("c1", T0, &[good, sw], 1);
    let before = f.snapshot();
    // ARGV: now, S=2, tb spec (2..5), sw spec (6..9), D=1 (10), L=2 (11),
    // limit 1: spec, op, amount, offset (12..15), limit 2 (16..19).
    let cases: &[(usize, &str, &str)] = &[
        (18, "nan", "decision 1 limit 2: amount must be a positive integer (times window below 2^53)"),
        (18, "inf", "decision 1 limit 2: amount must be a positive integer (times window below 2^53)"),
        (18, "-inf", "decision 1 limit 2: amount must be a positive integer (times window below 2^53)"),
        (18, "-1", "decision 1 limit 2: amount must be a positive integer (times window below 2^53)"),
        (18, "0", "decision 1 limit 2: amount must be a positive integer (times window below 2^53)"),
        (18, "abc", "decision 1 limit 2: amount must be a positive integer (times window below 2^53)"),
        (18, "1.5", "decision 1 limit 2: amount must be a positive integer (times window below 2^53)"),
        (18, "10000000000000", "decision 1 limit 2: amount must be a positive integer (times window below 2^53)"),
        (17, "x", "decision 1 limit 2: op must be u, k or g"),
        (16, "3", "decision 1 limit 2: unknown spec"),
        (16, "0", "decision 1 limit 2: unknown spec"),
        (19, "5", "decision 1 limit 2: offset must be an integer from 0 to window - 1 (fixed_window only)"),
        (19, "-1", "decision 1 limit 2: offset must be an integer from 0 to window - 1 (fixed_window only)"),
        (7, "0", "spec 2: limit must be a positive integer"),
        (7, "nan", "spec 2: limit must be a positive integer"),
        (8, "0", "spec 2: window must be a positive integer of ms"),
        (9, "0", "spec 2: burst must be a positive integer"),
        (6, "leaky", "spec 2: unknown algorithm"),
        (7, "10000000000000", "spec 2: limit or burst times window is too large"),
        (10, "0", "the decision count must be an integer from 1 to 256"),
        (10, "257", "the decision count must be an integer from 1 to 256"),
        (1, "65", "the spec count must be an integer from 1 to 64"),
    ];
    for &(index, value, message) in cases {
        let mut call = Fixture::call("c1", T0 + 1, &[good, sw], 1);
        call.args[index] = value.to_string();
        let err = evalsha(&mut f.conn, &f.sha, &call, Some(T0 + 1)).unwrap_err();
        assert!(err.contains(&format!("ratelimit: {message}")), "{index} = {value}: got {err}");
        assert_eq!(f.snapshot(), before, "{index} = {value} changed state");
    }
}

fn batch(decisions: &[(&str, Vec<LimitCall<'static>>)], now: u64) -> ScriptCall {
    let d: Vec<DecisionCall> = decisions.iter().map(|(id, l)| DecisionCall { identity: id, limits: l }).collect();
    ScriptCall::new("t", now, &d)
}

#[test]
fn malformed_calls_are_refused() {
    let mut f = Fixture::new();
    let limit = spec(Algorithm::SlidingWindow, 5, 1000, 5);
    let mut call = Fixture::call("c1", T0, &[limit], 1);
    call.keys.pop();
    let err = evalsha(&mut f.conn, &f.sha, &call, Some(T0)).unwrap_err();
    assert!(err.contains("ratelimit: expected 2 keys for these limits"), "{err}");

    let mut call = Fixture::call("c1", T0, &[limit], 1);
    call.args[0] = "-5".into();
    let err = evalsha(&mut f.conn, &f.sha, &call, Some(T0)).unwrap_err();
    assert!(err.contains("ratelimit: now must be a non-negative integer"), "{err}");

    let mut call = Fixture::call("c1", T0, &[limit], 1);
    call.args.push("1".into());
    let err = evalsha(&mut f.conn, &f.sha, &call, Some(T0)).unwrap_err();
    assert!(err.contains("ratelimit: expected 12 arguments for these decisions"), "{err}");

    let big = spec(Algorithm::SlidingLog, 10_001, 1000, 1);
    let err = evalsha(&mut f.conn, &f.sha, &Fixture::call("c1", T0, &[big], 1), Some(T0)).unwrap_err();
    assert!(err.contains("ratelimit: spec 1: sliding_log limit is at most 10000"), "{err}");

    let log = spec(Algorithm::SlidingLog, 10, 1000, 1);
    let charge = |s| LimitCall { rule: "r", spec: s, op: Op::Charge(3), offset_ms: None };
    let use_ = |s| LimitCall { rule: "r", spec: s, op: Op::Use(1), offset_ms: None };
    let err = evalsha(&mut f.conn, &f.sha, &batch(&[("c", vec![charge(log)])], T0), Some(T0)).unwrap_err();
    assert!(err.contains("ratelimit: decision 1 limit 1: sliding_log cannot carry a charge"), "{err}");
    let err =
        evalsha(&mut f.conn, &f.sha, &batch(&[("c", vec![use_(limit), charge(limit)])], T0), Some(T0)).unwrap_err();
    assert!(err.contains("ratelimit: decision 1: a charge cannot be mixed with use or check"), "{err}");

    // A bad decision anywhere in a batch: nothing of the batch runs.
    let err = evalsha(
        &mut f.conn,
        &f.sha,
        &batch(&[("a", vec![use_(limit)]), ("b", vec![use_(limit)]), ("c", vec![charge(log)])], T0),
        Some(T0),
    )
    .unwrap_err();
    assert!(err.contains("decision 3 limit 1: sliding_log cannot carry a charge"), "{err}");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut f.conn).unwrap();
    assert!(keys.is_empty(), "refused calls wrote {keys:?}");
}
