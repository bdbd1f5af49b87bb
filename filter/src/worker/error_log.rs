//! Store errors in the log: at most one line per interval per worker, with
//! the count since the last line, so a failing store cannot flood the log
//! and a new outage is always logged.

/// Minimum time between two store-error lines of one worker.
pub const LOG_INTERVAL_MS: u64 = 10_000;

/// Store errors seen and when one was last logged.
#[derive(Debug, Default)]
pub struct ErrorLog {
    last_logged_ms: Option<u64>,
    since: u64,
}

impl ErrorLog {
    /// Counts one error at `now_ms`; the count to log with it when a line
    /// is due (the first error, or the first after the interval).
    pub fn record(&mut self, now_ms: u64) -> Option<u64> {
        self.since += 1;
        let due = self.last_logged_ms.is_none_or(|t| now_ms.saturating_sub(t) >= LOG_INTERVAL_MS);
        if !due {
            return None;
        }
        self.last_logged_ms = Some(now_ms);
        Some(std::mem::take(&mut self.since))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn one_line_per_interval_with_the_count_since_the_last() {
        let mut log = ErrorLog::default();
        assert_eq!(log.record(0), Some(1));
        for t in 1..10_000 {
            assert_eq!(log.record(t), None);
        }
        assert_eq!(log.record(10_000), Some(10_000), "every error since the last line");
        // A new outage long after thousands of errors is logged at once.
        assert_eq!(log.record(1_000_000), Some(1));
    }
}
