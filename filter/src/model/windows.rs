//! sliding_window and fixed_window: counters per aligned window index.

use std::collections::BTreeMap;

use super::{allowed, denied, floor_div, LimitSpec};
use crate::decision::Decision;

/// Counts per window index (only the current and previous ones matter).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WindowCounts {
    counts: BTreeMap<u64, u64>,
}

impl WindowCounts {
    fn count(&self, index: Option<u64>) -> i128 {
        index.and_then(|i| self.counts.get(&i)).map_or(0, |c| i128::from(*c))
    }

    fn add(&self, index: u64, cost: u64) -> WindowCounts {
        let mut next = self.clone();
        *next.counts.entry(index).or_insert(0) += cost;
        // Older windows have expired from the store.
        next.counts.retain(|i, _| *i + 1 >= index);
        next
    }

    /// fixed_window at `now`.
    pub fn check_fixed(&self, spec: &LimitSpec, now: u64, cost: u64) -> (Decision, WindowCounts) {
        let (limit, window, cost_i) = (i128::from(spec.limit), i128::from(spec.window_ms), i128::from(cost));
        let index = now / spec.window_ms;
        let count = self.count(Some(index));
        let ends_in = window - i128::from(now % spec.window_ms);
        if count + cost_i > limit {
            let retry = (cost_i <= limit).then_some(ends_in);
            return (denied(limit - count, ends_in, retry), self.clone());
        }
        (allowed(limit - count - cost_i, ends_in), self.add(index, cost))
    }

    /// sliding_window at `now`.
    pub fn check_sliding(&self, spec: &LimitSpec, now: u64, cost: u64) -> (Decision, WindowCounts) {
        let (limit, window, cost_i) = (i128::from(spec.limit), i128::from(spec.window_ms), i128::from(cost));
        let index = now / spec.window_ms;
        let elapsed = i128::from(now % spec.window_ms);
        let cur = self.count(Some(index));
        let prev = self.count(index.checked_sub(1));
        let weighted_prev = prev * (window - elapsed);
        let full = limit * window;
        let used = weighted_prev + (cur + cost_i) * window;
        if used > full {
            let left = floor_div(full - weighted_prev - cur * window, window);
            let reset = if cur > 0 {
                2 * window - elapsed
            } else if prev > 0 {
                window - elapsed
            } else {
                0
            };
            let retry = sliding_retry(prev, cur, cost_i, limit, window, elapsed);
            return (denied(left, reset, retry), self.clone());
        }
        (allowed(floor_div(full - used, window), 2 * window - elapsed), self.add(index, cost))
    }
}

/// First instant (ms from now) at which the estimate leaves room for `cost`.
fn sliding_retry(prev: i128, cur: i128, cost: i128, limit: i128, window: i128, elapsed: i128) -> Option<i128> {
    if cost > limit {
        return None;
    }
    let room = (limit - cur - cost) * window;
    if room >= 0 && prev > 0 {
        let at = window - floor_div(room, prev);
        if at < window {
            return Some(at - elapsed);
        }
    }
    let at = if cur > 0 { (window - floor_div((limit - cost) * window, cur)).max(0) } else { 0 };
    if at < window {
        return Some(window - elapsed + at);
    }
    Some(2 * window - elapsed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use wasm_bindgen_test::wasm_bindgen_test;

    const SW: LimitSpec = LimitSpec { algorithm: Algorithm::SlidingWindow, limit: 10, window_ms: 1000, burst: 10 };

    #[test]
    #[wasm_bindgen_test]
    fn sliding_estimate_at_half_window_counts_half_the_previous() {
        // 10 in window 0, then at t=1500 (f = 0.5) the estimate is 5: 5 more fit.
        let mut w = WindowCounts::default();
        w = w.add(0, 10);
        let mut admitted = 0;
        for _ in 0..10 {
            let (d, next) = w.check_sliding(&SW, 1500, 1);
            if d.allowed {
                admitted += 1;
                w = next;
            }
        }
        assert_eq!(admitted, 5);
    }

    #[test]
    #[wasm_bindgen_test]
    fn sliding_retry_after_is_the_first_admitting_instant() {
        let w = WindowCounts::default().add(0, 10).add(1, 5);
        let (d, _) = w.check_sliding(&SW, 1500, 1);
        assert!(!d.allowed);
        let retry = d.retry_after_ms.unwrap();
        assert!(!w.check_sliding(&SW, 1500 + retry - 1, 1).0.allowed);
        assert!(w.check_sliding(&SW, 1500 + retry, 1).0.allowed);
    }
}
