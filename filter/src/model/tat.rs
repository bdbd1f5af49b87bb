//! token_bucket and gcra, one algorithm: how far the client is ahead of
//! its allowance, in units of 1/limit ms (tokens missing from a full
//! bucket; a TAT's distance past now). One unit of amount weighs `window`
//! units; amount fits while ahead + amount × window <= burst × window.
//! A debt is capped at one more tolerance (2 × burst × window units), and
//! at 2^53 - 1 ms. A bucket also keeps when its key was created and all
//! that was added to it (`Mark`): a refund gives back no more than the
//! bucket would hold had the request cost its usage from the start. Its key
//! expires as the script's does (once its lead is 0), and is then another
//! bucket.

use super::{allowed, ceil_div, denied, floor_div, LimitSpec, TOP_I};
use crate::outcome::LimitOutcome;
use crate::spec::{Mark, Op, COUNT};

/// When the state was written, how far ahead the client was then (in
/// units of 1/limit ms of the limit it was written under, the last item:
/// an override may change the limit), and the bucket's mark; `None` =
/// never used (a full bucket).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TatState {
    last: Option<(u64, i128, Mark, i128)>,
}

impl TatState {
    /// Decides at `now` (the store's clock).
    pub fn decide(&self, spec: &LimitSpec, now: u64, op: Op) -> (LimitOutcome, TatState) {
        let (limit, window, burst) =
            (i128::from(spec.limit.max(1)), i128::from(spec.window_ms), i128::from(spec.burst));
        let tolerance = burst * window;
        let cap = (2 * tolerance).min(TOP_I * limit);
        // Its key lives until its lead is 0 (at least 1 ms): then it is gone.
        let last = self.last.filter(|&(at, ahead, _, written)| {
            now - at.min(now) <= u64::try_from(ceil_div(ahead, written).max(1)).unwrap_or(u64::MAX)
        });
        // As the script keeps it: whole ms, then units of 1/limit ms of
        // whatever limit reads it; refilled by the ms elapsed (a clock that
        // went back refills nothing), full once they pass the whole ms.
        let mut ahead = last.map_or(0, |(at, ahead, _, written)| {
            let ms = floor_div(ahead, written) - i128::from(now.saturating_sub(at));
            if ms < 0 {
                0
            } else {
                (ms * limit + ahead - floor_div(ahead, written) * written).min(cap)
            }
        });
        let mut mark = last.map_or(Mark { born_ms: now, count: 0 }, |(_, _, mark, _)| mark);
        let mut amount = i128::from(op.amount());
        if let Op::Refund { mark: given, .. } = op {
            // Never below what was added since the reservation; nothing
            // back from another bucket. Written only if the lead falls.
            // What it gives back leaves the count (whole units), so refunds
            // land in any order; less than nothing since is nothing.
            let added = given.filter(|g| g.born_ms == mark.born_ms && last.is_some()).map(|g| {
                let since = (mark.count + COUNT - g.count % COUNT) % COUNT;
                i128::from(if since >= COUNT / 2 { 0 } else { since }) * window
            });
            let next = match added {
                Some(floor) if floor < 1 << 53 && floor < ahead => {
                    let lead = (ahead - amount * window).max(floor);
                    let back = u64::try_from((ahead - lead) / window).unwrap_or(0) % COUNT;
                    mark.count = (mark.count + COUNT - back) % COUNT;
                    TatState { last: Some((now, lead, mark, limit)) }
                }
                _ => self.clone(),
            };
            return (
                LimitOutcome { allowed: true, remaining: 0, reset_ms: 0, retry_after_ms: Some(0), overridden: None },
                next,
            );
        }
        let mut next = self.clone();
        if !matches!(op, Op::Check(_)) {
            mark.count = (mark.count + op.amount() % COUNT) % COUNT;
        }
        if let Op::Charge(_) = op {
            ahead = (ahead + amount * window).min(cap);
            next = TatState { last: Some((now, ahead, mark, limit)) };
            amount = 1; // then reported as a check of one unit
        }
        let after = ahead + amount * window;
        let fits = amount <= burst && after <= tolerance;
        if fits && matches!(op, Op::Use(_) | Op::Reserve(_)) {
            ahead = after;
            next = TatState { last: Some((now, ahead, mark, limit)) };
        }
        let remaining = if ahead <= tolerance { floor_div(tolerance - ahead, window) } else { 0 };
        let reset = ceil_div(ahead, limit);
        if fits && matches!(op, Op::Reserve(_)) {
            // The reply to a reservation: the lead after, and the mark.
            let lead = u64::try_from(ahead).unwrap_or(u64::MAX);
            let reply = LimitOutcome {
                allowed: true,
                remaining: lead,
                reset_ms: mark.born_ms,
                retry_after_ms: Some(mark.count),
                overridden: None,
            };
            return (reply, next);
        }
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
    use crate::time::Instant;
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
    fn a_refund_gives_back_no_more_than_the_bucket_would_hold_had_the_request_cost_less() {
        // A token a ms, 10,000 at once.
        let spec = LimitSpec { algorithm: Algorithm::TokenBucket, limit: 10_000, window_ms: 10_000, burst: 10_000 };
        let reserve = |b: &TatState, at, units| {
            let (d, next) = b.decide(&spec, at, Op::Reserve(units));
            (crate::spec::Mark::of(&spec, &d).map(|(_, m)| m), next)
        };
        let refund = |b: &TatState, at, amount, mark| {
            b.decide(&spec, at, Op::Refund { amount, at: Instant::from_ms(0), mark }).1
        };
        let missing = |b: &TatState, at| 10_000 - b.decide(&spec, at, Op::Check(1)).0.remaining;
        let (mark, b) = reserve(&TatState::default(), 0, 9_050);
        assert_eq!(mark, Some(crate::spec::Mark { born_ms: 0, count: 9_050 }));
        // Nothing else spent: all of it back.
        assert_eq!(missing(&refund(&b, 1_000, 5_000, mark), 1_000), 3_050);
        // 5,000 spent since, 50 of it still missing: 50 back.
        let (_, spent) = reserve(&b, 9_000, 5_000);
        assert_eq!(missing(&refund(&spent, 9_000, 9_040, mark), 9_000), 5_000);
        // The bucket was full (its key gone) before 9,990 were spent: nothing.
        let (_, again) = reserve(&b, 10_500, 9_990);
        assert_eq!(missing(&refund(&again, 10_600, 9_040, mark), 10_600), 9_890);
    }

    #[test]
    #[wasm_bindgen_test]
    fn refunds_of_reservations_held_at_once_land_in_any_order() {
        // Four of 20,000 at once, each using 3,000, refunded last taken first.
        let spec = LimitSpec { algorithm: Algorithm::TokenBucket, limit: 100_000, window_ms: 100_000, burst: 100_000 };
        let mut b = TatState::default();
        let mut marks = Vec::new();
        for _ in 0..4 {
            let (d, next) = b.decide(&spec, 0, Op::Reserve(20_000));
            marks.push(crate::spec::Mark::of(&spec, &d).map(|(_, m)| m));
            b = next;
        }
        for mark in marks.into_iter().rev() {
            b = b.decide(&spec, 200, Op::Refund { amount: 17_000, at: Instant::from_ms(0), mark }).1;
        }
        // 12,000 used, 200 refilled.
        assert_eq!(b.decide(&spec, 200, Op::Check(1)).0.remaining, 88_200);
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
