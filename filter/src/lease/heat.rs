//! Who is hot on this worker: how many requests a lease's identity sent in
//! the last `max_age`, as a sliding-window counter (the previous period
//! weighed by how much of it is still inside the window, plus the current
//! one) in a fixed table, so that memory stays flat whatever the number of
//! clients. Each identity has four candidate counters and a newcomer takes the
//! coldest of them, so a hot client keeps its count beside cold ones (with
//! one counter each, a fifth of 1,000 clients shared a counter with another and
//! restarted each other's count: never hot). A client pushed out only
//! starts counting again: heat sizes leases, it never admits anything.

use crate::time::Instant;

/// Requests within `max_age` on one worker that make an identity hot: its
/// next store decision asks for a lease. Below this, every request is
/// decided by the store, as without leases.
pub const HOT_AFTER: u64 = 4;

/// Identities tracked per worker (32 bytes each).
const COUNTERS: usize = 4096;

/// Counters an identity may hold: with four, a thousand clients in turn all
/// keep theirs (with two, 2% of them kept pushing each other out).
const CHOICES: usize = 4;

#[derive(Clone, Copy, Debug, Default)]
struct Counter {
    key: u64,
    /// Index of the period (`now / period_ms`) `current` counts.
    period: u64,
    current: u64,
    previous: u64,
}

/// The table of one worker.
#[derive(Debug)]
pub struct Heat {
    counters: Box<[Counter]>,
}

impl Default for Heat {
    fn default() -> Heat {
        Heat { counters: vec![Counter::default(); COUNTERS].into_boxed_slice() }
    }
}

impl Counter {
    /// Its requests in the last `period_ms` at `now_ms` (0 once stale).
    fn requests(&self, now: Instant, period_ms: u64) -> u64 {
        let now_ms = now.ms();
        let (current, previous) = match (now_ms / period_ms).checked_sub(self.period) {
            Some(0) => (self.current, self.previous),
            Some(1) => (0, self.current),
            _ => return 0,
        };
        let left = period_ms - now_ms % period_ms;
        // previous x (the part of it still within the last period) + current.
        let carried = (u128::from(previous) * u128::from(left) / u128::from(period_ms)) as u64;
        carried.saturating_add(current)
    }
}

/// The counters `key` may hold: one from each 16 bits of a fingerprint that
/// is already a hash (4,096 divides 65,536: each as likely as another).
fn candidates(key: u64) -> [usize; CHOICES] {
    [0, 1, 2, 3].map(|i| ((key >> (16 * i)) & 0xffff) as usize % COUNTERS)
}

impl Heat {
    /// The requests of `key` in the last `period_ms` at `now_ms`, as
    /// `observe` last counted them (0 if it holds no counter).
    pub fn estimate(&self, key: u64, now: Instant, period_ms: u64) -> u64 {
        let period_ms = period_ms.max(1);
        self.held(key).and_then(|i| self.counters.get(i)).map_or(0, |s| s.requests(now, period_ms))
    }

    /// The counter `key` holds, if any.
    fn held(&self, key: u64) -> Option<usize> {
        candidates(key).into_iter().find(|&i| self.counters.get(i).is_some_and(|s| s.key == key))
    }

