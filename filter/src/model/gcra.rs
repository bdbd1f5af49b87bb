//! gcra: the theoretical arrival time, in units of 1/limit ms.

use super::{allowed, ceil_div, denied, floor_div, LimitSpec};
use crate::decision::Decision;

/// The TAT as (ms, remainder in units); `None` = idle.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcraState {
    tat: Option<(u64, i128)>,
}

impl GcraState {
    /// Decides at `now` (the store's clock).
    pub fn check(&self, spec: &LimitSpec, now: u64, cost: u64) -> (Decision, GcraState) {
        let (limit, window) = (i128::from(spec.limit), i128::from(spec.window_ms));
        let ahead = self.tat.map_or(0, |(ms, rem)| ((i128::from(ms) - i128::from(now)) * limit + rem).max(0));
        let tolerance = i128::from(spec.burst) * window;
        let after = ahead + i128::from(cost) * window;
        if after > tolerance {
            let retry = (cost <= spec.burst).then(|| ceil_div(after - tolerance, limit));
            let left = if tolerance > ahead { floor_div(tolerance - ahead, window) } else { 0 };
            return (denied(left, ceil_div(ahead, limit), retry), self.clone());
        }
        let ms = floor_div(after, limit);
        let tat = (now + u64::try_from(ms).unwrap_or(0), after - ms * limit);
        (allowed(floor_div(tolerance - after, window), ceil_div(after, limit)), GcraState { tat: Some(tat) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn paces_requests_one_emission_interval_apart() {
        // 3 per second, burst 1: one request every 333.33 ms.
        let spec = LimitSpec { algorithm: Algorithm::Gcra, limit: 3, window_ms: 1000, burst: 1 };
        let (d, g) = GcraState::default().check(&spec, 0, 1);
        assert!(d.allowed);
        let (d, _) = g.check(&spec, 1, 1);
        assert_eq!(d.retry_after_ms, Some(333));
        assert!(!g.check(&spec, 333, 1).0.allowed);
        assert!(g.check(&spec, 334, 1).0.allowed);
    }
}
