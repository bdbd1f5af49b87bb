//! Client addresses as text: `1.2.3.4`, `2001:db8::1`, either with a port
//! (`1.2.3.4:80`, `[2001:db8::1]:80`), in the strict grammar of Rust's
//! `std::net` parsers, written back canonically (RFC 5952; an IPv4-mapped
//! IPv6 address as its IPv4 form). Our own because `std::net`'s parsers and
//! formatter weigh about 5 KB of the module.

/// The canonical text of the address in `text` (with or without a port);
/// `None` when it is not one.
pub fn canonical(text: &[u8]) -> Option<String> {
    let groups = if let Some(rest) = text.strip_prefix(b"[") {
        let close = rest.iter().position(|&b| b == b']')?;
        let (inner, after) = rest.split_at(close);
        port(after.get(1..)?.strip_prefix(b":")?)?;
        ipv6(inner)?
    } else if let Some(v4) = with_optional_port(text) {
        return Some(v4_text(v4));
    } else {
        ipv6(text)?
    };
    Some(match groups {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => v4_text([(hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8]),
        _ => v6_text(&groups),
    })
}

/// `a.b.c.d` or `a.b.c.d:port`.
fn with_optional_port(text: &[u8]) -> Option<[u8; 4]> {
    match text.iter().position(|&b| b == b':') {
        Some(colon) => {
            port(text.get(colon + 1..)?)?;
            ipv4(text.get(..colon)?)
        }
        None => ipv4(text),
    }
}

/// A port: 1 to 5 digits, at most 65535.
fn port(text: &[u8]) -> Option<u16> {
    if text.is_empty() || text.len() > 5 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = text.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    u16::try_from(value).ok()
}

/// Four decimal octets; no leading zeros (`01` could be read as octal).
fn ipv4(text: &[u8]) -> Option<[u8; 4]> {
    let mut out = [0u8; 4];
    let mut parts = text.split(|&b| b == b'.');
    for slot in &mut out {
        let part = parts.next()?;
        let leading_zero = part.len() > 1 && part.first() == Some(&b'0');
        if part.is_empty() || part.len() > 3 || leading_zero || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        *slot = u8::try_from(part.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'))).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// Eight groups of 1 to 4 hex digits, `::` once for one or more zero
/// groups, the last two groups possibly written as an IPv4 address.
fn ipv6(text: &[u8]) -> Option<[u16; 8]> {
    let (head, tail) = match text.windows(2).position(|w| w == b"::") {
        Some(at) => (text.get(..at)?, Some(text.get(at + 2..)?)),
        None => (text, None),
    };
    let mut groups = [0u16; 8];
    let head_len = groups_into(head, &mut groups, tail.is_none())?;
    match tail {
        None => (head_len == 8).then_some(groups),
        Some(tail) => {
            let mut back = [0u16; 8];
            let tail_len = groups_into(tail, &mut back, true)?;
            if head_len + tail_len > 7 {
                return None;
            }
            groups[8 - tail_len..].copy_from_slice(back.get(..tail_len)?);
            Some(groups)
        }
    }
}

/// Reads `:`-separated groups of `text` into `out`; their count. An IPv4
/// ending counts as two groups, and is allowed only where the address ends.
fn groups_into(text: &[u8], out: &mut [u16; 8], at_end: bool) -> Option<usize> {
    if text.is_empty() {
        return Some(0);
    }
    let parts: Vec<&[u8]> = text.split(|&b| b == b':').collect();
    let mut n = 0;
    for (i, part) in parts.iter().enumerate() {
        if at_end && i + 1 == parts.len() && part.contains(&b'.') {
            let [a, b, c, d] = ipv4(part)?;
            *out.get_mut(n)? = u16::from_be_bytes([a, b]);
            *out.get_mut(n + 1)? = u16::from_be_bytes([c, d]);
            return Some(n + 2);
        }
        if part.is_empty() || part.len() > 4 {
            return None;
        }
        let mut value = 0u16;
        for &b in *part {
            value = value << 4 | u16::from(crate::percent::hex(b)?);
        }
        *out.get_mut(n)? = value;
        n += 1;
    }
    Some(n)
}

fn v4_text(octets: [u8; 4]) -> String {
    let mut out = String::with_capacity(15);
    for (i, o) in octets.iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        push_decimal(&mut out, *o);
    }
    out
}

fn push_decimal(out: &mut String, o: u8) {
    if o >= 100 {
        out.push(char::from(b'0' + o / 100));
    }
    if o >= 10 {
        out.push(char::from(b'0' + o / 10 % 10));
    }
    out.push(char::from(b'0' + o % 10));
}

/// RFC 5952: lowercase, no leading zeros, the first longest run of two or
/// more zero groups as `::`.
fn v6_text(groups: &[u16; 8]) -> String {
    let (mut best, mut run) = ((0, 0), (0, 0));
    for (i, &g) in groups.iter().enumerate() {
        run = if g == 0 { (if run.1 == 0 { i } else { run.0 }, run.1 + 1) } else { (0, 0) };
        if run.1 > best.1 {
            best = run;
        }
    }
    let mut out = String::with_capacity(39);
    let mut i = 0;
    while i < 8 {
        if best.1 > 1 && i == best.0 {
            out.push_str("::");
            i += best.1;
            continue;
        }
        if i > 0 && !out.ends_with(':') {
            out.push(':');
        }
        push_hex(&mut out, groups[i]);
        i += 1;
    }
    out
}

fn push_hex(out: &mut String, g: u16) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut started = false;
    for shift in [12u16, 8, 4, 0] {
        let d = (g >> shift) & 15;
        if d != 0 || started || shift == 0 {
            started = true;
            out.push(char::from(HEX[usize::from(d)]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, SocketAddr};
    use wasm_bindgen_test::wasm_bindgen_test;

    /// What `std::net` makes of `text`: the reference this module follows.
    fn std_canonical(text: &str) -> Option<String> {
        let ip = text.parse::<SocketAddr>().map(|a| a.ip()).or_else(|_| text.parse::<IpAddr>()).ok()?;
        Some(match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4).to_string(),
            v4 => v4.to_string(),
        })
    }

    const CASES: &[&str] = &[
        "1.2.3.4",
        "0.0.0.0",
        "255.255.255.255",
        "10.0.0.1:8080",
        "1.2.3.4:0",
        "1.2.3.4:65535",
        "1.2.3.4:65536",
        "1.2.3.4:",
        "1.2.3.4:+1",
        "01.2.3.4",
        "1.2.3",
        "1.2.3.4.5",
        "256.1.1.1",
        "1..2.3",
        "::",
        "::1",
        "1::",
        "2001:db8::1",
        "2001:DB8:0:0:1:0:0:1",
        "2001:db8:0:1:1:1:1:1",
        "1:0:0:2:0:0:0:3",
        "0:0:1:0:0:1:0:0",
        "1:2:3:4:5:6:7:8",
        "1:2:3:4:5:6:7::",
        "::2:3:4:5:6:7:8",
        "1:2:3:4:5:6:7:8:9",
        "1:2:3:4:5:6:7",
        "1::2::3",
        ":::",
        "1:::2",
        "12345::",
        "g::",
        "::ffff:1.2.3.4",
        "::FFFF:102:304",
        "::1.2.3.4",
        "1:2:3:4:5:6:1.2.3.4",
        "1:2:3:4:5:6:7:1.2.3.4",
        "::1.2.3.4:5",
        "1.2.3.4::",
        "[::1]:80",
        "[::ffff:1.2.3.4]:555",
        "[2001:db8::1]:443",
        "[::1]",
        "[::1]:",
        "[::1]80",
        "[1.2.3.4]:80",
        "::1:80",
        "",
        ":",
        "[",
        "[]:80",
        "fe80::1%eth0",
        "0000:0000:0000:0000:0000:0000:0000:0001",
        "00000::1",
        "1.2.3.4 ",
        " 1.2.3.4",
        "1.2.3.04",
    ];

    #[test]
    #[wasm_bindgen_test]
    fn every_spelling_reads_as_std_net_reads_it() {
        for case in CASES {
            assert_eq!(canonical(case.as_bytes()), std_canonical(case), "{case:?}");
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn groups_and_runs_of_zeros_are_written_canonically() {
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..2000 {
            let mut groups = [0u16; 8];
            for g in &mut groups {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Mostly zeros, so that runs of every length and position occur.
                *g = if x % 3 == 0 { (x >> 20) as u16 } else { 0 };
            }
            let text = groups.map(|g| format!("{g:x}")).join(":");
            assert_eq!(canonical(text.as_bytes()), std_canonical(&text), "{text}");
        }
    }
}
