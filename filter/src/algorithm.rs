//! The five algorithms a limit can use, and what each needs from the store.

/// A concurrency refusal's retry (`CC_RETRY_MS` in `lua/driver.lua`): when
/// a stream ends is unknown, so clients are told to retry in a second.
pub const CC_RETRY_MS: u64 = 1000;

/// A rate-limiting algorithm, chosen per limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Previous window weighted by what is left of it, plus the current window.
    SlidingWindow,
    /// One counter per aligned window.
    FixedWindow,
    /// Lazy-refill bucket: capacity (burst) and rate are independent.
    TokenBucket,
    /// Exact log of admitted requests.
    SlidingLog,
    /// Generic cell rate algorithm: leaky bucket in counter form.
    Gcra,
    /// Streams in flight at once: a permit per stream, held until it ends
    /// (the "window" is how long a permit lives unrenewed: `max_hold`).
    Concurrency,
}

impl Algorithm {
    /// Every algorithm, in the order the config documents them.
    pub const ALL: [Algorithm; 6] = [
        Algorithm::SlidingWindow,
        Algorithm::FixedWindow,
        Algorithm::TokenBucket,
        Algorithm::SlidingLog,
        Algorithm::Gcra,
        Algorithm::Concurrency,
    ];

    /// The algorithms that limit a rate (every one but concurrency).
    pub const RATES: [Algorithm; 5] = [
        Algorithm::SlidingWindow,
        Algorithm::FixedWindow,
        Algorithm::TokenBucket,
        Algorithm::SlidingLog,
        Algorithm::Gcra,
    ];

    /// The name used in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::Gcra => "gcra",
            Algorithm::Concurrency => "concurrency",
        }
    }

    /// Parses a configuration name.
    pub fn from_name(name: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The short code the script and the Redis keys use.
    pub fn code(self) -> &'static str {
        match self {
            Algorithm::SlidingWindow => "sw",
            Algorithm::FixedWindow => "fw",
            Algorithm::TokenBucket => "tb",
            Algorithm::SlidingLog => "sl",
            Algorithm::Gcra => "gc",
            Algorithm::Concurrency => "cc",
        }
    }

    /// Whether the caller's clock picks the keys (a window index in the name).
    /// The others read Redis `TIME` inside the script.
    pub fn windowed(self) -> bool {
        matches!(self, Algorithm::SlidingWindow | Algorithm::FixedWindow)
    }

    /// token_bucket and gcra: one algorithm, a lead kept by the script.
    pub fn tat(self) -> bool {
        matches!(self, Algorithm::TokenBucket | Algorithm::Gcra)
    }

    /// The burst used when the config gives none: a full limit for the token
    /// bucket, one request for GCRA; unused by the others.
    pub fn default_burst(self, limit: u64) -> u64 {
        match self {
            Algorithm::Gcra => 1,
            _ => limit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn names_round_trip_and_codes_are_distinct() {
        for a in Algorithm::ALL {
            assert_eq!(Algorithm::from_name(a.name()), Some(a));
        }
        let codes: std::collections::HashSet<_> = Algorithm::ALL.iter().map(|a| a.code()).collect();
        assert_eq!(codes.len(), 6);
        assert_eq!(Algorithm::from_name("leaky"), None);
    }
}
