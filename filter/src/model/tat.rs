//! token_bucket and gcra, one algorithm: how far the client is ahead of
//! its allowance, in units of 1/limit ms (tokens missing from a full
//! bucket; a TAT's distance past now). One unit of amount weighs `window`
//! units; amount fits while ahead + amount × window <= burst × window.
//! A debt is capped at one more tolerance (2 × burst × window units), and
//! at 2^53 - 1 ms.

use super::{allowed, ceil_div, denied, floor_div, LimitSpec, TOP_I};
use crate::outcome::LimitOutcome;
use crate::spec::Op;

/// When the state was written, and how far ahead the client was then;
/// `None` = never used (a full bucket).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TatState {
    last: Option<(u64, i128)>,
}

impl TatState {
    /// Decides at `now` (the store's clock).
    pub fn decide(&self, spec: &LimitSpec, now: u64, op: Op) -> (LimitOutcome, TatState) {
        let (limit, window, burst) =
            (i128::from(spec.limit.max(1)), i128::from(spec.window_ms), i128::from(spec.burst));
        let tolerance = burst * window;
        let cap = (2 * tolerance).min(TOP_I * limit);
        // A clock that went back refills nothing.
        let mut ahead =
            self.last.map_or(0, |(at, ahead)| (ahead - i128::from(now.saturating_sub(at)) * limit).clamp(0, cap));
        let mut amount = i128::from(op.amount());
        if let Op::Refund { .. } = op {
            // Written only if there was a lead to lower.
            let next =
                if ahead > 0 { TatState { last: Some((now, (ahead - amount * window).max(0))) } } else { self.clone() };
            return (LimitOutcome { allowed: true, remaining: 0, reset_ms: 0, retry_after_ms: Some(0) }, next);
        }
        let mut next = self.clone();
        if let Op::Charge(_) = op {
            ahead = (ahead + amount * window).min(cap);
            next = TatState { last: Some((now, ahead)) };
            amount = 1; // then reported as a check of one unit
        }
        let after = ahead + amount * window;
        let fits = amount <= burst && after <= tolerance;
        if fits {
            if let Op::Use(_) = op {
                ahead = after;
                next = TatState { last: Some((now, ahead)) };
            }
        }
        let remaining = if ahead <= tolerance { floor_div(tolerance - ahead, window) } else { 0 };
        let reset = ceil_div(ahead, limit);
        if fits {
            return (allowed(remaining, reset), next);
        }
        let retry = (amount <= burst).then(|| ceil_div(after - tolerance, limit));
        (denied(remaining, reset, retry), next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn a_bucket_refills_up_to_capacity_and_not_beyond() {
        // 10 per second, capacity 3.
        let spec = LimitSpec { algorithm: Algorithm::TokenBucket, limit: 10, window_ms: 1000, burst: 3 };
        let mut b = TatState::default();
        for _ in 0..3 {
            let (d, next) = b.decide(&spec, 0, Op::Use(1));
            assert!(d.allowed);
            b = next;
        }
        // An hour later the bucket holds 3, not 36000.
        let (d, _) = b.decide(&spec, 3_600_000, Op::Use(4));
        assert!(!d.allowed);
        assert_eq!(d.remaining, 3);
        assert_eq!(d.retry_after_ms, None, "cost 4 never fits a capacity of 3");
    }

    #[test]
    #[wasm_bindgen_test]
    fn gcra_paces_requests_one_emission_interval_apart() {
        // 3 per second, burst 1: one request every 333.33 ms.
        let spec = LimitSpec { algorithm: Algorithm::Gcra, limit: 3, window_ms: 1000, burst: 1 };
        let (d, g) = TatState::default().decide(&spec, 0, Op::Use(1));
        assert!(d.allowed);
        let (d, _) = g.decide(&spec, 1, Op::Use(1));
        assert_eq!(d.retry_after_ms, Some(333));
        assert!(!g.decide(&spec, 333, Op::Use(1)).0.allowed);
        assert!(g.decide(&spec, 334, Op::Use(1)).0.allowed);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_debt_is_capped_at_one_more_bucket() {
        // 10 per second, capacity 5: a charge of 100 leaves tokens at -5,
        // not -95: full again in one second, one token back in 600 ms.
        let spec = LimitSpec { algorithm: Algorithm::TokenBucket, limit: 10, window_ms: 1000, burst: 5 };
        let (d, b) = TatState::default().decide(&spec, 0, Op::Charge(100));
        assert_eq!((d.allowed, d.remaining, d.reset_ms, d.retry_after_ms), (false, 0, 1000, Some(600)));
        assert!(!b.decide(&spec, 599, Op::Check(1)).0.allowed);
        assert!(b.decide(&spec, 600, Op::Check(1)).0.allowed);
    }
}
