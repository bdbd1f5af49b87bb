//! Arrival traces for the accuracy simulation, in integer milliseconds from
//! 0 (a window boundary), sorted. Seeded, so every run sees the same traces.

use crate::prng::Rng;

/// The window every simulated limit uses: one minute, long enough that
/// millisecond timestamps never bunch requests together artificially.
pub const WINDOW_MS: u64 = 60_000;

/// How arrivals are spread in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Independent arrivals at a constant rate.
    Poisson,
    /// Poisson bursts of `burst_size(limit)` requests, each burst spread over
    /// 1% of a window: the traffic that makes counters and logs disagree.
    Bursty,
}

impl Shape {
    /// Both shapes, in report order.
    pub const ALL: [Shape; 2] = [Shape::Poisson, Shape::Bursty];

    /// The name used in tables.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Poisson => "poisson",
            Shape::Bursty => "bursty",
        }
    }
}

/// Requests per burst of the bursty shape: a quarter of the limit, at least 2.
pub fn burst_size(limit: u64) -> u64 {
    (limit / 4).max(2)
}

/// `offered × limit` requests per window on average, for `windows` windows.
pub fn trace(shape: Shape, rng: &mut Rng, limit: u64, offered: f64, windows: u64) -> Vec<u64> {
    let end = windows * WINDOW_MS;
    let rate = offered * limit as f64 / WINDOW_MS as f64; // requests per ms
    match shape {
        Shape::Poisson => poisson(rng, rate, 0.0, end),
        Shape::Bursty => {
            let size = burst_size(limit);
            let spread = WINDOW_MS as f64 / 100.0;
            let mut out = Vec::new();
            for start in poisson(rng, rate / size as f64, 0.0, end) {
                for _ in 0..size {
                    let t = start as f64 + rng.range(0.0, spread);
                    if t < end as f64 {
                        out.push(t as u64);
                    }
                }
            }
            out.sort_unstable();
            out
        }
    }
}

/// Poisson arrivals at `rate` per ms in [start, end).
pub fn poisson(rng: &mut Rng, rate: f64, start: f64, end: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut t = start + rng.exponential(rate);
    while t < end as f64 {
        out.push(t as u64);
        t += rng.exponential(rate);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_have_the_offered_volume_and_are_sorted() {
        for shape in Shape::ALL {
            let t = trace(shape, &mut Rng::new(1), 100, 2.0, 200);
            let per_window = t.len() as f64 / 200.0;
            assert!((per_window - 200.0).abs() < 10.0, "{shape:?}: {per_window}");
            assert!(t.windows(2).all(|w| w[0] <= w[1]));
        }
    }
}
