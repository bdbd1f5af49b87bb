//! The client's identity: the rule's key parts read from the request,
//! escaped and bounded, to become the hash tag of its Redis keys.
//!
//! Escaping keeps [A-Za-z0-9._-] and writes every other byte as `~XX`, so
//! no `{`, `}`, `:` or control character reaches a key and the result needs
//! no percent-encoding on the way to webdis. Parts are joined with `~~`,
//! which escaping never produces, so distinct inputs stay distinct. Past
//! 64 bytes the identity is replaced by `~H` and 32 hex digits of its
//! SHA-256: bounded, and no client can collide with another.

use std::net::{IpAddr, SocketAddr};

use crate::config::KeyPart;
use crate::digest::{hex, sha256};
use crate::request::{Request, RequestSource};

/// Longest identity kept readable; longer ones are hashed.
pub const MAX_IDENTITY: usize = 64;

/// The identity of `req` under `parts`, or `None` when a header or query
/// part is absent (the rule does not apply to this request).
pub fn identity<S: RequestSource + ?Sized>(parts: &[KeyPart], req: &Request<'_, S>, xff_hops: u32) -> Option<String> {
    let mut out = String::with_capacity(32);
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push_str("~~");
        }
        match part {
            KeyPart::ClientIp => escape_into(&mut out, &client_ip(req, xff_hops)?),
            KeyPart::Path => escape_into(&mut out, req.path()?),
            KeyPart::Method => escape_into(&mut out, req.method()?),
            KeyPart::Authority => escape_into(&mut out, &req.header(":authority")?.to_ascii_lowercase()),
            KeyPart::Header(name) => escape_into(&mut out, &req.header(name)?),
            KeyPart::Query(name) => escape_into(&mut out, &req.query(name)?),
            KeyPart::Literal(text) => escape_into(&mut out, text),
        }
    }
    if out.len() > MAX_IDENTITY {
        let mut half = [0u8; 16];
        half.copy_from_slice(&sha256(out.as_bytes())[..16]);
        let digits: [u8; 32] = hex(&half);
        out.clear();
        out.push_str("~H");
        out.extend(digits.iter().map(|&d| d as char));
    }
    Some(out)
}

/// The client's address: the connection's (hops = 0), or the `hops`-th
/// X-Forwarded-For entry from the right, which a trusted proxy wrote. A
/// client can prepend anything to that header; only trusted hops count.
/// Falls back to the connection's address when the header is too short or
/// that entry is not an address. Normalized, so `::ffff:1.2.3.4`-style
/// spellings of one address are one identity.
pub fn client_ip<S: RequestSource + ?Sized>(req: &Request<'_, S>, hops: u32) -> Option<String> {
    if hops > 0 {
        if let Some(xff) = req.header("x-forwarded-for") {
            let entries: Vec<&str> = xff.split(',').map(str::trim).collect();
            if let Some(entry) = entries.len().checked_sub(hops as usize).map(|i| entries[i]) {
                if let Some(ip) = parse_ip(entry) {
                    return Some(ip);
                }
            }
        }
    }
    parse_ip(&req.source_address()?)
}

fn parse_ip(s: &str) -> Option<String> {
    let ip = s.parse::<SocketAddr>().map(|a| a.ip()).or_else(|_| s.parse::<IpAddr>()).ok()?;
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    Some(ip.to_string())
}

/// Appends `s`, escaping every byte outside [A-Za-z0-9._-] as `~XX`.
pub fn escape_into(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(b as char);
        } else {
            out.push('~');
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 15) as usize] as char);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::fake::FakeRequest;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn id(parts: &[KeyPart], req: &FakeRequest, hops: u32) -> Option<String> {
        identity(parts, &Request::new(req), hops)
    }

    #[test]
    #[wasm_bindgen_test]
    fn parts_are_escaped_and_joined_unambiguously() {
        let req = FakeRequest::new("GET", "/a").with("x-k", "a~~b").with("x-j", "{x}:y");
        let parts = [KeyPart::Header("x-k".into()), KeyPart::Header("x-j".into())];
        assert_eq!(id(&parts, &req, 0).as_deref(), Some("a~7E~7Eb~~~7Bx~7D~3Ay"));
        let one = FakeRequest::new("GET", "/").with("a", "x~~y").with("b", "z");
        let two = FakeRequest::new("GET", "/").with("a", "x").with("b", "y~~z");
        let ab = [KeyPart::Header("a".into()), KeyPart::Header("b".into())];
        assert_ne!(id(&ab, &one, 0), id(&ab, &two, 0));
    }

    #[test]
    #[wasm_bindgen_test]
    fn long_identities_are_hashed_to_a_bounded_tag() {
        let long = "k".repeat(65);
        let req = FakeRequest::new("GET", "/").with("x-api-key", &long);
        let tag = id(&[KeyPart::Header("x-api-key".into())], &req, 0).unwrap();
        assert_eq!(tag.len(), 34);
        assert!(tag.starts_with("~H"));
        let other = FakeRequest::new("GET", "/").with("x-api-key", &"k".repeat(66));
        assert_ne!(Some(tag), id(&[KeyPart::Header("x-api-key".into())], &other, 0));
        let exact = FakeRequest::new("GET", "/").with("x-api-key", &"k".repeat(64));
        assert_eq!(id(&[KeyPart::Header("x-api-key".into())], &exact, 0).unwrap().len(), 64);
    }

    #[test]
    #[wasm_bindgen_test]
    fn absent_header_or_query_means_the_rule_does_not_apply() {
        let req = FakeRequest::new("GET", "/a?x=1");
        assert_eq!(id(&[KeyPart::Header("x-api-key".into())], &req, 0), None);
        assert_eq!(id(&[KeyPart::Query("y".into())], &req, 0), None);
        assert_eq!(
            id(&[KeyPart::Query("x".into()), KeyPart::Literal("all".into())], &req, 0).as_deref(),
            Some("1~~all")
        );
    }

    #[test]
    #[wasm_bindgen_test]
    fn client_ip_ignores_forwarded_for_unless_hops_are_trusted() {
        let req = FakeRequest::new("GET", "/").with("x-forwarded-for", "6.6.6.6, 1.2.3.4");
        assert_eq!(id(&[KeyPart::ClientIp], &req, 0).as_deref(), Some("10.0.0.1"));
        assert_eq!(id(&[KeyPart::ClientIp], &req, 1).as_deref(), Some("1.2.3.4"));
        assert_eq!(id(&[KeyPart::ClientIp], &req, 2).as_deref(), Some("6.6.6.6"));
        assert_eq!(id(&[KeyPart::ClientIp], &req, 3).as_deref(), Some("10.0.0.1"), "too few entries");
        let junk = FakeRequest::new("GET", "/").with("x-forwarded-for", "not-an-ip");
        assert_eq!(id(&[KeyPart::ClientIp], &junk, 1).as_deref(), Some("10.0.0.1"));
    }

    #[test]
    #[wasm_bindgen_test]
    fn ipv6_and_mapped_addresses_are_normalized() {
        let mut req = FakeRequest::new("GET", "/");
        req.source = Some("[::ffff:1.2.3.4]:555".into());
        assert_eq!(id(&[KeyPart::ClientIp], &req, 0).as_deref(), Some("1.2.3.4"));
        req.source = Some("[2001:DB8::1]:555".into());
        assert_eq!(id(&[KeyPart::ClientIp], &req, 0).as_deref(), Some("2001~3Adb8~3A~3A1"));
    }
}
