//! (a) How far the sliding estimate is from the true count of the last
//! window, when the previous window held about L requests.
//!
//! Theory (Poisson arrivals): the previous window's requests that are still
//! inside the sliding window are Binomial(p, 1 − f), whose mean is exactly
//! the estimate's p × (1 − f); the error's standard deviation is
//! √(p f (1 − f)), i.e. √L / 2 at f = 0.5, or 1/(2√L) of L.

use super::counters::{count_between, estimate};
use super::traces::{trace, Shape, WINDOW_MS};
use crate::prng::Rng;

/// The fractions of the window at which the error is sampled (for the plot).
pub const FRACTIONS: [f64; 9] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9];

/// The error of one (shape, limit).
#[derive(Clone, Debug)]
pub struct ErrorRow {
    /// Traffic shape.
    pub shape: Shape,
    /// L: also the offered requests per window.
    pub limit: u64,
    /// Mid-window samples (one per window).
    pub samples: usize,
    /// rms(estimate − true) / L at f = 0.5.
    pub rms_mid: f64,
    /// 1 / (2√L).
    pub theory_mid: f64,
    /// Mean (estimate − true) / L at f = 0.5: the estimate is unbiased.
    pub bias_mid: f64,
    /// (f, measured rms / L, theory √(f(1 − f)/L)) for each of `FRACTIONS`.
    pub by_fraction: Vec<(f64, f64, f64)>,
}

/// Samples the estimate at each fraction of every window after the first,
/// on a trace offering L per window; nothing is limited (both count all).
pub fn run(shape: Shape, limit: u64, windows: u64, seed: u64) -> ErrorRow {
    let arrivals = trace(shape, &mut Rng::new(seed), limit, 1.0, windows);
    let l = limit as f64;
    let mut by_fraction = Vec::new();
    let (mut rms_mid, mut bias_mid, mut samples) = (0.0, 0.0, 0);
    for f in FRACTIONS {
        let elapsed = (f * WINDOW_MS as f64) as u64;
        let errors: Vec<f64> = (1..windows)
            .map(|k| {
                let start = k * WINDOW_MS;
                let now = start + elapsed;
                let prev = count_between(&arrivals, start - WINDOW_MS, start);
                let cur = count_between(&arrivals, start, now + 1);
                let truth = count_between(&arrivals, now + 1 - WINDOW_MS, now + 1);
                (estimate(prev, cur, elapsed, WINDOW_MS) - truth as f64) / l
            })
            .collect();
        let rms = (errors.iter().map(|e| e * e).sum::<f64>() / errors.len() as f64).sqrt();
        by_fraction.push((f, rms, (f * (1.0 - f) / l).sqrt()));
        if elapsed * 2 == WINDOW_MS {
            rms_mid = rms;
            bias_mid = errors.iter().sum::<f64>() / errors.len() as f64;
            samples = errors.len();
        }
    }
    ErrorRow { shape, limit, samples, rms_mid, theory_mid: 1.0 / (2.0 * l.sqrt()), bias_mid, by_fraction }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_error_follows_the_binomial_theory() {
        let row = run(Shape::Poisson, 100, 1500, 3);
        assert!((row.rms_mid / row.theory_mid - 1.0).abs() < 0.1, "{row:?}");
        assert!(row.bias_mid.abs() < 0.01, "{row:?}");
    }
}
