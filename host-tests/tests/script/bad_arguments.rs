//! Bad arguments give an error reply naming what is wrong, and no key is
//! touched: everything is validated before the first key is read, so an
//! error in the last decision leaves the first decision's keys alone too.

use host_tests::script::evalsha;
use ratelimit::algorithm::Algorithm;
use ratelimit::spec::{DecisionCall, Mark, Op, PermitId};
use ratelimit::store::script_call::ScriptCall;

use crate::fixture::{limit, spec, Fixture, T0};
use ratelimit::time::Instant;

/// Two decisions: c1 uses a token bucket (spec 1) and a sliding window
/// (spec 2), c2 the sliding window.
fn good_call(now: u64) -> ScriptCall {
    let (tb, sw) = (spec(Algorithm::TokenBucket, 5, 1000, 5), spec(Algorithm::SlidingWindow, 5, 1000, 5));
    let first = [limit(tb, Op::Use(1)), limit(sw, Op::Use(1))];
    let second = [limit(sw, Op::Use(1))];
    ScriptCall::new(
        "t",
        Instant::from_ms(now),
        &[DecisionCall { identity: "c1", limits: &first }, DecisionCall { identity: "c2", limits: &second }],
    )
}

/// Runs `call` on the plain test build and returns Redis's error text;
/// fails if it succeeded or changed any key.
fn refused(f: &mut Fixture, call: &ScriptCall, now: u64) -> String {
    let before = f.snapshot();
    let sha = f.plain_sha.clone();
    let err = evalsha(&mut f.conn, &sha, call, Some(now)).expect_err("the call was accepted");
    assert_eq!(f.snapshot(), before, "a refused call changed state: {err}");
    err
}

#[test]
fn every_bad_argument_is_named_and_changes_nothing() {
    let mut f = Fixture::new();
    f.run_call(&good_call(T0), T0).unwrap();
    assert_eq!(good_call(T0).args.len(), 28, "the layout the indices below assume");
    // ARGV: 0 now, 1 S, 2-5 spec 1, 6-9 spec 2, 10 H, 11-19 shape 1 (two
    // limits), 20-24 shape 2, 25 D, 26-27 the decisions' shapes.
    // (index in ARGV from 0, value, message)
    let cases: &[(usize, &str, &str)] = &[
        (0, "-5", "now must be a non-negative integer"),
        (0, "1.5", "now must be a non-negative integer"),
        (0, "nan", "now must be a non-negative integer"),
        (0, "9007199254740992", "now must be a non-negative integer"),
        (1, "0", "the spec count must be an integer from 1 to 64"),
        (1, "65", "the spec count must be an integer from 1 to 64"),
        (1, "9", "too few arguments"),
        (6, "leaky", "spec 2: unknown algorithm"),
        (7, "0", "spec 2: limit must be a positive integer"),
        (7, "nan", "spec 2: limit must be a positive integer"),
        (7, "1.5", "spec 2: limit must be a positive integer"),
        (8, "0", "spec 2: window must be a positive integer of ms"),
        (9, "inf", "spec 2: burst must be a positive integer"),
        (7, "10000000000000", "spec 2: limit or burst times window is too large"),
        (9, "10000000000000", "spec 2: limit or burst times window is too large"),
        (10, "0", "the shape count must be an integer from 1 to 256"),
        (10, "257", "the shape count must be an integer from 1 to 256"),
        (10, "3", "too few arguments"),
        (11, "0", "shape 1: the limit count must be an integer from 1 to 64"),
        (11, "65", "shape 1: the limit count must be an integer from 1 to 64"),
        (21, "0", "shape 2 limit 1: spec must be an index into the specs"),
        (21, "3", "shape 2 limit 1: spec must be an index into the specs"),
        (21, "1.5", "shape 2 limit 1: spec must be an index into the specs"),
        (22, "x", "shape 2 limit 1: op must be u, v, k, g, f, r or n"),
        (22, "Z", "shape 2 limit 1: op must be u, v, k, g, f, r or n"),
        // In capitals, an op starts a rule reading overrides: one key more.
        (22, "U", "expected 6 keys for these decisions"),
        (17, "U", "shape 1: reading overrides, its first limit starts a rule"),
        (23, "nan", "shape 2 limit 1: amount must be a positive integer"),
        (23, "inf", "shape 2 limit 1: amount must be a positive integer"),
        (23, "-inf", "shape 2 limit 1: amount must be a positive integer"),
        (23, "-1", "shape 2 limit 1: amount must be a positive integer"),
        (23, "0", "shape 2 limit 1: amount must be a positive integer"),
        (23, "abc", "shape 2 limit 1: amount must be a positive integer"),
        (23, "1.5", "shape 2 limit 1: amount must be a positive integer"),
        (23, "10000000000000", "shape 2 limit 1: amount times window is too large"),
        (24, "-1", "shape 2 limit 1: offset must be an integer from 0 to window - 1"),
        (24, "1000", "shape 2 limit 1: offset must be an integer from 0 to window - 1"),
        (24, "1.5", "shape 2 limit 1: offset must be an integer from 0 to window - 1"),
        (24, "nan", "shape 2 limit 1: offset must be an integer from 0 to window - 1"),
        (24, "5", "shape 2 limit 1: offset applies to fw only"),
        (15, "5", "shape 1 limit 1: offset applies to fw only"),
        (17, "g", "shape 1 limit 2: a shape is either u, v and k or only g, f, r and n"),
        (25, "0", "the decision count must be an integer from 1 to 256"),
        (25, "257", "the decision count must be an integer from 1 to 256"),
        (25, "3", "expected 29 arguments for these decisions"),
        (25, "1", "expected 27 arguments for these decisions"),
        (26, "3", "decision 1: shape must be an index into the shapes"),
        (27, "0", "decision 2: shape must be an index into the shapes"),
        (27, "x", "decision 2: shape must be an index into the shapes"),
        (27, "1", "expected 6 keys for these decisions"),
    ];
    for &(at, value, message) in cases {
        let mut call = good_call(T0 + 1);
        call.args[at] = value.to_string();
        let err = refused(&mut f, &call, T0 + 1);
        assert!(err.contains(&format!("ratelimit: {message}")), "ARGV[{at}] = {value}: got {err}");
    }
}

