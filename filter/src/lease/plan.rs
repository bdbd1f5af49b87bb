//! How large a lease to ask for, and until when one holds.
//!
//! The size follows the client's pace on this proxy: a client that spent
//! its last lease of g requests in t ms is asked g x `max_age` / t, or what
//! the worker saw of it in the last `max_age` if that is more (once that
//! reaches `HOT_AFTER`: a lease granted long ago must not keep a client
//! that is hot again from leases). It is capped by `max_units`, and by a share of
//! what the store said remains: remaining ÷ (2 × fleet_size), so that near
//! the limit leases shrink to nothing and every request is decided by the
//! store again, and no proxy can take more than half of what is left from
//! the others; what the store said caps only while it can still hold.

use super::heat::HOT_AFTER;
use super::record::LeaseRecord;
use crate::time::Instant;

/// A lease's settings (the tightest of the rules it covers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseParams {
    /// Requests one lease admits at most.
    pub max_units: u64,
    /// How long a lease holds at most (ms).
    pub max_age_ms: u64,
    /// Proxies sharing the limits.
    pub fleet_size: u64,
}

/// What kind of limit a lease covers, for its expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Span {
    /// A window aligned to `now + offset` (fixed and sliding windows):
    /// leased units were counted in it and end with it.
    Window {
        /// Its length (ms).
        window_ms: u64,
        /// Its offset (staggered fixed windows; else 0).
        offset_ms: u64,
    },
    /// Tokens taken now (token bucket, GCRA) from a bucket refilling
    /// `limit` units every `window_ms`: they hold while the bucket, had
    /// they not been taken, would not yet be full again. Past that, the
    /// store's bucket and the leased units would add up to more than its
    /// capacity: a client idle until its bucket refilled could spend both
    /// at once.
    Tokens {
        /// The refill period (ms).
        window_ms: u64,
        /// Units refilled per period.
        limit: u64,
    },
}

impl Span {
    /// The span of tokens refilled at `limit` instead (an operator's
    /// override of the limit: its bucket refills at that rate); 0, and
    /// windows, keep it.
    pub fn at_limit(self, limit: u64) -> Span {
        match self {
            Span::Tokens { window_ms, .. } if limit > 0 => Span::Tokens { window_ms, limit },
            other => other,
        }
    }
}

/// One limit of a granted lease, for its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Granted {
    /// What ends its units.
    pub span: Span,
    /// Until the limit is fully available again, as the store said at the
    /// grant, the lease's units counted (ms).
    pub reset_ms: u64,
    /// Units the lease took from it.
    pub units: u64,
}

/// Requests to ask for: the client's pace over `max_age`, capped by
/// `max_units` and by the share of what the last lease of its fingerprint
/// (`previous`, live or not) said remains; 0 for a client that is not hot
/// (`heat`: its requests in the last `max_age` on this worker) and had no
/// lease.
pub fn ask(params: &LeaseParams, previous: Option<&LeaseRecord>, heat: u64, now: Instant) -> u64 {
    let now_ms = now.ms();
    let since_last = match previous {
        Some(p) if p.granted > 0 => {
            let took = now_ms.saturating_sub(p.granted_at_ms).max(1);
            let n = u128::from(p.granted) * u128::from(params.max_age_ms) / u128::from(took);
            u64::try_from(n).unwrap_or(u64::MAX)
        }
        _ => 0,
    };
    // The pace seen here counts too: a lease granted long ago (the client
    // paused, then came back) says the client is slow, never that it is
    // not hot now.
    let paced = if heat >= HOT_AFTER { since_last.max(heat) } else { since_last };
    if paced == 0 {
        return 0;
    }
    let share = previous.map_or(u64::MAX, |p| share(params, p, now));
    paced.min(params.max_units).min(share)
}

/// The share of what `previous` said remains, in requests: remaining ÷
/// (2 × fleet_size) of its tightest limit. What it said is only the store's
/// view while it can still hold: a limit whose reset has passed (a new
/// window, a refilled bucket) caps nothing, and nothing caps once the
/// record is older than `max_age`. Otherwise a refused ask (0 remaining,
/// the client over its limit) would size every later ask at 0, in every
/// later window: no lease ever again. Asking too much costs nothing: the
/// store refuses all or nothing, and the refusal is the fresh view.
fn share(params: &LeaseParams, previous: &LeaseRecord, now: Instant) -> u64 {
    let now_ms = now.ms();
    if now_ms >= previous.granted_at_ms.saturating_add(params.max_age_ms) {
        return u64::MAX;
    }
    let left = previous
        .limits
        .iter()
        .filter(|l| now_ms < l.reset_at_ms)
        .map(|l| l.remaining_at_grant / l.per_request.max(1))
        .min()
        .unwrap_or(u64::MAX);
    left / params.fleet_size.max(1).saturating_mul(2)
}

