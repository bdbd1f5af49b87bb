//! Fingerprints tell one deny-cache or fallback entry from another that
//! landed in the same shared-data entry.
//!
//! They must be unforgeable: a client who could make its entry's
//! fingerprint equal a victim's would get the victim denied (or share its
//! fallback budget). So the identity enters only through a SHA-256 digest,
//! computed once per identity and request (a digested identity is one
//! already: client bytes never become one, every `~` of theirs is
//! escaped); the per-limit fingerprint then
//! mixes that digest with the limit's own fingerprint. Matching a victim's
//! fingerprint would take a 64-bit search through SHA-256.

use crate::digest::{from_hex, sha256};

/// The first 128 bits of SHA-256 of an identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdentityDigest([u64; 2]);

impl IdentityDigest {
    /// The digest of `identity`. A digested identity (`~H` and 32 hex
    /// digits: the first 128 bits of SHA-256 of the clear one, see
    /// `identity::digest`) is one already: its digits are read, not hashed
    /// again (in wasm a SHA-256 was a sixth of a leased request's work).
    /// `~H` never starts a clear identity, so neither kind can pass for
    /// the other.
    pub fn of(identity: &str) -> IdentityDigest {
        if let Some(digits) = identity.strip_prefix("~H") {
            if let Some(d) = from_hex::<16>(digits.as_bytes()) {
                return IdentityDigest([word(&d, 0), word(&d, 8)]);
            }
        }
        let d = sha256(identity.as_bytes());
        IdentityDigest([word(&d, 0), word(&d, 8)])
    }
}

fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    if let Some(b) = bytes.get(at..at + 8) {
        w.copy_from_slice(b);
    }
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
    combine_more(mix(seed), parts)
}

/// `combine` of the parts it had and `parts` after them, from its result
/// (`combine(s, &[a, b]) == combine_more(combine(s, &[a]), &[b])`).
pub fn combine_more(combined: u64, parts: &[u64]) -> u64 {
    parts.iter().fold(combined, |acc, &p| mix(acc.rotate_left(23) ^ p))
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
        // Known answers, computed apart from this code (Python's hashlib:
        // the first 8 bytes, little-endian, of SHA-256 of each part's
        // length as 8 little-endian bytes, then the part). Entries outlive
        // the VM that wrote them and are read by every worker: a value
        // that changed from one VM or build to the next (a seed, another
        // hash) would miss every entry written before.
        assert_eq!(fingerprint(&[b"x"]), 0x5b4c_eabb_e714_1bf9);
        assert_eq!(fingerprint(&[b"ab", b"c"]), 0xca01_de79_5565_ee43);
        assert_eq!(fingerprint(&[]), 0x141c_fc98_42c4_b0e3);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_combination_goes_on_from_its_result() {
        assert_eq!(combine(9, &[1, 2, 3]), combine_more(combine(9, &[1]), &[2, 3]));
        assert_eq!(combine(9, &[1, 2, 3]), combine_more(combine_more(combine(9, &[]), &[1, 2]), &[3]));
        assert_ne!(combine(9, &[1, 2]), combine(9, &[2, 1]));
    }

    #[test]
    #[wasm_bindgen_test]
    fn entries_differ_by_limit_and_by_identity() {
        let alice = IdentityDigest::of("alice");
        let bob = IdentityDigest::of("bob");
        assert_ne!(entry_fingerprint(7, &alice), entry_fingerprint(7, &bob));
        assert_ne!(entry_fingerprint(7, &alice), entry_fingerprint(8, &alice));
        // Known answer (SplitMix64's finalizer over 7 and the two words of
        // SHA-256 of "alice", computed apart from this code): the same on
        // every worker and after a reload.
        assert_eq!(entry_fingerprint(7, &alice), 0x22b6_823f_4820_9865);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_digested_identity_is_its_own_digest_and_anything_else_is_hashed() {
        // The clear identity's digest and its digested form's are one value:
        // the first 128 bits of SHA-256 of the clear one (the identity
        // module's tests check its digests against this).
        let mut half = [0u8; 16];
        half.copy_from_slice(&sha256(b"key-1")[..16]);
        let digits: [u8; 32] = crate::digest::hex(&half);
        let digested = format!("~H{}", String::from_utf8_lossy(&digits));
        assert_eq!(IdentityDigest::of(&digested), IdentityDigest::of("key-1"));
        assert_ne!(IdentityDigest::of(&digested), IdentityDigest::of("key-2"));
        // Not 32 lower-case hex digits after `~H`: hashed as any identity.
        let hashed = |s: &str| {
            let d = sha256(s.as_bytes());
            IdentityDigest([word(&d, 0), word(&d, 8)])
        };
        let upper = digested.to_uppercase().replacen("~h", "~H", 1);
        for other in [&digested[..33], &format!("{digested}0"), &upper, "~H", "~Hxyz", "alice"] {
            assert_eq!(IdentityDigest::of(other), hashed(other), "{other}");
        }
    }
}
