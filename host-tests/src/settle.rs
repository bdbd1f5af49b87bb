//! Waiting for a count that comes later (a charge after its response, a
//! call a paused store runs when it resumes) without missing what comes
//! after it: a count first seen at its target may still be passed by a
//! charge made twice. It must reach the target and then stay there for a
//! quiet period, before a test asserts it.

use std::time::{Duration, Instant};

/// How long a count is watched once it reached its target: twice as long
/// as it took to get there (what comes by the same way comes as late),
/// and at least 1.5 s, past a store call's timeout in the tests (1 s) and
/// a few of the filter's ticks (what a call resent later would wait for).
pub fn quiet_period(took: Duration) -> Duration {
    (took * 2).max(Duration::from_millis(1_500))
}

/// Polls `read` until it gives `want` (within 20 s; if `rising`, failing
/// as soon as it passes `want`: a check-then-charge count only grows),
/// then for the quiet period, failing if it moves: `what` names it.
pub fn settles_at(what: &str, want: u64, rising: bool, read: impl Fn() -> u64) {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(20);
    loop {
        let got = read();
        if got == want {
            break;
        }
        assert!(!rising || got < want, "{what}: {got}, more than {want}");
        assert!(Instant::now() < deadline, "{what}: {got}, never {want}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let quiet = quiet_period(start.elapsed());
    let until = Instant::now() + quiet;
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
        let got = read();
        assert_eq!(got, want, "{what}: {got} within {quiet:?} of reaching {want}");
    }
}
