//! Fingerprints tell one deny-cache or fallback entry from another that
//! landed in the same shared-data slot.
//!
//! They must be unforgeable: a client who could make its entry's
//! fingerprint equal a victim's would get the victim denied (or share its
//! fallback budget). So the identity enters only through a SHA-256 digest,
//! computed once per identity and request; the per-limit fingerprint then
//! mixes that digest with the limit's own fingerprint. Matching a victim's
//! fingerprint would take a 64-bit search through SHA-256.

use crate::digest::sha256;

/// The first 128 bits of SHA-256 of an identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdentityDigest([u64; 2]);

impl IdentityDigest {
    /// The digest of `identity`.
    pub fn of(identity: &str) -> IdentityDigest {
        let d = sha256(identity.as_bytes());
        IdentityDigest([word(&d, 0), word(&d, 8)])
    }
}

fn word(bytes: &[u8; 32], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(w)
}

/// A fingerprint of `parts` in order (lengths included, so ("ab", "c") and
/// ("a", "bc") differ). For configuration values: computed once at load.
pub fn fingerprint(parts: &[&[u8]]) -> u64 {
    let mut bytes = Vec::with_capacity(parts.iter().map(|p| p.len() + 8).sum());
    for p in parts {
        bytes.extend_from_slice(&(p.len() as u64).to_le_bytes());
        bytes.extend_from_slice(p);
    }
    word(&sha256(&bytes), 0)
}

/// The fingerprint of one limit (its own fingerprint) for one identity.
pub fn entry_fingerprint(limit_fingerprint: u64, identity: &IdentityDigest) -> u64 {
    mix(mix(limit_fingerprint ^ identity.0[0]) ^ identity.0[1])
}

/// A fingerprint of fingerprints in order (each already unforgeable, so
/// mixing them is as hard to match as they are), without another SHA-256:
/// for what is computed on every request, like a lease's.
pub fn combine(seed: u64, parts: &[u64]) -> u64 {
    parts.iter().fold(mix(seed), |acc, &p| mix(acc.rotate_left(23) ^ p))
}

/// SplitMix64's finalizer: a bijection that spreads every input bit.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
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

    #[test]
    #[wasm_bindgen_test]
    fn entries_differ_by_limit_and_by_identity() {
        let alice = IdentityDigest::of("alice");
        let bob = IdentityDigest::of("bob");
        assert_ne!(entry_fingerprint(7, &alice), entry_fingerprint(7, &bob));
        assert_ne!(entry_fingerprint(7, &alice), entry_fingerprint(8, &alice));
        assert_eq!(entry_fingerprint(7, &alice), entry_fingerprint(7, &IdentityDigest::of("alice")));
    }
}
