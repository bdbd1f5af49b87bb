//! Bad arguments give a Redis error reply and change nothing.

use host_tests::script::evalsha;
use ratelimit::algorithm::Algorithm;

use crate::fixture::{spec, Fixture, T0};

#[test]
fn bad_costs_limits_and_windows_are_refused_with_state_untouched() {
    let mut f = Fixture::new();
    let good = spec(Algorithm::TokenBucket, 5, 1000, 5);
    let sw = spec(Algorithm::SlidingWindow, 5, 1000, 5);
    f.decide("c1", T0, &[good, sw], 1);
    let before = f.snapshot();
    // (argument index in the second limit's group, value, expected message)
    let cases: &[(usize, &str, &str)] = &[
        (4, "nan", "limit 2: cost must be a positive integer"),
        (4, "inf", "limit 2: cost must be a positive integer"),
        (4, "-inf", "limit 2: cost must be a positive integer"),
        (4, "-1", "limit 2: cost must be a positive integer"),
        (4, "0", "limit 2: cost must be a positive integer"),
        (4, "abc", "limit 2: cost must be a positive integer"),
        (4, "1.5", "limit 2: cost must be a positive integer"),
        (1, "0", "limit 2: limit must be a positive integer"),
        (1, "nan", "limit 2: limit must be a positive integer"),
        (2, "0", "limit 2: window must be a positive integer of ms"),
        (3, "0", "limit 2: burst must be a positive integer"),
        (0, "leaky", "limit 2: unknown algorithm"),
        (1, "10000000000000", "limit 2: limit, burst or cost times window is too large"),
    ];
    for &(field, value, message) in cases {
        let mut call = Fixture::call("c1", T0 + 1, &[good, sw], 1);
        call.args[2 + 5 + field] = value.to_string();
        let err = evalsha(&mut f.conn, &f.sha, &call, Some(T0 + 1)).unwrap_err();
        assert!(err.contains(&format!("ratelimit: {message}")), "{value}: got {err}");
        assert_eq!(f.snapshot(), before, "{value} changed state");
    }
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
    call.args.pop();
    let err = evalsha(&mut f.conn, &f.sha, &call, Some(T0)).unwrap_err();
    assert!(err.contains("ratelimit: expected 7 arguments for 1 limits"), "{err}");

    let big = spec(Algorithm::SlidingLog, 10_001, 1000, 1);
    let err = evalsha(&mut f.conn, &f.sha, &Fixture::call("c1", T0, &[big], 1), Some(T0)).unwrap_err();
    assert!(err.contains("ratelimit: limit 1: sliding_log limit is at most 10000"), "{err}");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut f.conn).unwrap();
    assert!(keys.is_empty(), "refused calls wrote {keys:?}");
}
