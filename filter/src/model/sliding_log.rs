//! sliding_log: the scores of admitted requests, trimmed to (now - window, now].

use super::{allowed, denied, LimitSpec};
use crate::decision::Decision;

/// Admission times in ms, sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogState {
    entries: Vec<u64>,
}

impl LogState {
    /// Decides at `now` (the store's clock).
    pub fn check(&self, spec: &LimitSpec, now: u64, cost: u64) -> (Decision, LogState) {
        let (limit, window) = (i128::from(spec.limit), i128::from(spec.window_ms));
        let now_i = i128::from(now);
        let mut kept: Vec<u64> = self.entries.iter().copied().filter(|&s| i128::from(s) > now_i - window).collect();
        kept.sort_unstable();
        let trimmed = LogState { entries: kept };
        let count = trimmed.entries.len() as i128;
        let newest = trimmed.entries.last().map(|&s| i128::from(s));
        let cost_i = i128::from(cost);
        if count + cost_i > limit {
            let retry = (cost_i <= limit).then(|| {
                let rank = usize::try_from(count + cost_i - limit - 1).unwrap_or(0);
                trimmed.entries.get(rank).map_or(0, |&s| i128::from(s) + window - now_i)
            });
            let reset = newest.map_or(0, |n| n + window - now_i);
            return (denied(limit - count, reset, retry), trimmed);
        }
        let mut next = trimmed;
        next.entries.extend(std::iter::repeat_n(now, cost as usize));
        next.entries.sort_unstable();
        let newest = newest.map_or(now_i, |n| n.max(now_i));
        (allowed(limit - count - cost_i, newest + window - now_i), next)
    }
}
