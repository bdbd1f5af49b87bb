//! token_bucket: tokens in units of 1/window, refilled `limit` units per ms.

use super::{allowed, ceil_div, denied, floor_div, LimitSpec};
use crate::decision::Decision;

/// Tokens (in 1/window units) at the last update; `None` = a full bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BucketState {
    last: Option<(i128, u64)>,
}

impl BucketState {
    /// Decides at `now` (the store's clock).
    pub fn check(&self, spec: &LimitSpec, now: u64, cost: u64) -> (Decision, BucketState) {
        let (limit, window) = (i128::from(spec.limit), i128::from(spec.window_ms));
        let capacity = i128::from(spec.burst) * window;
        let tokens = match self.last {
            None => capacity,
            Some((units, at)) => (units + i128::from(now.saturating_sub(at)) * limit).min(capacity),
        };
        let need = i128::from(cost) * window;
        if tokens < need {
            let retry = (cost <= spec.burst).then(|| ceil_div(need - tokens, limit));
            return (denied(floor_div(tokens, window), ceil_div(capacity - tokens, limit), retry), self.clone());
        }
        let left = tokens - need;
        let full_in = ceil_div(capacity - left, limit);
        (allowed(floor_div(left, window), full_in), BucketState { last: Some((left, now)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn refills_up_to_capacity_and_not_beyond() {
        // 10 per second, capacity 3.
        let spec = LimitSpec { algorithm: Algorithm::TokenBucket, limit: 10, window_ms: 1000, burst: 3 };
        let mut b = BucketState::default();
        for _ in 0..3 {
            let (d, next) = b.check(&spec, 0, 1);
            assert!(d.allowed);
            b = next;
        }
        // An hour later the bucket holds 3, not 36000.
        let (d, _) = b.check(&spec, 3_600_000, 4);
        assert!(!d.allowed);
        assert_eq!(d.remaining, 3);
        assert_eq!(d.retry_after_ms, None, "cost 4 never fits a capacity of 3");
    }
}
