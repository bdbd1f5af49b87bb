//! If any limit denies, none of them consumes anything.

use ratelimit::algorithm::Algorithm;

use crate::fixture::{spec, Fixture, T0};

#[test]
fn a_request_denied_by_the_hour_consumes_nothing_of_the_minute() {
    for minute_algo in Algorithm::RATES {
        let mut f = Fixture::new();
        let minute = spec(minute_algo, 10, 60_000, 10);
        let hour = spec(Algorithm::FixedWindow, 3, 3_600_000, 3);
        for i in 0..3 {
            let d = f.decide("c1", T0 + i, &[minute, hour], 1);
            assert!(d.iter().all(|d| d.allowed), "{}: request {i}", minute_algo.name());
        }
        let before = f.snapshot();
        let d = f.decide("c1", T0 + 3, &[minute, hour], 1);
        assert!(d[0].allowed && !d[1].allowed, "{}: minute allows, hour denies", minute_algo.name());
        // An allowing limit reports its remaining as if the request were admitted.
        assert_eq!(d[0].remaining, 6, "{}", minute_algo.name());
        assert_eq!(f.snapshot(), before, "{}: the denied call changed a key", minute_algo.name());
    }
}

#[test]
fn retry_after_of_a_denied_call_is_zero_for_the_limits_that_allowed() {
    let mut f = Fixture::new();
    let a = spec(Algorithm::SlidingLog, 1, 1000, 1);
    let b = spec(Algorithm::SlidingLog, 5, 2000, 5); // its own key: another window
    f.decide("c1", T0, &[a, b], 1);
    let d = f.decide("c1", T0 + 10, &[a, b], 1);
    assert_eq!((d[0].allowed, d[0].retry_after_ms), (false, Some(990)));
    assert_eq!((d[1].allowed, d[1].retry_after_ms, d[1].remaining), (true, Some(0), 3));
}
