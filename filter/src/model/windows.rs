//! sliding_window and fixed_window: counters per window index. A count
//! past the limit is a debt; it saturates at 2^53 - 1, where it already
//! denies through every window it is read in.

use std::collections::BTreeMap;

use super::{allowed, denied, floor_div, LimitSpec, TOP_I};
use crate::outcome::LimitOutcome;
use crate::spec::Op;

/// Counts per window index (only the current and previous ones matter).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WindowCounts {
    counts: BTreeMap<u64, i128>,
}

impl WindowCounts {
    fn count(&self, index: Option<u64>) -> i128 {
        index.and_then(|i| self.counts.get(&i)).copied().unwrap_or(0)
    }

    fn with(&self, index: u64, count: i128) -> WindowCounts {
        let mut next = self.clone();
        next.counts.insert(index, count.min(TOP_I));
        // Older windows have expired from the store.
        next.counts.retain(|i, _| *i + 1 >= index);
        next
    }

    /// A refund: the count of the window `at_ms` fell in (shifted by
    /// `offset` ms) loses `amount`, never going below 0.
    fn refund(&self, spec: &LimitSpec, at_ms: u64, amount: u64, offset: u64) -> (LimitOutcome, WindowCounts) {
        let index = at_ms.saturating_add(offset) / spec.window_ms.max(1);
        let count = self.count(Some(index));
        let next = if count > 0 { self.with(index, (count - i128::from(amount)).max(0)) } else { self.clone() };
        (LimitOutcome { allowed: true, remaining: 0, reset_ms: 0, retry_after_ms: Some(0), overridden: None }, next)
    }

    /// fixed_window at `now`, its windows shifted by `offset` ms.
    pub fn fixed(&self, spec: &LimitSpec, now: u64, op: Op, offset: u64) -> (LimitOutcome, WindowCounts) {
        if let Op::Refund { amount, at, .. } = op {
            return self.refund(spec, at.ms(), amount, offset);
        }
        let (limit, window) = (i128::from(spec.limit), i128::from(spec.window_ms.max(1)));
        let shifted = i128::from(now) + i128::from(offset);
        let index = u64::try_from(shifted / window).unwrap_or(u64::MAX);
        let reset = window - shifted % window;
        let mut count = self.count(Some(index));
        let mut amount = i128::from(op.amount());
        let mut next = self.clone();
        if let Op::Charge(_) = op {
            count = (count + amount).min(TOP_I);
            next = self.with(index, count);
            amount = 1; // then reported as a check of one unit
        }
        if count + amount > limit {
            let retry = (amount <= limit).then_some(reset);
            return (denied(limit - count, reset, retry), next);
        }
        if let Op::Use(_) = op {
            count += amount;
            next = self.with(index, count);
        }
        (allowed(limit - count, reset), next)
    }

    /// sliding_window at `now`.
    pub fn sliding(&self, spec: &LimitSpec, now: u64, op: Op) -> (LimitOutcome, WindowCounts) {
        if let Op::Refund { amount, at, .. } = op {
            return self.refund(spec, at.ms(), amount, 0);
        }
        let (limit, window) = (i128::from(spec.limit), i128::from(spec.window_ms.max(1)));
        let index = now / spec.window_ms.max(1);
        let elapsed = i128::from(now % spec.window_ms.max(1));
        let mut cur = self.count(Some(index));
        let prev = self.count(index.checked_sub(1));
        let ttl = (2 * window - elapsed).min(TOP_I);
        let mut amount = i128::from(op.amount());
        let mut next = self.clone();
        if let Op::Charge(_) = op {
            cur = (cur + amount).min(TOP_I);
            next = self.with(index, cur);
            amount = 1;
        }
        let room = |cur: i128| limit * window - prev * (window - elapsed) - cur * window;
        let fits = room(cur) >= amount * window;
        let retry = if fits { None } else { Some(sliding_retry(prev, cur, amount, limit, window, elapsed)) };
        if fits {
            if let Op::Use(_) = op {
                cur += amount;
                next = self.with(index, cur);
            }
        }
        let remaining = floor_div(room(cur).max(0), window);
        let reset = if cur > 0 {
            ttl
        } else if prev > 0 {
            window - elapsed
        } else {
            0
        };
        match retry {
            None => (allowed(remaining, reset), next),
            Some(retry) => (denied(remaining, reset, retry), next),
        }
    }
}

/// First instant (ms from now) at which the estimate leaves room for
/// `amount`; `None` when it never can (more than the limit).
fn sliding_retry(prev: i128, cur: i128, amount: i128, limit: i128, window: i128, elapsed: i128) -> Option<i128> {
    if amount > limit {
        return None;
    }
    // This window, once the previous count's weight has fallen enough.
    let room = (limit - cur - amount) * window;
    if room >= 0 && prev > 0 {
        let at = window - floor_div(room, prev);
        if at < window {
            return Some(at - elapsed);
        }
    }
    // Next window, the current count weighing as the previous one.
    let at = if cur > 0 { (window - floor_div((limit - amount) * window, cur)).max(0) } else { 0 };
    let retry = if at < window { window - elapsed + at } else { 2 * window - elapsed };
    Some(retry.min(TOP_I))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use wasm_bindgen_test::wasm_bindgen_test;

    const SW: LimitSpec = LimitSpec { algorithm: Algorithm::SlidingWindow, limit: 10, window_ms: 1000, burst: 10 };
    const FW: LimitSpec = LimitSpec { algorithm: Algorithm::FixedWindow, limit: 10, window_ms: 1000, burst: 10 };

    #[test]
    #[wasm_bindgen_test]
    fn sliding_estimate_at_half_window_counts_half_the_previous() {
        // 10 in window 0, then at t=1500 (f = 0.5) the estimate is 5: 5 more fit.
        let mut w = WindowCounts::default().with(0, 10);
        let mut admitted = 0;
        for _ in 0..10 {
            let (d, next) = w.sliding(&SW, 1500, Op::Use(1));
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
        let w = WindowCounts::default().with(0, 10).with(1, 5);
        let (d, _) = w.sliding(&SW, 1500, Op::Use(1));
        assert!(!d.allowed);
        let retry = d.retry_after_ms.unwrap();
        assert!(!w.sliding(&SW, 1500 + retry - 1, Op::Use(1)).0.allowed);
        assert!(w.sliding(&SW, 1500 + retry, Op::Use(1)).0.allowed);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_charge_past_the_limit_denies_until_the_debt_weighs_less_than_the_limit() {
        // 25 charged in window 0 (limit 10): nothing in window 0; in window 1
        // 25 x (1 - f) + 1 <= 10 from f = 16/25, i.e. 640 ms into it.
        let (d, w) = WindowCounts::default().sliding(&SW, 0, Op::Charge(25));
        assert_eq!((d.allowed, d.remaining, d.reset_ms, d.retry_after_ms), (false, 0, 2000, Some(1640)));
        assert!(!w.sliding(&SW, 1639, Op::Check(1)).0.allowed);
        assert!(w.sliding(&SW, 1640, Op::Check(1)).0.allowed);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_fixed_window_shifted_by_its_offset_resets_at_the_shifted_boundary() {
        // Offset 300: the window containing t=800 runs from 700 to 1700.
        let (d, w) = WindowCounts::default().fixed(&FW, 800, Op::Use(10), 300);
        assert_eq!((d.allowed, d.remaining, d.reset_ms), (true, 0, 900));
        assert!(!w.fixed(&FW, 1699, Op::Use(1), 300).0.allowed);
        assert!(w.fixed(&FW, 1700, Op::Use(1), 300).0.allowed);
    }
}
