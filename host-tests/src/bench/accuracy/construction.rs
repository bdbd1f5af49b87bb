//! (c) The sliding window's worst case, built on purpose: L requests in the
//! last millisecond of a window (the previous window was empty, so all are
//! admitted), then one attempt every millisecond of the next window, each
//! admitted as soon as the estimate leaves room. Some window-long span then
//! holds 2L − 1 admitted requests: the 2L bound, approached but not passed.
//! The exact log, on the same attempts, never holds more than L.

use ratelimit::algorithm::Algorithm;

use super::counters::{count_between, worst_window};
use super::limited::{admitted, spec, verdicts};
use super::traces::WINDOW_MS;

/// The construction's outcome for one limit.
#[derive(Clone, Debug)]
pub struct Construction {
    /// L.
    pub limit: u64,
    /// Attempts made.
    pub attempts: usize,
    /// Most admitted in a window-long span by the sliding window.
    pub worst_window: u64,
    /// The same for the exact log.
    pub worst_log: u64,
    /// (time in windows, admitted in the trailing window: sliding window,
    /// log), for the plot.
    pub curve: Vec<(f64, u64, u64)>,
}

/// The spike and the paced window, against both algorithms.
pub fn run(limit: u64) -> Construction {
    let mut attempts: Vec<u64> = vec![WINDOW_MS - 1; limit as usize];
    attempts.extend(WINDOW_MS..3 * WINDOW_MS);
    let window = admitted(&attempts, &verdicts(spec(Algorithm::SlidingWindow, limit), &attempts));
    let log = admitted(&attempts, &verdicts(spec(Algorithm::SlidingLog, limit), &attempts));
    let trailing = |times: &[u64], t: u64| count_between(times, (t + 1).saturating_sub(WINDOW_MS), t + 1);
    let step = WINDOW_MS / 200;
    let curve = (0..=600)
        .map(|i| i * step)
        .map(|t| (t as f64 / WINDOW_MS as f64, trailing(&window, t), trailing(&log, t)))
        .collect();
    Construction {
        limit,
        attempts: attempts.len(),
        worst_window: worst_window(&window, WINDOW_MS),
        worst_log: worst_window(&log, WINDOW_MS),
        curve,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_construction_reaches_2l_minus_1_and_the_log_l() {
        let c = run(10);
        assert_eq!((c.worst_window, c.worst_log), (19, 10));
    }
}
