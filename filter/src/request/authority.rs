//! The :authority as one canonical host: `A.example:80`, `a.example.` and
//! `a.example:0080` are all `a.example`, so spelling the host differently
//! never buys a new budget.

/// The canonical form of `authority` given the request's `:scheme`: ASCII
/// lower case, no trailing dot on the host, the port without leading zeros
/// and dropped when it is the scheme's default (80 for http, 443 for
/// https; both when the scheme is unknown). A port that is not a number is
/// kept as sent (escaped later like any byte).
pub fn canonical_authority(authority: &[u8], scheme: Option<&[u8]>) -> Vec<u8> {
    let lower = authority.to_ascii_lowercase();
    // An IPv6 literal is bracketed: its colons are not the port's.
    let host_end = match lower.first() {
        Some(b'[') => lower.iter().position(|&b| b == b']').map_or(lower.len(), |i| i + 1),
        _ => lower.iter().position(|&b| b == b':').unwrap_or(lower.len()),
    };
    let (host, rest) = lower.split_at(host_end);
    let host = host.strip_suffix(b".").unwrap_or(host);
    let mut out = host.to_vec();
    let Some(port) = rest.strip_prefix(b":") else {
        out.extend_from_slice(rest);
        return out;
    };
    if port.is_empty() {
        return out;
    }
    if !port.iter().all(u8::is_ascii_digit) {
        out.push(b':');
        out.extend_from_slice(port);
        return out;
    }
    let digits = match port.iter().position(|&b| b != b'0') {
        Some(i) => &port[i..],
        None => b"0",
    };
    let default = match scheme {
        Some(s) if s.eq_ignore_ascii_case(b"http") => digits == b"80",
        Some(s) if s.eq_ignore_ascii_case(b"https") => digits == b"443",
        _ => digits == b"80" || digits == b"443",
    };
    if !default {
        out.push(b':');
        out.extend_from_slice(digits);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn canon(a: &str, scheme: Option<&str>) -> String {
        String::from_utf8(canonical_authority(a.as_bytes(), scheme.map(str::as_bytes))).unwrap()
    }

    #[test]
    #[wasm_bindgen_test]
    fn spellings_of_one_host_are_one_authority() {
        for a in ["a", "A", "a.", "a:80", "a.:80", "a:0080", "a:", "A.:00080"] {
            assert_eq!(canon(a, Some("http")), "a", "{a}");
        }
        assert_eq!(canon("a:443", Some("https")), "a");
        assert_eq!(canon("a:443", Some("http")), "a:443", "not the default port of http");
        assert_eq!(canon("a:8080", None), "a:8080");
        assert_eq!(canon("a:08080", None), "a:8080");
        assert_eq!(canon("a:0", None), "a:0");
    }

    #[test]
    #[wasm_bindgen_test]
    fn ipv6_literals_and_odd_ports_are_kept_apart() {
        assert_eq!(canon("[::1]:80", Some("http")), "[::1]");
        assert_eq!(canon("[::1]:81", Some("http")), "[::1]:81");
        assert_eq!(canon("[::1]", None), "[::1]");
        assert_eq!(canon("a:x1", None), "a:x1");
    }
}
