//! sliding_log: the scores of admitted requests; an entry counts while it
//! is in the window (t - window, t], t being now or, if the clock went
//! back, the newest entry. No debt: a charge is refused by the script.

use super::{allowed, denied, LimitSpec};
use crate::outcome::LimitOutcome;
use crate::spec::Op;

/// Admission times in ms, sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogState {
    entries: Vec<u64>,
}

impl LogState {
    /// Decides at `now` (the store's clock); a charge is taken as a use.
    pub fn decide(&self, spec: &LimitSpec, now: u64, op: Op) -> (LimitOutcome, LogState) {
        let (limit, window) = (i128::from(spec.limit), i128::from(spec.window_ms));
        let newest = self.entries.last().copied();
        let t = newest.map_or(now, |n| n.max(now));
        let start = i128::from(t) - window;
        let in_window: Vec<u64> = self.entries.iter().copied().filter(|&s| i128::from(s) > start).collect();
        let count = in_window.len() as i128;
        let amount = i128::from(op.amount());
        let reset = match newest {
            Some(n) if count > 0 => i128::from(n) + window - i128::from(t),
            _ => 0,
        };
        if count + amount > limit {
            let retry = (amount <= limit).then(|| {
                let rank = usize::try_from(count + amount - limit - 1).unwrap_or(0);
                in_window.get(rank).map_or(0, |&s| i128::from(s) + window - i128::from(t))
            });
            return (denied(limit - count, reset, retry), self.clone());
        }
        if let Op::Check(_) = op {
            return (allowed(limit - count, reset), self.clone());
        }
        let mut next = in_window;
        next.extend(std::iter::repeat_n(t, usize::try_from(amount).unwrap_or(0)));
        (allowed(limit - count - amount, window), LogState { entries: next })
    }
}
