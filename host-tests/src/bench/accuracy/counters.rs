//! Counters that see EVERY request, admitted or not: the sliding-window
//! estimate with the model's integer formula, and the exact count it
//! approximates. The model (`ratelimit::model`) counts admitted requests
//! only; Cloudflare's measure and the estimate-error theory count all.

use std::collections::VecDeque;

/// The sliding estimate in requests: previous × (1 − f) + current, computed
/// as the model does, multiplied through by the window: previous ×
/// (window − elapsed) + current × window.
pub fn estimate(prev: u64, cur: u64, elapsed: u64, window: u64) -> f64 {
    (prev * (window - elapsed) + cur * window) as f64 / window as f64
}

/// A sliding-window counter of all requests (two aligned windows).
#[derive(Clone, Debug)]
pub struct CountAll {
    window: u64,
    index: u64,
    cur: u64,
    prev: u64,
}

impl CountAll {
    /// An empty counter.
    pub fn new(window: u64) -> CountAll {
        CountAll { window, index: 0, cur: 0, prev: 0 }
    }

    /// Counts one request at `now` (not earlier than the last) and says
    /// whether the estimate including it exceeds `limit`: the model's test
    /// `prev × (window − elapsed) + (cur + 1) × window > limit × window`.
    pub fn over_with(&mut self, now: u64, limit: u64) -> bool {
        let index = now / self.window;
        if index != self.index {
            // The current window becomes the previous one, or both are stale.
            self.prev = if index == self.index + 1 { self.cur } else { 0 };
            self.cur = 0;
            self.index = index;
        }
        let elapsed = now % self.window;
        let over = self.prev * (self.window - elapsed) + (self.cur + 1) * self.window > limit * self.window;
        self.cur += 1;
        over
    }
}

/// The exact number of requests in the last window, (now − window, now].
#[derive(Clone, Debug)]
pub struct ExactCount {
    window: u64,
    times: VecDeque<u64>,
}

impl ExactCount {
    /// An empty log.
    pub fn new(window: u64) -> ExactCount {
        ExactCount { window, times: VecDeque::new() }
    }

    /// Counts one request at `now` and returns the count including it.
    pub fn push(&mut self, now: u64) -> u64 {
        while self.times.front().is_some_and(|&t| t + self.window <= now) {
            self.times.pop_front();
        }
        self.times.push_back(now);
        self.times.len() as u64
    }
}

/// Requests of a sorted trace in [from, to).
pub fn count_between(trace: &[u64], from: u64, to: u64) -> u64 {
    (trace.partition_point(|&t| t < to) - trace.partition_point(|&t| t < from)) as u64
}

/// The most requests of a sorted trace in any `window` ms, (t − window, t].
pub fn worst_window(times: &[u64], window: u64) -> u64 {
    let mut worst = 0;
    let mut start = 0;
    for (end, &t) in times.iter().enumerate() {
        while times[start] + window <= t {
            start += 1;
        }
        worst = worst.max(end - start + 1);
    }
    worst as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_all_agrees_with_the_model_on_admitted_only_traffic() {
        // Below the limit the model admits everything, so it counts all too.
        use ratelimit::algorithm::Algorithm;
        use ratelimit::model::ClientModel;
        use ratelimit::spec::LimitSpec;
        let spec = LimitSpec { algorithm: Algorithm::SlidingWindow, limit: 1000, window_ms: 1000, burst: 1000 };
        let mut model = ClientModel::new(&[spec]);
        let mut counter = CountAll::new(1000);
        for t in (0..5000).step_by(7) {
            let allowed = model.decide(t, t, &[1])[0].allowed;
            assert_eq!(!allowed, counter.over_with(t, 1000), "at {t}");
        }
        // And at a limit it reaches, the first refusal comes at the same request.
        let spec = LimitSpec { limit: 50, ..spec };
        let (mut model, mut counter) = (ClientModel::new(&[spec]), CountAll::new(1000));
        let first = |f: &mut dyn FnMut(u64) -> bool| (0..2000).step_by(3).find(|&t| f(t));
        let a = first(&mut |t| !model.decide(t, t, &[1])[0].allowed);
        let b = first(&mut |t| counter.over_with(t, 50));
        assert_eq!(a, b);
    }

    #[test]
    fn exact_count_and_worst_window() {
        let mut e = ExactCount::new(10);
        assert_eq!([0, 5, 9, 10, 19].map(|t| e.push(t)), [1, 2, 3, 3, 2]);
        assert_eq!(worst_window(&[0, 5, 9, 10, 19, 19], 10), 3);
        assert_eq!(worst_window(&[0, 5, 9, 9, 19], 10), 4);
        assert_eq!(count_between(&[1, 2, 3, 10], 2, 10), 2);
    }
}
