//! The three RFC 9651 (Structured Field Values) bare items the RateLimit
//! fields use, serialized as RFC 9651 §4.1 says: Integer, String and Byte
//! Sequence. Lists and parameters are plain `, ` and `;key=` joins.

use std::fmt::Write;

/// The largest sf-integer: at most 15 decimal digits (RFC 9651 §3.3.1).
pub const INTEGER_MAX: u64 = 999_999_999_999_999;

/// Appends `n` as an sf-integer, clamped to [`INTEGER_MAX`] (a larger one
/// would make the whole field unparseable, and clients must then ignore it).
pub fn integer(out: &mut String, n: u64) {
    // Writing to a String cannot fail.
    let _ = write!(out, "{}", n.min(INTEGER_MAX));
}

/// Appends `s` as an sf-string: `"` and `\` escaped. An sf-string holds only
/// printable ASCII (0x20-0x7E): any other byte becomes `_`, so the field
/// always parses. Policy names are `[a-z0-9_/-]`, which never needs either.
pub fn string(out: &mut String, s: &str) {
    out.push('"');
    for &b in s.as_bytes() {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(b as char);
            }
            0x20..=0x7e => out.push(b as char),
            _ => out.push('_'),
        }
    }
    out.push('"');
}

/// Appends `bytes` as an sf-binary: `:`, base64 (RFC 4648 §4, padded), `:`.
pub fn byte_sequence(out: &mut String, bytes: &[u8]) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    out.push(':');
    for group in bytes.chunks(3) {
        let b = [group[0], group.get(1).copied().unwrap_or(0), group.get(2).copied().unwrap_or(0)];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for k in 0..4 {
            // A group of g bytes gives g + 1 digits; the rest is padding.
            if k <= group.len() {
                out.push(ALPHABET[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out.push(':');
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn with(f: impl FnOnce(&mut String)) -> String {
        let mut out = String::new();
        f(&mut out);
        out
    }

    #[test]
    #[wasm_bindgen_test]
    fn integers_are_clamped_to_fifteen_digits() {
        assert_eq!(with(|o| integer(o, 0)), "0");
        assert_eq!(with(|o| integer(o, 999_999_999_999_999)), "999999999999999");
        assert_eq!(with(|o| integer(o, 1_000_000_000_000_000)), "999999999999999");
        assert_eq!(with(|o| integer(o, u64::MAX)), "999999999999999");
    }

    #[test]
    #[wasm_bindgen_test]
    fn strings_escape_quotes_and_backslashes_and_replace_what_they_cannot_hold() {
        assert_eq!(with(|o| string(o, "api/1m")), r#""api/1m""#);
        assert_eq!(with(|o| string(o, r#"a"b\c"#)), r#""a\"b\\c""#);
        assert_eq!(with(|o| string(o, "tab\there é")), r#""tab_here __""#);
        assert_eq!(with(|o| string(o, "")), r#""""#);
    }

    #[test]
    #[wasm_bindgen_test]
    fn byte_sequences_are_padded_base64_between_colons() {
        // RFC 4648 §10 test vectors.
        let cases: [(&[u8], &str); 7] = [
            (b"", "::"),
            (b"f", ":Zg==:"),
            (b"fo", ":Zm8=:"),
            (b"foo", ":Zm9v:"),
            (b"foob", ":Zm9vYg==:"),
            (b"fooba", ":Zm9vYmE=:"),
            (b"foobar", ":Zm9vYmFy:"),
        ];
        for (bytes, expected) in cases {
            assert_eq!(with(|o| byte_sequence(o, bytes)), expected);
        }
        assert_eq!(with(|o| byte_sequence(o, &[0xfb, 0xff, 0xfe])), ":+//+:");
        assert_eq!(with(|o| byte_sequence(o, b"App-999")), ":QXBwLTk5OQ==:", "the draft's own example");
    }
}
