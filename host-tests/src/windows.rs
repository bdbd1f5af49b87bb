//! Limits whose windows are aligned to the Unix epoch (fixed windows, the
//! window index in sliding-window keys, the fallback buckets) start afresh
//! at every multiple of the window. A test that counts exactly must not
//! straddle such a boundary; rather than hope, it starts clear of one.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// If the next boundary of windows of length `window` is less than `needed`
/// away (the test's duration, generously), sleeps until just past it.
/// Returns how long it slept.
pub fn start_clear_of_boundary(window: Duration, needed: Duration) -> Duration {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis();
    let window = window.as_millis();
    let left = window - now % window;
    if left >= needed.as_millis() {
        return Duration::ZERO;
    }
    // A little past the boundary: the proxies read the same clock.
    let pause = Duration::from_millis(u64::try_from(left).unwrap() + 100);
    eprintln!("waiting {pause:?} for the next {window} ms window to start");
    std::thread::sleep(pause);
    pause
}

/// One day, the window of the scale tests' limits.
pub const DAY: Duration = Duration::from_secs(86_400);
/// One hour.
pub const HOUR: Duration = Duration::from_secs(3_600);

/// Sleeps until just past (100 ms) the next boundary of windows of length
/// `window`; returns that boundary, the start of the window now running.
pub fn start_of_next_window(window: Duration) -> SystemTime {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let window = window.as_millis();
    let boundary_ms = (now.as_millis() / window + 1) * window;
    let boundary = UNIX_EPOCH + Duration::from_millis(u64::try_from(boundary_ms).unwrap());
    std::thread::sleep(boundary.duration_since(SystemTime::now()).unwrap_or_default() + Duration::from_millis(100));
    boundary
}
