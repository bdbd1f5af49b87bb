//! The store's INFO as the worker reads it: gauges for the eviction guard,
//! and one warning per worker for what an operator must fix (an eviction
//! policy that can evict live counters, a Redis older than the minimum).

use crate::metrics::Metrics;
use crate::store::stats::StoreStats;
use crate::store::StoreError;

/// What has been warned about, so each warning is logged once.
#[derive(Debug, Default)]
pub struct StatsWatch {
    warned_policy: String,
    warned_version: bool,
}

impl StatsWatch {
    /// Exports the figures of an INFO answer; the warnings to log.
    pub fn take<M: Metrics + ?Sized>(&mut self, metrics: &M, info: Result<String, StoreError>) -> Vec<String> {
        let Some(stats) = info.ok().as_deref().and_then(StoreStats::parse) else { return Vec::new() };
        metrics.store_stats(&stats);
        let mut lines = Vec::new();
        match stats.warning() {
            Some(w) if self.warned_policy != stats.policy => {
                lines.push(w);
                self.warned_policy = stats.policy.clone();
            }
            Some(_) => {}
            None => self.warned_policy.clear(),
        }
        if let Some(w) = stats.version_warning() {
            if !self.warned_version {
                lines.push(w);
                self.warned_version = true;
            }
        }
        lines
    }
}
