//! Durations the configuration guarantees to be positive.

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
