//! Time as the filter counts it: instants (ms since the epoch) and
//! durations the configuration guarantees to be positive.

use std::num::NonZeroU64;

/// A positive number of milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Millis(NonZeroU64);

impl Millis {
    /// `ms` milliseconds, if positive.
    pub const fn new(ms: u64) -> Option<Millis> {
        match NonZeroU64::new(ms) {
            Some(n) => Some(Millis(n)),
            None => None,
        }
    }

    /// `ms` milliseconds for a constant known to be positive (1 if it is not).
    pub const fn of(ms: u64) -> Millis {
        match NonZeroU64::new(ms) {
            Some(n) => Millis(n),
            None => Millis(NonZeroU64::MIN),
        }
    }

    /// The value in milliseconds.
    pub const fn ms(self) -> u64 {
        self.0.get()
    }
}

/// An instant: milliseconds since the Unix epoch, by some clock (the
/// proxy's wall clock, or the store's). Arithmetic saturates: a clock
/// that steps back makes a span 0, never a wrap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The instant `ms` milliseconds after the epoch.
    pub const fn from_ms(ms: u64) -> Instant {
        Instant(ms)
    }

    /// Milliseconds since the epoch.
    pub const fn ms(self) -> u64 {
        self.0
    }

    /// Milliseconds from `earlier` to this instant; 0 if `earlier` is later.
    pub const fn since(self, earlier: Instant) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// The instant `ms` milliseconds later.
    pub const fn after(self, ms: u64) -> Instant {
        Instant(self.0.saturating_add(ms))
    }

    /// The instant `ms` milliseconds earlier (the epoch at the earliest).
    pub const fn before(self, ms: u64) -> Instant {
        Instant(self.0.saturating_sub(ms))
    }
}
