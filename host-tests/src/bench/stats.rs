//! Summaries of repeated runs: median and spread, and ratios to a baseline
//! taken round by round (each run is compared with the baseline run of the
//! same round, which ran minutes apart at most, not with a global average).

use serde_json::{json, Value};

/// Median and range of a set of runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Median (mean of the two middle values for an even count).
    pub median: f64,
    /// Smallest run.
    pub min: f64,
    /// Largest run.
    pub max: f64,
}

impl Summary {
    /// Summarizes `values` (at least one).
    pub fn of(values: &[f64]) -> Summary {
        assert!(!values.is_empty(), "no runs to summarize");
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Summary { median, min: v[0], max: v[n - 1] }
    }

    /// Ratios run by run: `values[i] / baseline[i]`, summarized.
    pub fn ratio(values: &[f64], baseline: &[f64]) -> Summary {
        assert_eq!(values.len(), baseline.len(), "ratio of unpaired runs");
        let r: Vec<f64> = values.iter().zip(baseline).map(|(v, b)| v / b).collect();
        Summary::of(&r)
    }

    /// `median (min–max)` with `decimals` digits.
    pub fn show(&self, decimals: usize) -> String {
        format!("{:.d$} ({:.d$}–{:.d$})", self.median, self.min, self.max, d = decimals)
    }

    /// For the figures file.
    pub fn to_json(self) -> Value {
        json!({ "median": self.median, "min": self.min, "max": self.max })
    }
}

/// "met" or "missed".
pub fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "missed"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(Summary::of(&[3.0, 1.0, 2.0]), Summary { median: 2.0, min: 1.0, max: 3.0 });
        assert_eq!(Summary::of(&[4.0, 1.0, 2.0, 3.0]).median, 2.5);
    }

    #[test]
    fn ratios_pair_runs_of_the_same_round() {
        let r = Summary::ratio(&[2.0, 3.0, 4.0], &[1.0, 2.0, 4.0]);
        assert_eq!((r.median, r.min, r.max), (1.5, 1.0, 2.0));
    }
}
