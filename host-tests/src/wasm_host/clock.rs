//! The injected clock: what `proxy_get_current_time_nanoseconds` (and WASI's
//! clocks) return. It moves only when the test says so.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Milliseconds since the epoch, shared by every VM of a host: the host's
/// own time (store replies, timeouts and timers fall due on it; it never
/// goes back) and the wall clock the module reads, which a test may step
/// back as an NTP correction does (`step_back`).
#[derive(Clone, Debug)]
pub struct Clock {
    host: Arc<AtomicU64>,
    /// How far the wall clock stands behind the host's time.
    behind: Arc<AtomicU64>,
}

impl Clock {
    /// A clock standing at `ms`.
    pub fn at(ms: u64) -> Clock {
        Clock { host: Arc::new(AtomicU64::new(ms)), behind: Arc::new(AtomicU64::new(0)) }
    }

    /// The host's time, in ms since the epoch.
    pub fn now_ms(&self) -> u64 {
        self.host.load(Ordering::SeqCst)
    }

    /// The wall clock the module reads.
    pub fn wall_ms(&self) -> u64 {
        self.now_ms().saturating_sub(self.behind.load(Ordering::SeqCst))
    }

    /// Sets the host's time; it never goes back (a test going back is a
    /// test bug; `step_back` moves the wall clock only).
    pub fn set_ms(&self, ms: u64) {
        let now = self.now_ms();
        assert!(ms >= now, "the clock cannot go back from {now} to {ms}");
        self.host.store(ms, Ordering::SeqCst);
    }

    /// Steps the wall clock `ms` back: what the module reads is the
    /// system's time, which an NTP correction can set back. What falls
    /// due keeps falling due on the host's time.
    pub fn step_back(&self, ms: u64) {
        self.behind.fetch_add(ms, Ordering::SeqCst);
    }
}

impl wasmtime_wasi::HostWallClock for Clock {
    fn resolution(&self) -> std::time::Duration {
        std::time::Duration::from_millis(1)
    }

    fn now(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.wall_ms())
    }
}
