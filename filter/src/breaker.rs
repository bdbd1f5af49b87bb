//! The circuit breaker in front of the store, shared by the proxy's workers:
//! after N consecutive failures it opens and no store call is made for the
//! open period; then exactly one probe goes through. The probe's success
//! closes it; its failure opens it again.

use crate::config::Breaker;
use crate::shared::{read_u64s, write_u64s, SharedData};

const KEY: &str = "ratelimit.breaker";
const ATTEMPTS: usize = 8;

/// Whether to call the store now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Closed: call.
    Call,
    /// Half-open: this request is the one probe.
    Probe,
    /// Open: don't call; apply the failure policy.
    Open,
}

/// (consecutive failures, open until ms, probe deadline ms)
fn read<S: SharedData + ?Sized>(shared: &S) -> ([u64; 3], Option<u32>) {
    match shared.get(KEY) {
        Some((bytes, cas)) => (read_u64s::<3>(&bytes).unwrap_or([0; 3]), Some(cas)),
        None => ([0; 3], None),
    }
}

/// Decides whether this request may call the store. `probe_ms` bounds how
/// long one probe may hold the half-open state (its call's timeout and more).
pub fn gate<S: SharedData + ?Sized>(shared: &S, now_ms: u64, probe_ms: u64) -> Gate {
    for _ in 0..ATTEMPTS {
        let ([failures, open_until, probe_deadline], cas) = read(shared);
        if open_until == 0 {
            return Gate::Call;
        }
        if now_ms < open_until || now_ms < probe_deadline {
            return Gate::Open;
        }
        if shared.set(KEY, &write_u64s([failures, open_until, now_ms + probe_ms]), cas) {
            return Gate::Probe;
        }
    }
    Gate::Open
}

/// Records the outcome of a store call.
pub fn record<S: SharedData + ?Sized>(shared: &S, config: &Breaker, now_ms: u64, success: bool) {
    for _ in 0..ATTEMPTS {
        let ([failures, open_until, _], cas) = read(shared);
        let next = if success {
            if failures == 0 && open_until == 0 {
                return;
            }
            [0, 0, 0]
        } else {
            let failures = failures + 1;
            if failures >= u64::from(config.failures) {
                [failures, now_ms + config.open_ms, 0]
            } else {
                [failures, open_until, 0]
            }
        };
        if shared.set(KEY, &write_u64s(next), cas) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::fake::FakeShared;
    use wasm_bindgen_test::wasm_bindgen_test;

    const CFG: Breaker = Breaker { failures: 3, open_ms: 30_000 };

    #[test]
    #[wasm_bindgen_test]
    fn opens_after_three_failures_then_lets_one_probe_through() {
        let s = FakeShared::default();
        for t in 0..2 {
            record(&s, &CFG, t, false);
            assert_eq!(gate(&s, t, 100), Gate::Call, "{} failures keep it closed", t + 1);
        }
        record(&s, &CFG, 10, false);
        assert_eq!(gate(&s, 10, 100), Gate::Open);
        assert_eq!(gate(&s, 30_009, 100), Gate::Open, "open for 30 s");
        assert_eq!(gate(&s, 30_010, 100), Gate::Probe);
        assert_eq!(gate(&s, 30_011, 100), Gate::Open, "only one probe at a time");
        record(&s, &CFG, 30_020, true);
        assert_eq!(gate(&s, 30_021, 100), Gate::Call);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_failed_probe_reopens_and_a_lost_probe_is_replaced() {
        let s = FakeShared::default();
        for t in 0..3 {
            record(&s, &CFG, t, false);
        }
        assert_eq!(gate(&s, 30_002, 100), Gate::Probe);
        record(&s, &CFG, 30_050, false);
        assert_eq!(gate(&s, 60_049, 100), Gate::Open);
        assert_eq!(gate(&s, 60_050, 100), Gate::Probe);
        // That probe never reports back: after its deadline another goes.
        assert_eq!(gate(&s, 60_149, 100), Gate::Open);
        assert_eq!(gate(&s, 60_150, 100), Gate::Probe);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_success_resets_the_count_of_consecutive_failures() {
        let s = FakeShared::default();
        record(&s, &CFG, 0, false);
        record(&s, &CFG, 1, false);
        record(&s, &CFG, 2, true);
        record(&s, &CFG, 3, false);
        record(&s, &CFG, 4, false);
        assert_eq!(gate(&s, 5, 100), Gate::Call);
    }
}
