//! Percent-encoding and -decoding of URL components.

/// Whether `b` is an RFC 3986 unreserved character.
pub fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Appends `s` to `out`, every byte but the unreserved ones as `%XX`.
pub fn encode_into(out: &mut String, s: &str) {
    encode_bytes_into(out, s.as_bytes());
}

/// Appends `bytes` to `out`, every byte but the unreserved ones as `%XX`.
pub fn encode_bytes_into(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if is_unreserved(b) {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 15) as usize] as char);
        }
    }
}

/// Decodes `%XX` sequences (and `+` as space when `plus_is_space`) into
/// bytes; a malformed `%` is kept as is. No UTF-8 is assumed: `%FF` and
/// `%FE` stay two different bytes.
pub fn decode(bytes: &[u8], plus_is_space: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' if plus_is_space => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    out
}

/// The value of one hex digit.
pub(crate) fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn encodes_all_but_unreserved() {
        let mut out = String::new();
        encode_into(&mut out, "a:{b}/c d~%");
        assert_eq!(out, "a%3A%7Bb%7D%2Fc%20d~%25");
    }

    #[test]
    #[wasm_bindgen_test]
    fn decodes_and_keeps_malformed_escapes() {
        assert_eq!(decode(b"a%20b+c", true), b"a b c");
        assert_eq!(decode(b"a+b", false), b"a+b");
        assert_eq!(decode(b"100%", false), b"100%");
        assert_eq!(decode(b"%zz%4", false), b"%zz%4");
        assert_eq!(decode(b"%61bc", false), b"abc");
        assert_eq!(decode(b"%FF", false), [0xff]);
        assert_ne!(decode(b"%FF", false), decode(b"%FE", false));
        assert_eq!(decode(b"x%41", false), b"xA", "an escape at the very end");
    }
}
