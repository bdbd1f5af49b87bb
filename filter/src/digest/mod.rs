//! Hash functions: SHA-1 names the script for EVALSHA (computed at
//! compile time, so as a `const fn` here); SHA-256 (RustCrypto's `sha2`)
//! turns identities into digests for the store and shortens long ones, and
//! digests every identity for the deny-cache and fallback fingerprints.

mod sha1;

use sha2::Digest;

pub use sha1::sha1;

/// SHA-256 of `msg`.
pub fn sha256(msg: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(msg).into()
}

/// Lower-case hex of a digest, as Redis prints script SHA-1s.
pub const fn hex<const N: usize, const H: usize>(bytes: &[u8; N]) -> [u8; H] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; H];
    let mut i = 0;
    while i < N && 2 * i + 1 < H {
        out[2 * i] = DIGITS[(bytes[i] >> 4) as usize];
        out[2 * i + 1] = DIGITS[(bytes[i] & 0x0f) as usize];
        i += 1;
    }
    out
}

/// Block number `block` of `msg` padded the way SHA-1 and SHA-256 both pad
/// it, as big-endian words.
pub(crate) const fn block_words(msg: &[u8], block: usize) -> [u32; 16] {
    let total_bits = (msg.len() as u64).wrapping_mul(8);
    let padded_len = padded_len(msg.len());
    let mut w = [0u32; 16];
    let mut j = 0;
    while j < 64 {
        let pos = block * 64 + j;
        let byte = if pos < msg.len() {
            msg[pos]
        } else if pos == msg.len() {
            0x80
        } else if pos >= padded_len - 8 {
            (total_bits >> (8 * (padded_len - 1 - pos))) as u8
        } else {
            0
        };
        w[j / 4] |= (byte as u32) << (24 - 8 * (j % 4));
        j += 1;
    }
    w
}

/// Length after padding: message, 0x80, zeros, 8-byte bit length; a multiple of 64.
pub(crate) const fn padded_len(len: usize) -> usize {
    (len + 8) / 64 * 64 + 64
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn hex_str(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    #[wasm_bindgen_test]
    fn sha1_matches_published_vectors() {
        assert_eq!(hex_str(&sha1(b"")), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(hex_str(&sha1(b"abc")), "a9993e364706816aba3e25717850c26c9cd0d89d");
        let long = b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        assert_eq!(hex_str(&sha1(long)), "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
    }

    #[test]
    #[wasm_bindgen_test]
    fn sha256_matches_published_vectors() {
        assert_eq!(hex_str(&sha256(b"abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(hex_str(&sha256(b"")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        // Two blocks of padding, and several blocks.
        assert_eq!(hex_str(&sha256(&[b'a'; 56])), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
        assert_eq!(hex_str(&sha256(&[b'a'; 1000])), "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
    }

    #[test]
    #[wasm_bindgen_test]
    fn padding_boundaries_hash_like_the_reference() {
        // 55, 56 and 64 bytes straddle the one-or-two padding blocks edge.
        assert_eq!(hex_str(&sha1(&[b'a'; 55])), "c1c8bbdc22796e28c0e15163d20899b65621d65a");
        assert_eq!(hex_str(&sha1(&[b'a'; 56])), "c2db330f6083854c99d4b5bfb6e8f29f201be699");
        assert_eq!(hex_str(&sha1(&[b'a'; 64])), "0098ba824b5c16427bd7a1122a5a442a25ec644d");
    }

    #[test]
    #[wasm_bindgen_test]
    fn hex_is_lower_case() {
        let h: [u8; 4] = hex(&[0xab, 0x01]);
        assert_eq!(&h, b"ab01");
    }
}
