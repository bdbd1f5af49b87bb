//! The injected clock: what `proxy_get_current_time_nanoseconds` (and WASI's
//! clocks) return. It moves only when the test says so.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Milliseconds since the epoch, shared by every VM of a host.
#[derive(Clone, Debug)]
pub struct Clock(Arc<AtomicU64>);

impl Clock {
    /// A clock standing at `ms`.
    pub fn at(ms: u64) -> Clock {
        Clock(Arc::new(AtomicU64::new(ms)))
    }

    /// The time, in ms since the epoch.
    pub fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Sets the time; it never goes back this way (a test going back by
    /// mistake is a test bug; `step_back` is the deliberate way).
    pub fn set_ms(&self, ms: u64) {
        let now = self.now_ms();
        assert!(ms >= now, "the clock cannot go back from {now} to {ms}");
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock {
    /// Steps the time `ms` back: the wall clock Envoy reads is the
    /// system's, which an NTP correction can set back.
    pub fn step_back(&self, ms: u64) {
        self.0.fetch_sub(ms.min(self.now_ms()), Ordering::SeqCst);
    }
}

impl wasmtime_wasi::HostWallClock for Clock {
    fn resolution(&self) -> std::time::Duration {
        std::time::Duration::from_millis(1)
    }

    fn now(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.now_ms())
    }
}
