//! Who is hot on this worker: how many requests a lease's identity sent in
//! the last `max_age`, as a sliding-window counter (the previous period
//! weighed by how much of it is still inside the window, plus the current
//! one) in a fixed table, so that memory stays flat whatever the number of
//! clients. A slot shared by two clients restarts the count of the one that
//! arrives: heat only sizes leases, it never admits anything.

/// Requests within `max_age` on one worker that make an identity hot: its
/// next store decision asks for a lease. Below this, every request is
/// decided by the store, as without leases.
pub const HOT_AFTER: u64 = 4;

/// Identities tracked per worker (32 bytes each): enough that a thousand
/// clients rarely share one.
const SLOTS: usize = 4096;

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    key: u64,
    /// Index of the period (`now / period_ms`) `current` counts.
    period: u64,
    current: u64,
    previous: u64,
}

/// The table of one worker.
#[derive(Debug)]
pub struct Heat {
    slots: Box<[Slot]>,
}

impl Default for Heat {
    fn default() -> Heat {
        Heat { slots: vec![Slot::default(); SLOTS].into_boxed_slice() }
    }
}

impl Heat {
    /// The requests of `key` in the last `period_ms` at `now_ms`, as
    /// `observe` last counted them (0 if another key holds its slot).
    pub fn estimate(&self, key: u64, now_ms: u64, period_ms: u64) -> u64 {
        let period_ms = period_ms.max(1);
        let period = now_ms / period_ms;
        let Some(s) = self.slots.get((key % SLOTS as u64) as usize) else { return 0 };
        let (current, previous) = match period.checked_sub(s.period) {
            _ if s.key != key => return 0,
            Some(0) => (s.current, s.previous),
            Some(1) => (0, s.current),
            _ => return 0,
        };
        let left = period_ms - now_ms % period_ms;
        let carried = (u128::from(previous) * u128::from(left) / u128::from(period_ms)) as u64;
        carried.saturating_add(current)
    }

    /// Counts a request of `key` at `now_ms`; the requests of `key` in the
    /// last `period_ms`, this one included (estimated across the period
    /// boundary).
    pub fn observe(&mut self, key: u64, now_ms: u64, period_ms: u64) -> u64 {
        let period_ms = period_ms.max(1);
        let period = now_ms / period_ms;
        let Some(s) = self.slots.get_mut((key % SLOTS as u64) as usize) else { return 1 };
        if s.key != key || period > s.period.saturating_add(1) || period < s.period {
            *s = Slot { key, period, current: 0, previous: 0 };
        } else if period == s.period + 1 {
            *s = Slot { key, period, current: 0, previous: s.current };
        }
        s.current = s.current.saturating_add(1);
        let left = period_ms - now_ms % period_ms;
        // previous x (the part of it still within the last period) + current.
        let carried = (u128::from(s.previous) * u128::from(left) / u128::from(period_ms)) as u64;
        carried.saturating_add(s.current)
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
        let counts: Vec<u64> = (0..10).map(|i| h.observe(42, start + i * 10, p)).collect();
        assert_eq!(counts, (1..=10).collect::<Vec<_>>());
        // Half into the next period: half of the previous one still counts.
        assert_eq!(h.observe(42, start + p + p / 2, p), 5 + 1);
        // Two periods later: nothing of before.
        assert_eq!(h.observe(42, start + 3 * p, p), 1);
    }

    #[test]
    #[wasm_bindgen_test]
    fn clients_sharing_a_slot_restart_each_others_count_and_memory_stays_fixed() {
        let mut h = Heat::default();
        assert_eq!(h.observe(1, NOW, 1_000), 1);
        assert_eq!(h.observe(1, NOW, 1_000), 2);
        assert_eq!(h.observe(1 + SLOTS as u64, NOW, 1_000), 1);
        assert_eq!(h.observe(1, NOW, 1_000), 1);
        for key in 0..1_000_000u64 {
            h.observe(key.wrapping_mul(0x9e37_79b9_7f4a_7c15), NOW, 1_000);
        }
        assert_eq!(h.slots.len(), SLOTS);
    }

    #[test]
    #[wasm_bindgen_test]
    fn an_estimate_reads_the_count_without_adding_to_it() {
        let mut h = Heat::default();
        let p = 1_000;
        let start = NOW - NOW % p;
        for _ in 0..6 {
            h.observe(5, start, p);
        }
        assert_eq!((h.estimate(5, start, p), h.estimate(5, start, p)), (6, 6));
        assert_eq!(h.estimate(5, start + p + p / 2, p), 3, "half of the last period");
        assert_eq!(h.estimate(5, start + 2 * p, p), 0);
        assert_eq!(h.estimate(5 + SLOTS as u64, start, p), 0, "another client's slot");
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_clock_that_goes_back_restarts_the_count() {
        let mut h = Heat::default();
        h.observe(9, NOW, 1_000);
        h.observe(9, NOW, 1_000);
        assert_eq!(h.observe(9, NOW - 5_000, 1_000), 1);
    }
}
