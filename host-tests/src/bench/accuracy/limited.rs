//! (b), (c), (d): the sliding window and an exact sliding log, each running
//! on its own (each keeps only what IT admitted), decide the same trace with
//! the filter's reference model, i.e. the script's integer math.
//! Near saturation the two disagree on single requests even where their
//! volumes agree: once their histories differ they admit different requests.

use ratelimit::algorithm::Algorithm;
use ratelimit::model::ClientModel;
use ratelimit::spec::LimitSpec;

use super::counters::worst_window;
use super::traces::{trace, Shape, WINDOW_MS};
use crate::prng::Rng;

/// One (shape, limit, offered load) run.
#[derive(Clone, Debug)]
pub struct LimitedRow {
    /// Traffic shape.
    pub shape: Shape,
    /// L.
    pub limit: u64,
    /// Offered requests per window, in multiples of L.
    pub offered: f64,
    /// Requests in the trace.
    pub requests: usize,
    /// Admitted by the sliding window.
    pub admitted_window: usize,
    /// Admitted by the exact log.
    pub admitted_log: usize,
    /// Most requests the sliding window admitted in any window-long span.
    pub worst_window: u64,
    /// The same for the log (never above L).
    pub worst_log: u64,
    /// Requests the sliding window admitted and the log refused.
    pub wrongly_admitted: usize,
    /// Requests the sliding window refused and the log admitted.
    pub wrongly_denied: usize,
}

impl LimitedRow {
    /// Admitted volume of the sliding window relative to the log's.
    pub fn volume_ratio(&self) -> f64 {
        self.admitted_window as f64 / self.admitted_log as f64
    }
}

/// A limit of `algorithm` at L per minute.
pub fn spec(algorithm: Algorithm, limit: u64) -> LimitSpec {
    LimitSpec { algorithm, limit, window_ms: WINDOW_MS, burst: limit }
}

/// Each request's verdict under one limit, deciding on its own history.
pub fn verdicts(spec: LimitSpec, arrivals: &[u64]) -> Vec<bool> {
    let mut model = ClientModel::new(&[spec]);
    arrivals.iter().map(|&t| model.decide(t, t, &[1])[0].allowed).collect()
}

/// The admitted requests' times.
pub fn admitted(arrivals: &[u64], verdicts: &[bool]) -> Vec<u64> {
    arrivals.iter().zip(verdicts).filter(|(_, &ok)| ok).map(|(&t, _)| t).collect()
}

/// Runs both on one trace.
pub fn run(shape: Shape, limit: u64, offered: f64, windows: u64, seed: u64) -> LimitedRow {
    let arrivals = trace(shape, &mut Rng::new(seed), limit, offered, windows);
    let window = verdicts(spec(Algorithm::SlidingWindow, limit), &arrivals);
    let log = verdicts(spec(Algorithm::SlidingLog, limit), &arrivals);
    let both = window.iter().zip(&log);
    LimitedRow {
        shape,
        limit,
        offered,
        requests: arrivals.len(),
        admitted_window: window.iter().filter(|&&a| a).count(),
        admitted_log: log.iter().filter(|&&a| a).count(),
        worst_window: worst_window(&admitted(&arrivals, &window), WINDOW_MS),
        worst_log: worst_window(&admitted(&arrivals, &log), WINDOW_MS),
        wrongly_admitted: both.clone().filter(|(w, l)| **w && !**l).count(),
        wrongly_denied: both.filter(|(w, l)| !**w && **l).count(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_never_exceeds_l_and_the_window_never_2l() {
        let row = run(Shape::Bursty, 10, 3.0, 50, 5);
        assert!(row.worst_log <= 10);
        assert!(row.worst_window <= 20);
        assert!(row.admitted_window > 0 && row.admitted_log > 0);
    }
}
