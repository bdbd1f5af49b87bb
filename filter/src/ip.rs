//! Client addresses as text, read with `std::net`'s grammar: `1.2.3.4`,
//! `2001:db8::1`, either with a port (`1.2.3.4:80`, `[2001:db8::1]:80`),
//! an IPv6 address with a port also with a numeric scope id
//! (`[fe80::1%2]:80`, as Envoy prints a link-local peer). Written back
//! canonically: RFC 5952 (std's `Display`), an IPv4-mapped IPv6 address as
//! its IPv4 form, a scope id kept as `%<n>` (the same address on another
//! interface may be another host).

use std::net::{IpAddr, SocketAddr};

/// The canonical text of the address in `text` (with or without a port);
/// `None` when it is not one.
pub fn canonical(text: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(text).ok()?;
    let (ip, scope) = match text.parse::<SocketAddr>() {
        Ok(SocketAddr::V4(a)) => (IpAddr::V4(*a.ip()), 0),
        Ok(SocketAddr::V6(a)) => (IpAddr::V6(*a.ip()), a.scope_id()),
        Err(_) => (text.parse::<IpAddr>().ok()?, 0),
    };
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    Some(if scope == 0 { ip.to_string() } else { format!("{ip}%{scope}") })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    /// Spellings and what they read as: the grammar of `std::net`.
    const CASES: &[(&str, Option<&str>)] = &[
        ("1.2.3.4", Some("1.2.3.4")),
        ("0.0.0.0", Some("0.0.0.0")),
        ("255.255.255.255", Some("255.255.255.255")),
        ("10.0.0.1:8080", Some("10.0.0.1")),
        ("1.2.3.4:0", Some("1.2.3.4")),
        ("1.2.3.4:65535", Some("1.2.3.4")),
        ("1.2.3.4:65536", None),
        ("1.2.3.4:", None),
        ("1.2.3.4:+1", None),
        ("01.2.3.4", None),
        ("1.2.3", None),
        ("1.2.3.4.5", None),
        ("256.1.1.1", None),
        ("1..2.3", None),
        ("::", Some("::")),
        ("::1", Some("::1")),
        ("1::", Some("1::")),
        ("2001:db8::1", Some("2001:db8::1")),
        ("2001:DB8:0:0:1:0:0:1", Some("2001:db8::1:0:0:1")),
        ("2001:db8:0:1:1:1:1:1", Some("2001:db8:0:1:1:1:1:1")),
        ("1:0:0:2:0:0:0:3", Some("1:0:0:2::3")),
        ("0:0:1:0:0:1:0:0", Some("::1:0:0:1:0:0")),
        ("1:2:3:4:5:6:7:8", Some("1:2:3:4:5:6:7:8")),
        ("1:2:3:4:5:6:7::", Some("1:2:3:4:5:6:7:0")),
        ("::2:3:4:5:6:7:8", Some("0:2:3:4:5:6:7:8")),
        ("1:2:3:4:5:6:7:8:9", None),
        ("1:2:3:4:5:6:7", None),
        ("1::2::3", None),
        (":::", None),
        ("1:::2", None),
        ("12345::", None),
        ("g::", None),
        ("::ffff:1.2.3.4", Some("1.2.3.4")),
        ("::FFFF:102:304", Some("1.2.3.4")),
        ("::1.2.3.4", Some("::102:304")),
        ("1:2:3:4:5:6:1.2.3.4", Some("1:2:3:4:5:6:102:304")),
        ("1:2:3:4:5:6:7:1.2.3.4", None),
        ("::1.2.3.4:5", None),
        ("1.2.3.4::", None),
        ("[::1]:80", Some("::1")),
        ("[::ffff:1.2.3.4]:555", Some("1.2.3.4")),
        ("[2001:db8::1]:443", Some("2001:db8::1")),
        ("[::1]", None),
        ("[::1]:", None),
        ("[::1]80", None),
        ("[1.2.3.4]:80", None),
        ("::1:80", Some("::1:80")),
        ("", None),
        (":", None),
        ("[", None),
        ("[]:80", None),
        ("fe80::1%eth0", None),
        ("0000:0000:0000:0000:0000:0000:0000:0001", Some("::1")),
        ("00000::1", None),
        ("1.2.3.4 ", None),
        (" 1.2.3.4", None),
        ("1.2.3.04", None),
        ("[fe80::1%2]:443", Some("fe80::1%2")),
        ("[fe80::1%0]:443", Some("fe80::1")),
        ("[FE80::0:1%4294967295]:1", Some("fe80::1%4294967295")),
        ("[fe80::1%4294967296]:1", None),
        ("[fe80::1%eth0]:1", None),
        ("fe80::1%2", None),
        ("1.2.3.4%2:80", None),
    ];

    #[test]
    #[wasm_bindgen_test]
    fn every_spelling_reads_as_std_net_reads_it() {
        for (case, want) in CASES {
            assert_eq!(canonical(case.as_bytes()).as_deref(), *want, "{case:?}");
        }
        assert_eq!(canonical(b"\xff1.2.3.4"), None);
    }

    #[test]
    #[wasm_bindgen_test]
    fn groups_and_runs_of_zeros_are_written_as_rfc_5952_says() {
        let cases = [
            ("2001:DB8:0:0:1:0:0:1", "2001:db8::1:0:0:1"),
            ("1:0:0:2:0:0:0:3", "1:0:0:2::3"),
            ("0:0:1:0:0:1:0:0", "::1:0:0:1:0:0"),
            ("2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"),
            ("0000:0000:0000:0000:0000:0000:0000:0001", "::1"),
        ];
        for (text, want) in cases {
            assert_eq!(canonical(text.as_bytes()).as_deref(), Some(want), "{text}");
        }
    }
}