    /// Counts a request of `key` at `now_ms`; the requests of `key` in the
    /// last `period_ms`, this one included (estimated across the period
    /// boundary).
    pub fn observe(&mut self, key: u64, now: Instant, period_ms: u64) -> u64 {
        let now_ms = now.ms();
        let period_ms = period_ms.max(1);
        let period = now_ms / period_ms;
        // Not held: the coldest candidate is given to it.
        let cold = |i: usize| self.counters.get(i).map_or(0, |s| s.requests(now, period_ms));
        let at = self.held(key).unwrap_or_else(|| {
            let counters = candidates(key);
            counters.into_iter().min_by_key(|&i| cold(i)).unwrap_or(counters[0])
        });
        let Some(s) = self.counters.get_mut(at) else { return 1 };
        if s.key != key || period > s.period.saturating_add(1) || period < s.period {
            *s = Counter { key, period, current: 0, previous: 0 };
        } else if period == s.period + 1 {
            *s = Counter { key, period, current: 0, previous: s.current };
        }
        s.current = s.current.saturating_add(1);
        s.requests(now, period_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    const NOW: u64 = 1_700_000_000_000;

    #[test]
    #[wasm_bindgen_test]
    fn it_counts_the_requests_of_the_last_period_sliding_over_its_boundary() {
        let mut h = Heat::default();
        let p = 1_000;
        let start = NOW - NOW % p;
        let counts: Vec<u64> = (0..10).map(|i| h.observe(42, Instant::from_ms(start + i * 10), p)).collect();
        assert_eq!(counts, (1..=10).collect::<Vec<_>>());
        // Half into the next period: half of the previous one still counts.
        assert_eq!(h.observe(42, Instant::from_ms(start + p + p / 2), p), 5 + 1);
        // Two periods later: nothing of before.
        assert_eq!(h.observe(42, Instant::from_ms(start + 3 * p), p), 1);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_newcomer_takes_the_coldest_of_its_slots_and_memory_stays_fixed() {
        let mut h = Heat::default();
        let s = COUNTERS as u64;
        // 1, 1 + COUNTERS and 1 + 2 x COUNTERS have the same counters (1 and 0).
        assert_eq!(candidates(1), [1, 0, 0, 0]);
        assert_eq!(candidates(1), candidates(1 + 2 * s));
        for _ in 0..3 {
            h.observe(1, Instant::from_ms(NOW), 1_000);
        }
        assert_eq!(h.observe(1 + s, Instant::from_ms(NOW), 1_000), 1);
        assert_eq!(h.observe(1, Instant::from_ms(NOW), 1_000), 4, "the hot one kept its count");
        assert_eq!(h.observe(1 + s, Instant::from_ms(NOW), 1_000), 2);
        // A third: it takes the colder counter; the hot one keeps counting.
        assert_eq!(h.observe(1 + 2 * s, Instant::from_ms(NOW), 1_000), 1);
        assert_eq!(h.estimate(1 + s, Instant::from_ms(NOW), 1_000), 0, "pushed out");
        assert_eq!(h.observe(1, Instant::from_ms(NOW), 1_000), 5);
        for key in 0..1_000_000u64 {
            h.observe(key.wrapping_mul(0x9e37_79b9_7f4a_7c15), Instant::from_ms(NOW), 1_000);
        }
        assert_eq!(h.counters.len(), COUNTERS);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_thousand_clients_in_turn_are_all_hot_after_a_few_rounds() {
        // With one counter each, about a fifth of them shared a counter and never
        // got past a count of 1.
        let mut h = Heat::default();
        let keys: Vec<u64> = (1..=1_000u64).map(|k| crate::fingerprint::combine(k, &[k])).collect();
        let mut last = vec![0; keys.len()];
        for round in 0..8 {
            for (i, &k) in keys.iter().enumerate() {
                last[i] = h.observe(k, Instant::from_ms(NOW + round), 1_000);
            }
        }
        let hot = last.iter().filter(|&&n| n >= HOT_AFTER).count();
        assert_eq!(hot, 1_000);
    }

    #[test]
    #[wasm_bindgen_test]
    fn an_estimate_reads_the_count_without_adding_to_it() {
        let mut h = Heat::default();
        let p = 1_000;
        let start = NOW - NOW % p;
        for _ in 0..6 {
            h.observe(5, Instant::from_ms(start), p);
        }
        assert_eq!((h.estimate(5, Instant::from_ms(start), p), h.estimate(5, Instant::from_ms(start), p)), (6, 6));
        assert_eq!(h.estimate(5, Instant::from_ms(start + p + p / 2), p), 3, "half of the last period");
        assert_eq!(h.estimate(5, Instant::from_ms(start + 2 * p), p), 0);
        assert_eq!(h.estimate(5 + COUNTERS as u64, Instant::from_ms(start), p), 0, "another client's counter");
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_clock_that_goes_back_restarts_the_count() {
        let mut h = Heat::default();
        h.observe(9, Instant::from_ms(NOW), 1_000);
        h.observe(9, Instant::from_ms(NOW), 1_000);
        assert_eq!(h.observe(9, Instant::from_ms(NOW - 5_000), 1_000), 1);
    }
}
