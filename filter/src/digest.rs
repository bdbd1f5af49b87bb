//! Digests: SHA-256 (RustCrypto's `sha2`) turns identities into digests
//! for the store and shortens long ones, and digests every identity for
//! the deny-cache and fallback fingerprints. (The script's SHA-1 is
//! computed by `build.rs`.)

use sha2::Digest;

/// SHA-256 of `msg`.
pub fn sha256(msg: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(msg).into()
}

/// Lower-case hex of the first `H / 2` bytes of a digest.
pub fn hex<const N: usize, const H: usize>(bytes: &[u8; N]) -> [u8; H] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; H];
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0x0f)];
    }
    out
}

/// The `N` bytes exactly `2 × N` lower-case hex digits spell (what `hex`
/// writes); `None` for anything else.
pub fn from_hex<const N: usize>(digits: &[u8]) -> Option<[u8; N]> {
    if digits.len() != 2 * N {
        return None;
    }
    let value = |d: u8| match d {
        b'0'..=b'9' => Some(d - b'0'),
        b'a'..=b'f' => Some(d - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = (value(pair[0])? << 4) | value(pair[1])?;
    }
    Some(out)
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
    fn sha256_matches_published_vectors() {
        assert_eq!(hex_str(&sha256(b"abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(hex_str(&sha256(b"")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        // Two blocks of padding, and several blocks.
        assert_eq!(hex_str(&sha256(&[b'a'; 56])), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
        assert_eq!(hex_str(&sha256(&[b'a'; 1000])), "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
    }

    #[test]
    #[wasm_bindgen_test]
    fn hex_is_lower_case_and_stops_at_its_length() {
        let h: [u8; 4] = hex(&[0xab, 0x01]);
        assert_eq!(&h, b"ab01");
        let half: [u8; 4] = hex(&[0xff, 0x0e, 0x77]);
        assert_eq!(&half, b"ff0e");
    }

    #[test]
    #[wasm_bindgen_test]
    fn from_hex_reads_back_what_hex_writes_and_nothing_else() {
        assert_eq!(
            from_hex::<16>(b"000102030405060708090a0b0c0d0eff"),
            Some([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 255])
        );
        let digest = sha256(b"abc");
        let digits: [u8; 64] = hex(&digest);
        assert_eq!(from_hex::<32>(&digits), Some(digest));
        assert_eq!(from_hex::<16>(b"+00102030405060708090a0b0c0d0eff"), None);
        assert_eq!(from_hex::<16>(b"000102030405060708090A0B0C0D0EFF"), None, "upper case");
        assert_eq!(from_hex::<16>(b"0001"), None, "too short");
        assert_eq!(from_hex::<2>(b"00010"), None, "too long");
    }
}