#[test]
fn malformed_calls_are_refused() {
    let mut f = Fixture::new();
    f.run_call(&good_call(T0), T0).unwrap();
    let mut call = good_call(T0);
    call.keys.pop();
    assert!(refused(&mut f, &call, T0).contains("ratelimit: expected 5 keys for these decisions"));
    let mut call = good_call(T0);
    call.args.truncate(15);
    assert!(refused(&mut f, &call, T0).contains("ratelimit: too few arguments"));
    let mut call = good_call(T0);
    call.args.pop();
    assert!(refused(&mut f, &call, T0).contains("ratelimit: expected 28 arguments for these decisions"));
    let mut call = good_call(T0);
    call.args.push("1".into());
    assert!(refused(&mut f, &call, T0).contains("ratelimit: expected 28 arguments for these decisions"));
}

#[test]
fn a_charge_mixed_with_use_or_check_and_a_charge_on_sliding_log_are_refused() {
    let mut f = Fixture::new();
    f.run_call(&good_call(T0), T0).unwrap();
    let fw = spec(Algorithm::FixedWindow, 5, 1000, 5);
    let refuse = |f: &mut Fixture, limits: &[ratelimit::spec::LimitCall]| {
        refused(f, &ScriptCall::new("t", Instant::from_ms(T0), &[DecisionCall { identity: "c1", limits }]), T0)
    };
    let mixed = refuse(&mut f, &[limit(fw, Op::Use(1)), limit(fw, Op::Charge(1))]);
    assert!(
        mixed.contains("ratelimit: shape 1 limit 2: a shape is either u, v and k or only g, f, r and n"),
        "{mixed}"
    );
    let mixed = refuse(&mut f, &[limit(fw, Op::Charge(1)), limit(fw, Op::Check(1))]);
    assert!(
        mixed.contains("ratelimit: shape 1 limit 2: a shape is either u, v and k or only g, f, r and n"),
        "{mixed}"
    );
    let log = spec(Algorithm::SlidingLog, 5, 1000, 5);
    let on_log = refuse(&mut f, &[limit(log, Op::Charge(1))]);
    assert!(on_log.contains("ratelimit: shape 1 limit 1: g is impossible on sl"), "{on_log}");
    let refund_log = refuse(&mut f, &[limit(log, Op::Refund { amount: 1, at: Instant::from_ms(T0), mark: None })]);
    assert!(refund_log.contains("ratelimit: shape 1 limit 1: f is impossible on sl"), "{refund_log}");
    let big = spec(Algorithm::SlidingLog, 10_001, 1000, 1);
    let too_big = refuse(&mut f, &[limit(big, Op::Use(1))]);
    assert!(too_big.contains("ratelimit: spec 1: sliding_log limit is at most 10000"), "{too_big}");
}

