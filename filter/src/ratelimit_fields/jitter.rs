//! Retry-After with jitter. Every client denied by one window end would
//! otherwise come back at the same second (the draft's §8.5 "thundering
//! herd"); spreading them later, never earlier, keeps the answer true.

/// Retry-After in whole seconds: `ceil((retry_ms + extra) / 1000)`, at
/// least 1, where `extra` is uniform in `[0, retry_ms × fraction_ppm / 10^6]`
/// (whole ms, the bound rounded down) and `random` is a uniformly random
/// u64 from the caller. Never earlier than the exact instant: `extra` only
/// adds, so the result is at least `ceil(retry_ms / 1000)`.
///
/// `random` is mapped by multiply-and-shift, `random × (bound + 1) >> 64`,
/// which is uniform up to a bias of `(bound + 1) / 2^64`: nothing at the
/// scale of milliseconds. `fraction_ppm = 0` gives the exact value.
pub fn retry_after_with_jitter(retry_ms: u64, fraction_ppm: u32, random: u64) -> u64 {
    let bound = u128::from(retry_ms) * u128::from(fraction_ppm) / 1_000_000;
    // (bound + 1) <= 2^64 keeps the product below 2^128.
    let span = bound.min(u128::from(u64::MAX - 1)) + 1;
    let extra = (u128::from(random) * span) >> 64;
    let seconds = (u128::from(retry_ms) + extra).div_ceil(1000);
    u64::try_from(seconds).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    /// SplitMix64, seeded: the same sample on every run.
    fn randoms(seed: u64, n: usize) -> impl Iterator<Item = u64> {
        let mut state = seed;
        (0..n).map(move |_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        })
    }

    #[test]
    #[wasm_bindgen_test]
    fn without_jitter_it_is_the_exact_value_rounded_up_and_at_least_one() {
        for random in [0, 1 << 63, u64::MAX] {
            assert_eq!(retry_after_with_jitter(0, 0, random), 1);
            assert_eq!(retry_after_with_jitter(1, 0, random), 1);
            assert_eq!(retry_after_with_jitter(1000, 0, random), 1);
            assert_eq!(retry_after_with_jitter(1001, 0, random), 2);
            assert_eq!(retry_after_with_jitter(59_999, 0, random), 60);
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_extremes_of_random_reach_both_ends_of_the_range() {
        // 10 s with up to 50% more: extra is in [0, 5000] ms.
        assert_eq!(retry_after_with_jitter(10_000, 500_000, 0), 10, "extra 0");
        assert_eq!(retry_after_with_jitter(10_000, 500_000, u64::MAX), 15, "extra 5000");
        assert_eq!(retry_after_with_jitter(10_000, 500_000, 1 << 63), 13, "extra 2500");
        // 1.2 s with up to 100% more: [1200, 2400] ms.
        assert_eq!(retry_after_with_jitter(1200, 1_000_000, 0), 2);
        assert_eq!(retry_after_with_jitter(1200, 1_000_000, u64::MAX), 3);
    }

    #[test]
    #[wasm_bindgen_test]
    fn huge_inputs_saturate_instead_of_overflowing() {
        // The extra is capped below 2^64 ms (584 million years).
        let most = (2 * u128::from(u64::MAX) - 1).div_ceil(1000);
        assert_eq!(u128::from(retry_after_with_jitter(u64::MAX, u32::MAX, u64::MAX)), most);
        assert_eq!(retry_after_with_jitter(u64::MAX, 0, 0), u64::MAX.div_ceil(1000));
    }

    #[test]
    #[wasm_bindgen_test]
    fn ten_thousand_draws_spread_evenly_and_none_is_early() {
        let mut per_second = [0u32; 16];
        for random in randoms(42, 10_000) {
            let s = retry_after_with_jitter(10_000, 500_000, random);
            assert!((10..=15).contains(&s), "{s} is outside [10, 15]");
            per_second[s as usize] += 1;
        }
        // 10 needs extra = 0 exactly (1 in 5001); each of 11..=15 covers
        // 1000 of the 5001 values: 20% each, give or take 5 standard deviations.
        assert!(per_second[10] <= 5, "{per_second:?}");
        for s in 11..=15 {
            assert!((1800..=2200).contains(&per_second[s]), "second {s}: {per_second:?}");
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn it_is_never_earlier_than_the_exact_instant() {
        let mut rs = randoms(7, 10_000);
        for retry_ms in (0..5000).step_by(7).chain([86_400_000, 999, 1000, 1001]) {
            for fraction_ppm in [0, 1, 100_000, 1_000_000, 3_000_000] {
                let r = rs.next().unwrap_or(0);
                let s = retry_after_with_jitter(retry_ms, fraction_ppm, r);
                let exact = retry_ms.div_ceil(1000).max(1);
                let latest = (retry_ms + retry_ms * u64::from(fraction_ppm) / 1_000_000).div_ceil(1000).max(1);
                assert!(exact <= s && s <= latest, "{retry_ms} ms, {fraction_ppm} ppm: {s} not in [{exact}, {latest}]");
            }
        }
    }
}
