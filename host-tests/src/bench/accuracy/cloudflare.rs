//! (e) Cloudflare's measure: both sides count ALL requests of a client,
//! admitted or not, and each request gets a verdict from the sliding
//! estimate and from the true count of the last window; a request is
//! wrongly blocked or wrongly allowed when they differ. The population is
//! mostly well-behaved: 99% of clients at 0.1–0.5 L per window, 1% at
//! 2–10 L, each starting at a random moment of the first window.

use super::counters::{CountAll, ExactCount};
use super::traces::{poisson, WINDOW_MS};
use crate::prng::Rng;

/// The outcome for one limit.
#[derive(Clone, Debug)]
pub struct CloudflareRow {
    /// L.
    pub limit: u64,
    /// Clients simulated.
    pub clients: u64,
    /// Requests in all.
    pub requests: u64,
    /// Blocked by the estimate, allowed by the true count.
    pub wrongly_blocked: u64,
    /// Allowed by the estimate, blocked by the true count.
    pub wrongly_allowed: u64,
    /// Of the wrong verdicts, those of a heavy client in the first full
    /// window after it started (window 1: every client starts in window 0).
    pub wrong_heavy_first_window: u64,
}

impl CloudflareRow {
    /// Wrong verdicts, in percent of all requests.
    pub fn wrong_percent(&self) -> f64 {
        100.0 * (self.wrongly_blocked + self.wrongly_allowed) as f64 / self.requests as f64
    }
}

/// `clients` clients for `windows` windows at limit L.
pub fn run(limit: u64, clients: u64, windows: u64, seed: u64) -> CloudflareRow {
    let mut rng = Rng::new(seed);
    let end = windows * WINDOW_MS;
    let mut row = CloudflareRow {
        limit,
        clients,
        requests: 0,
        wrongly_blocked: 0,
        wrongly_allowed: 0,
        wrong_heavy_first_window: 0,
    };
    for c in 0..clients {
        // Exactly 1% heavy: every hundredth client.
        let heavy = c % 100 == 0;
        let per_window = if heavy { rng.range(2.0, 10.0) } else { rng.range(0.1, 0.5) } * limit as f64;
        let start = rng.range(0.0, WINDOW_MS as f64);
        let (mut counter, mut exact) = (CountAll::new(WINDOW_MS), ExactCount::new(WINDOW_MS));
        for t in poisson(&mut rng, per_window / WINDOW_MS as f64, start, end) {
            let estimate_blocks = counter.over_with(t, limit);
            let truth_blocks = exact.push(t) > limit;
            row.requests += 1;
            match (estimate_blocks, truth_blocks) {
                (true, false) => row.wrongly_blocked += 1,
                (false, true) => row.wrongly_allowed += 1,
                _ => continue,
            }
            if heavy && t / WINDOW_MS == 1 {
                row.wrong_heavy_first_window += 1;
            }
        }
    }
    row
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_verdicts_are_rare_and_counted_both_ways() {
        let row = run(100, 500, 5, 9);
        assert!(row.requests > 50_000);
        assert!(row.wrong_percent() < 0.1, "{row:?}");
    }
}
