//! What each algorithm promises, computed from the uses the simulation
//! saw, not from the script or the model: the most a limit may admit and,
//! where the algorithm promises it, the room a refused request had.

/// One use of a limit: when (ms on the clock the algorithm reads) and how
/// many units it took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Use {
    pub at: u64,
    pub units: u64,
}

/// A token bucket of `burst` refilled at `limit` per `window_ms` (GCRA is
/// the same bucket: `burst` requests back to back), full at the first use:
/// the uses (sorted by `at`) fit it iff over every interval [a, b] they
/// took at most burst + limit × (b − a) / window. Returns the first
/// interval that took more: (its first use, its last, units taken, the
/// most allowed, rounded down).
pub fn bucket_overrun(uses: &[Use], limit: u64, window_ms: u64, burst: u64) -> Option<(usize, usize, u64, u64)> {
    let (limit, window, burst) = (i128::from(limit), i128::from(window_ms.max(1)), i128::from(burst));
    for k in 0..uses.len() {
        let mut taken = 0i128;
        for j in (0..=k).rev() {
            taken += i128::from(uses[j].units);
            let span = i128::from(uses[k].at - uses[j].at);
            if taken * window > burst * window + limit * span {
                let most = burst + limit * span / window;
                return Some((j, k, taken as u64, most as u64));
            }
        }
    }
    None
}

/// The units a bucket that took `uses` (all before `at`) holds at `at`,
/// times `window_ms` (exact: the script's own unit).
pub fn bucket_room(uses: &[Use], limit: u64, window_ms: u64, burst: u64, at: u64) -> i128 {
    let (limit, window, burst) = (i128::from(limit), i128::from(window_ms.max(1)), i128::from(burst));
    let mut room = burst * window;
    let mut taken = 0i128;
    for u in uses.iter().rev() {
        taken += i128::from(u.units);
        room = room.min(burst * window + limit * i128::from(at.saturating_sub(u.at)) - taken * window);
    }
    room
}

/// Units of `uses` in the window (at − window, at].
pub fn in_log_window(uses: &[Use], window_ms: u64, at: u64) -> u64 {
    uses.iter().filter(|u| u.at <= at && u.at + window_ms > at).map(|u| u.units).sum()
}

/// A sliding window's estimate at `at` for `uses` (each on the caller's
/// clock), times the window: the current window's count × window + the
/// previous one's × the part of it still inside the sliding window.
pub fn sliding_estimate(uses: &[Use], window_ms: u64, at: u64) -> u128 {
    let w = window_ms.max(1);
    let (index, elapsed) = (at / w, at % w);
    let count = |i: u64| -> u128 { uses.iter().filter(|u| u.at / w == i).map(|u| u128::from(u.units)).sum() };
    let prev = if index == 0 { 0 } else { count(index - 1) };
    count(index) * u128::from(w) + prev * u128::from(w - elapsed)
}

/// Units of `uses` in the fixed window `at` falls in (windows shifted by
/// `offset_ms`).
pub fn in_fixed_window(uses: &[Use], window_ms: u64, offset_ms: u64, at: u64) -> u64 {
    let w = window_ms.max(1);
    let index = (at + offset_ms) / w;
    uses.iter().filter(|u| (u.at + offset_ms) / w == index).map(|u| u.units).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uses(list: &[(u64, u64)]) -> Vec<Use> {
        list.iter().map(|&(at, units)| Use { at, units }).collect()
    }

    #[test]
    fn a_bucket_refilled_in_between_takes_more_and_no_more() {
        // 10,000 per 10 s: a bucket, then 600 ms of refill (600).
        let ok = uses(&[(0, 10_000), (600, 600)]);
        assert_eq!(bucket_overrun(&ok, 10_000, 10_000, 10_000), None);
        // The refund past a refill: 9,990 then 8,900 within 600 ms.
        let over = uses(&[(0, 10), (10_500, 9_990), (11_100, 8_900)]);
        assert_eq!(bucket_overrun(&over, 10_000, 10_000, 10_000), Some((1, 2, 18_890, 10_600)));
        assert_eq!(bucket_room(&ok, 10_000, 10_000, 10_000, 600), 0);
        assert_eq!(bucket_room(&ok, 10_000, 10_000, 10_000, 700), 100 * 10_000);
    }

    #[test]
    fn windows_count_what_they_hold() {
        let u = uses(&[(900, 1), (1_100, 2), (1_999, 1)]);
        assert_eq!(in_fixed_window(&u, 1_000, 0, 1_500), 3);
        assert_eq!(in_fixed_window(&u, 1_000, 200, 1_900), 1, "shifted by 200: [1800, 2800) holds 1999 only");
        assert_eq!(in_log_window(&u, 1_000, 1_899), 3, "(899, 1899]: 900 and 1100");
        assert_eq!(in_log_window(&u, 1_000, 1_900), 2, "900 is out at 1900");
        assert_eq!(in_log_window(&u, 1_000, 1_999), 3);
        // At 1500: the current window holds 3, the previous 1 of which half counts.
        assert_eq!(sliding_estimate(&u, 1_000, 1_500), 3 * 1_000 + 500);
    }
}