#[test]
fn slot_ops_off_concurrency_and_bad_slot_ids_are_refused() {
    let mut f = Fixture::new();
    f.run_call(&good_call(T0), T0).unwrap();
    let fw = spec(Algorithm::FixedWindow, 5, 1000, 5);
    let cc = spec(Algorithm::Concurrency, 5, 60_000, 1);
    let refuse = |f: &mut Fixture, limits: &[ratelimit::spec::LimitCall]| {
        refused(f, &ScriptCall::new("t", Instant::from_ms(T0), &[DecisionCall { identity: "c1", limits }]), T0)
    };
    let release_fw = refuse(&mut f, &[limit(fw, Op::Release(PermitId(7)))]);
    assert!(release_fw.contains("ratelimit: shape 1 limit 1: r applies to cc only"), "{release_fw}");
    let renew_fw = refuse(&mut f, &[limit(fw, Op::Renew(PermitId(7)))]);
    assert!(renew_fw.contains("ratelimit: shape 1 limit 1: n applies to cc only"), "{renew_fw}");
    let charge_cc = refuse(&mut f, &[limit(cc, Op::Charge(1))]);
    assert!(charge_cc.contains("ratelimit: shape 1 limit 1: g is impossible on cc"), "{charge_cc}");
    let mixed = refuse(&mut f, &[limit(cc, Op::Take(PermitId(7), 0)), limit(fw, Op::Charge(1))]);
    assert!(
        mixed.contains("ratelimit: shape 1 limit 2: a shape is either u, v and k or only g, f, r and n"),
        "{mixed}"
    );
    let two = refuse(&mut f, &[limit(cc, Op::Check(2))]);
    assert!(
        two.contains("ratelimit: shape 1 limit 1: cc takes amount 1 (u: 1 and the streams held outside the store)"),
        "{two}"
    );
    let id = "ratelimit: shape 1 limit 1: a cc slot id must be 1 to 20 digits, not 0";
    for bad in ["0", "-1", "1.5", "abc", "123456789012345678901", "1e5"] {
        let mut call = ScriptCall::new(
            "t",
            Instant::from_ms(T0),
            &[DecisionCall { identity: "c1", limits: &[limit(cc, Op::Take(PermitId(9), 0))] }],
        );
        let at = call.args.iter().rposition(|a| a == "9").unwrap();
        call.args[at] = bad.to_string();
        let err = refused(&mut f, &call, T0);
        assert!(err.contains(id), "slot id {bad}: {err}");
    }
}

#[test]
fn a_reservation_off_buckets_and_a_bucket_refund_without_its_mark_are_refused() {
    let mut f = Fixture::new();
    f.run_call(&good_call(T0), T0).unwrap();
    let refuse = |f: &mut Fixture, limits: &[ratelimit::spec::LimitCall]| {
        refused(f, &ScriptCall::new("t", Instant::from_ms(T0), &[DecisionCall { identity: "c1", limits }]), T0)
    };
    for algorithm in [Algorithm::SlidingWindow, Algorithm::FixedWindow, Algorithm::SlidingLog, Algorithm::Concurrency] {
        let err = refuse(&mut f, &[limit(spec(algorithm, 5, 1000, 1), Op::Reserve(1))]);
        assert!(err.contains("ratelimit: shape 1 limit 1: v applies to tb and gc only"), "{algorithm:?}: {err}");
    }
    let mixed = refuse(
        &mut f,
        &[
            limit(spec(Algorithm::TokenBucket, 5, 1000, 5), Op::Reserve(1)),
            limit(spec(Algorithm::FixedWindow, 5, 1000, 5), Op::Charge(1)),
        ],
    );
    assert!(
        mixed.contains("ratelimit: shape 1 limit 2: a shape is either u, v and k or only g, f, r and n"),
        "{mixed}"
    );
    // A bucket's refund: its reservation's mark, born:count, count < 2^48.
    let mark = Mark { born_ms: 7, count: 9 };
    for algorithm in [Algorithm::TokenBucket, Algorithm::Gcra] {
        let bucket = spec(algorithm, 5, 1000, 5);
        let refund = |mark| limit(bucket, Op::Refund { amount: 1, at: Instant::from_ms(T0), mark });
        let none = refuse(&mut f, &[refund(None)]);
        assert!(none.contains("ratelimit: shape 1 limit 1: a tb or gc refund takes its mark, born:count"), "{none}");
        for bad in
            ["7", "7:", ":9", "7:9:1", "a:9", "7.5:9", "-7:9", "7:281474976710656", "9007199254740992:9", "7:1e5"]
        {
            let mut call = ScriptCall::new(
                "t",
                Instant::from_ms(T0),
                &[DecisionCall { identity: "c1", limits: &[refund(Some(mark))] }],
            );
            let at = call.args.iter().rposition(|a| a == "7:9").unwrap();
            call.args[at] = bad.to_string();
            let err = refused(&mut f, &call, T0);
            assert!(
                err.contains("ratelimit: shape 1 limit 1: a tb or gc refund takes its mark, born:count"),
                "{bad}: {err}"
            );
        }
        let top = Mark { born_ms: (1 << 53) - 1, count: (1 << 48) - 1 };
        f.run(T0, &[DecisionCall { identity: "c1", limits: &[refund(Some(top))] }]).unwrap();
    }
    // A window takes no mark.
    let window = limit(
        spec(Algorithm::FixedWindow, 5, 1000, 5),
        Op::Refund { amount: 1, at: Instant::from_ms(T0), mark: Some(mark) },
    );
    let err = refuse(&mut f, &[window]);
    assert!(err.contains("ratelimit: shape 1 limit 1: offset must be an integer from 0 to window - 1"), "{err}");
}
