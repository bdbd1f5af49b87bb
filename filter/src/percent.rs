//! Percent-encoding and -decoding of URL components.

/// Whether `b` is an RFC 3986 unreserved character.
pub fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Appends `s` to `out`, every byte but the unreserved ones as `%XX`.
pub fn encode_into(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in s.as_bytes() {
        if is_unreserved(b) {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 15) as usize] as char);
        }
    }
}

/// Decodes `%XX` sequences (and `+` as space when `plus_is_space`); a
/// malformed `%` is kept as is. Invalid UTF-8 becomes U+FFFD.
pub fn decode(s: &str, plus_is_space: bool) -> String {
    let bytes = s.as_bytes();
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
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
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
        assert_eq!(decode("a%20b+c", true), "a b c");
        assert_eq!(decode("a+b", false), "a+b");
        assert_eq!(decode("100%", false), "100%");
        assert_eq!(decode("%zz%4", false), "%zz%4");
        assert_eq!(decode("%61bc", false), "abc");
    }
}
