//! A 64-bit fingerprint of several byte strings, the same in every VM of one
//! proxy (fixed seeds): it tells one deny-cache or fallback entry from
//! another that landed in the same slot.

use core::hash::{BuildHasher, Hasher};

const SEEDS: [u64; 4] = [0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344, 0xa409_3822_299f_31d0, 0x082e_fa98_ec4e_6c89];

/// Fingerprint of `parts` in order; the parts' lengths are hashed too, so
/// ("ab", "c") and ("a", "bc") differ.
pub fn fingerprint(parts: &[&[u8]]) -> u64 {
    let mut h = ahash::RandomState::with_seeds(SEEDS[0], SEEDS[1], SEEDS[2], SEEDS[3]).build_hasher();
    for p in parts {
        h.write_usize(p.len());
        h.write(p);
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn part_boundaries_matter_and_results_are_stable() {
        assert_ne!(fingerprint(&[b"ab", b"c"]), fingerprint(&[b"a", b"bc"]));
        assert_eq!(fingerprint(&[b"x"]), fingerprint(&[b"x"]));
    }
}