/// Until when a lease asked at `now_ms` (no later than the store decided
/// it) holds (exclusive): `max_age` after it, no later than the end of the
/// window of any windowed limit (units counted in a window are spent in
/// it), and no later than the instant any token limit's bucket would be
/// full again without the lease: its reset less the refill of the leased
/// units (rounded so the end is never late: at every instant before it,
/// the store's tokens and the lease's together fit the capacity).
pub fn expires_at(now: Instant, max_age_ms: u64, limits: &[Granted]) -> u64 {
    let now_ms = now.ms();
    let mut end = now_ms.saturating_add(max_age_ms);
    for g in limits {
        match g.span {
            Span::Window { window_ms, offset_ms } => {
                let window = window_ms.max(1);
                let into = now_ms.saturating_add(offset_ms) % window;
                end = end.min(now_ms.saturating_add(window - into));
            }
            Span::Tokens { window_ms, limit } => {
                let refill = (u128::from(g.units) * u128::from(window_ms)).div_ceil(u128::from(limit.max(1)));
                let life = u128::from(g.reset_ms).saturating_sub(refill);
                end = end.min(now_ms.saturating_add(u64::try_from(life).unwrap_or(u64::MAX)));
            }
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::LeasedLimit;
    use wasm_bindgen_test::wasm_bindgen_test;

    const NOW: u64 = 1_700_000_000_000;
    const PARAMS: LeaseParams = LeaseParams { max_units: 100, max_age_ms: 1_000, fleet_size: 3 };

    fn previous(granted: u64, granted_at_ms: u64, remaining: &[(u64, u64)]) -> LeaseRecord {
        previous_until(granted, granted_at_ms, remaining, NOW + 60_000)
    }

    fn previous_until(granted: u64, granted_at_ms: u64, remaining: &[(u64, u64)], reset_at_ms: u64) -> LeaseRecord {
        LeaseRecord {
            fingerprint: 1,
            expires_at_ms: 0,
            requests_left: 0,
            granted,
            granted_at_ms,
            limits: remaining
                .iter()
                .map(|&(r, per)| LeasedLimit { remaining_at_grant: r, reset_at_ms, per_request: per, limit: 0 })
                .collect(),
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_client_is_asked_a_lease_once_hot_and_then_at_its_pace() {
        assert_eq!(ask(&PARAMS, None, HOT_AFTER - 1, Instant::from_ms(NOW)), 0, "not hot yet");
        assert_eq!(ask(&PARAMS, None, HOT_AFTER, Instant::from_ms(NOW)), HOT_AFTER);
        assert_eq!(ask(&PARAMS, None, 1_000, Instant::from_ms(NOW)), 100, "max_units");
        // 20 requests spent in 250 ms: 80 in a max_age of 1 s.
        let fast = previous(20, NOW - 250, &[(10_000, 1)]);
        assert_eq!(ask(&PARAMS, Some(&fast), 0, Instant::from_ms(NOW)), 80);
        // 20 in 4 s (it expired unspent, or the client slowed): 5.
        let slow = previous(20, NOW - 4_000, &[(10_000, 1)]);
        assert_eq!(ask(&PARAMS, Some(&slow), 0, Instant::from_ms(NOW)), 5);
        // A lease of 4 a minute ago, and the client hot again: its pace now.
        let stale = previous(4, NOW - 60_000, &[(10_000, 1)]);
        assert_eq!(ask(&PARAMS, Some(&stale), 0, Instant::from_ms(NOW)), 0);
        assert_eq!(ask(&PARAMS, Some(&stale), 50, Instant::from_ms(NOW)), 50);
        assert_eq!(ask(&PARAMS, Some(&fast), 50, Instant::from_ms(NOW)), 80, "the faster of the two");
    }

    #[test]
    #[wasm_bindgen_test]
    fn near_the_limit_leases_shrink_to_nothing() {
        // remaining / (2 x 3 proxies), per request units of the tightest limit.
        let fast = |remaining: &[(u64, u64)]| {
            ask(&PARAMS, Some(&previous(1_000, NOW - 100, remaining)), 0, Instant::from_ms(NOW))
        };
        assert_eq!(fast(&[(600, 1)]), 100);
        assert_eq!(fast(&[(300, 1)]), 50);
        assert_eq!(fast(&[(300, 1), (1_000, 10)]), 16, "100 requests left of the second limit");
        assert_eq!(fast(&[(5, 1)]), 0);
        assert_eq!(fast(&[(0, 1)]), 0);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_refusal_caps_asks_only_until_its_limits_reset_or_it_is_max_age_old() {
        // A refused ask 100 ms ago: 0 remaining until the window ends.
        let refused = |reset_at_ms| previous_until(0, NOW - 100, &[(0, 1)], reset_at_ms);
        assert_eq!(
            ask(&PARAMS, Some(&refused(NOW + 500)), 50, Instant::from_ms(NOW)),
            0,
            "the same window: nothing left"
        );
        assert_eq!(ask(&PARAMS, Some(&refused(NOW)), 50, Instant::from_ms(NOW)), 50, "the window after it");
        // Its limits' resets far ahead, but the refusal is max_age old.
        let old = previous_until(0, NOW - 1_000, &[(0, 1)], NOW + 60_000);
        assert_eq!(ask(&PARAMS, Some(&old), 50, Instant::from_ms(NOW)), 50);
        let young = previous_until(0, NOW - 999, &[(0, 1)], NOW + 60_000);
        assert_eq!(ask(&PARAMS, Some(&young), 50, Instant::from_ms(NOW)), 0);
        // Of two limits, only the one still in its window caps.
        let mut two = previous_until(0, NOW - 100, &[(0, 1), (300, 1)], NOW + 500);
        two.limits[0].reset_at_ms = NOW;
        assert_eq!(ask(&PARAMS, Some(&two), 80, Instant::from_ms(NOW)), 50);
    }

    fn window(span: Span) -> Granted {
        Granted { span, reset_ms: 0, units: 1 }
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_lease_ends_with_its_windows_or_its_age() {
        let start = NOW - NOW % 60_000;
        let minute = window(Span::Window { window_ms: 60_000, offset_ms: 0 });
        assert_eq!(expires_at(Instant::from_ms(start + 10_000), 5_000, &[minute]), start + 15_000, "age first");
        assert_eq!(
            expires_at(Instant::from_ms(start + 58_000), 5_000, &[minute]),
            start + 60_000,
            "the window ends first"
        );
        // A bucket of 100 per 100 s, 30 s from full with the lease's 4 units: 26 s.
        let tokens = Granted { span: Span::Tokens { window_ms: 100_000, limit: 100 }, reset_ms: 30_000, units: 4 };
        assert_eq!(expires_at(Instant::from_ms(start + 58_000), 5_000, &[tokens]), start + 63_000, "tokens: age first");
        let shifted = window(Span::Window { window_ms: 60_000, offset_ms: 30_000 });
        assert_eq!(expires_at(Instant::from_ms(start + 28_000), 5_000, &[shifted, tokens]), start + 30_000);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_token_lease_ends_before_the_bucket_would_be_full_without_it() {
        let bucket = Span::Tokens { window_ms: 100_000, limit: 100 };
        let lease =
            |reset_ms, units| expires_at(Instant::from_ms(NOW), 30_000, &[Granted { span: bucket, reset_ms, units }]);
        // Four requests and a lease of 4 from a full bucket: 8 tokens out,
        // full again in 8 s; without the lease's 4, in 4 s.
        assert_eq!(lease(8_000, 4), NOW + 4_000);
        // Taken from a full bucket, nothing else out: no life at all.
        assert_eq!(lease(4_000, 4), NOW);
        assert_eq!(lease(1_000, 4), NOW, "never before it was asked");
        // A drained bucket: the age ends it first.
        assert_eq!(lease(90_000, 10), NOW + 30_000);
        // 3 per second (333.33 ms a unit), a lease of 1 with 1,000 ms to
        // full: 666.67 ms without it, so the last instant it admits is 666.
        let gcra = Granted { span: Span::Tokens { window_ms: 1_000, limit: 3 }, reset_ms: 1_000, units: 1 };
        assert_eq!(expires_at(Instant::from_ms(NOW), 30_000, &[gcra]), NOW + 666);
    }
}
