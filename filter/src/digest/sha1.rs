//! SHA-1 (FIPS 180-4) as a `const fn`: the script's EVALSHA name is a constant.

use super::{block_words, padded_len};

/// SHA-1 digest of `msg`.
pub const fn sha1(msg: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0];
    let blocks = padded_len(msg.len()) / 64;
    let mut b = 0;
    while b < blocks {
        let words = block_words(msg, b);
        let mut w = [0u32; 80];
        let mut t = 0;
        while t < 80 {
            w[t] = if t < 16 { words[t] } else { (w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16]).rotate_left(1) };
            t += 1;
        }
        let (mut a, mut bb, mut c, mut d, mut e) = (h[0], h[1], h[2], h[3], h[4]);
        t = 0;
        while t < 80 {
            let (f, k) = match t / 20 {
                0 => ((bb & c) | (!bb & d), 0x5A82_7999),
                1 => (bb ^ c ^ d, 0x6ED9_EBA1),
                2 => ((bb & c) | (bb & d) | (c & d), 0x8F1B_BCDC),
                _ => (bb ^ c ^ d, 0xCA62_C1D6),
            };
            let tmp = a.rotate_left(5).wrapping_add(f).wrapping_add(e).wrapping_add(k).wrapping_add(w[t]);
            e = d;
            d = c;
            c = bb.rotate_left(30);
            bb = a;
            a = tmp;
            t += 1;
        }
        h[0] = h[0].wrapping_add(a);
        h[1] = h[1].wrapping_add(bb);
        h[2] = h[2].wrapping_add(c);
        h[3] = h[3].wrapping_add(d);
        h[4] = h[4].wrapping_add(e);
        b += 1;
    }
    let mut out = [0u8; 20];
    let mut i = 0;
    while i < 5 {
        let bytes = h[i].to_be_bytes();
        out[4 * i] = bytes[0];
        out[4 * i + 1] = bytes[1];
        out[4 * i + 2] = bytes[2];
        out[4 * i + 3] = bytes[3];
        i += 1;
    }
    out
}
