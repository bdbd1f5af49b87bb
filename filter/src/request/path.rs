//! The path as rules compare it: one spelling per resource, as far as the
//! upstream may take two spellings for one.

use crate::percent::is_unreserved;

/// Strips query and fragment, decodes escapes of unreserved characters
/// (RFC 3986 normalization; other escapes stay, with upper-case hex), and
/// drops each segment's parameters: from a `;` (or its escape `%3B`) to
/// the end of the segment. Java servlet containers (Tomcat, Jetty, Spring)
/// remove them before routing, so `/api;p=1/x`, `/api;/x` and `/api%3B/x`
/// are `/api/x` to them: unstripped, each would dodge an `/api/` rule and
/// reach the upstream uncounted. An upstream that keeps parameters sees a
/// resource of its own counted with `/api/x`: counted, never free.
pub fn normalize_path(raw: &[u8]) -> Vec<u8> {
    let end = raw.iter().position(|&b| b == b'?' || b == b'#').unwrap_or(raw.len());
    let bytes = &raw[..end];
    let mut out = Vec::with_capacity(bytes.len());
    // Inside a segment's parameters: bytes dropped until the next `/`.
    let mut in_parameters = false;
    let mut i = 0;
    while i < bytes.len() {
        let (decoded, width) = match bytes[i] {
            b'%' => match (bytes.get(i + 1).and_then(|b| hex(*b)), bytes.get(i + 2).and_then(|b| hex(*b))) {
                (Some(h), Some(l)) => (Some(h << 4 | l), 3),
                _ => (None, 1),
            },
            _ => (None, 1),
        };
        let plain = bytes[i];
        if plain == b'/' {
            in_parameters = false;
        } else if plain == b';' || decoded == Some(b';') {
            in_parameters = true;
        }
        if !in_parameters {
            match decoded {
                Some(b) if is_unreserved(b) => out.push(b),
                Some(_) => {
                    out.extend_from_slice(&[b'%', bytes[i + 1].to_ascii_uppercase(), bytes[i + 2].to_ascii_uppercase()])
                }
                None => out.push(plain),
            }
        }
        i += width;
    }
    out
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::normalize_path as norm;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn path_normalization_defeats_encoding_tricks() {
        assert_eq!(norm(b"/%6Cogin?x=1"), b"/login");
        assert_eq!(norm(b"/a%2fb#frag"), b"/a%2Fb");
        assert_eq!(norm("/caf%C3%A9/ü".as_bytes()), "/caf%C3%A9/ü".as_bytes());
        assert_eq!(norm(b"/100%"), b"/100%");
        assert_eq!(norm(b"/%zz"), b"/%zz");
        assert_eq!(norm(b"/\xff%41"), b"/\xffA", "non-UTF-8 bytes pass as bytes");
    }

    #[test]
    #[wasm_bindgen_test]
    fn segment_parameters_are_dropped_whatever_their_spelling() {
        for spelling in [
            &b"/api;p=1/x"[..],
            b"/api;/x",
            b"/api%3B/x",
            b"/api%3b/x",
            b"/api;a=1;b=2/x;jsessionid=42",
            b"/a%70i;%2F/x",
        ] {
            assert_eq!(norm(spelling), b"/api/x", "{}", String::from_utf8_lossy(spelling));
        }
        assert_eq!(norm(b"/api;p=/q/x"), b"/api/q/x", "a parameter ends at the next slash");
        assert_eq!(norm(b"/;x"), b"/");
        assert_eq!(norm(b"/api/x;v=2?q=;"), b"/api/x");
        assert_eq!(norm(b"/a;b"), b"/a");
        assert_eq!(norm(b"/a%3"), b"/a%3", "an escape cut short is a byte");
    }
}
