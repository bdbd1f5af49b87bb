//! The client's identity: the rule's key parts read from the request,
//! escaped and bounded, to become the hash tag of its Redis keys.
//!
//! Escaping keeps [A-Za-z0-9._-] and writes every other byte as `~XX`, so
//! no `{`, `}`, `:`, control character or non-UTF-8 byte reaches a key and
//! the result needs no percent-encoding on the way to webdis. An empty part
//! is `~_`, so an identity is never empty (an empty hash tag `{}` would
//! make Redis hash the whole key: keys of one client on several Cluster
//! slots). Parts are joined with `~~`; escaping never produces `~~` or
//! `~_`, so distinct inputs stay distinct. Past 64 bytes the identity is
//! replaced by `~H` and 32 hex digits of its SHA-256: bounded, and no
//! client can collide with another.

use std::borrow::Cow;

use crate::config::{IdentityForm, KeyPart};
use crate::digest::{hex, sha256};
use crate::keys::MAX_IDENTITY;
use crate::request::{
    members, one_credential, one_line, one_member, BodyProblem, OneCredential, OneValue, QueryValue, Request,
    RequestSource, AUTHORIZATION,
};

/// A request's identity under a rule's key parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// The escaped, bounded identity.
    Key(String),
    /// A header or query part is absent: the rule does not apply.
    Absent,
    /// Part `n` (0-based) has several different values: which one the
    /// upstream would use is unknown, so the request is refused.
    Conflicting(usize),
    /// Part `n` (0-based), a field of the body, cannot be read (absent
    /// included: the rule says whether that refuses the request).
    BodyUnreadable(usize, BodyProblem),
}

/// The identity of `req` under `parts`, in `form` (its body read whatever
/// its length).
pub fn identity<'a, S: RequestSource + ?Sized>(
    parts: &'a [KeyPart],
    form: IdentityForm,
    req: &'a Request<'_, S>,
    xff_hops: u32,
) -> Identity {
    identity_within(parts, form, req, xff_hops, u64::MAX)
}

/// `identity`, a body part read only from a body of at most `max_body` bytes.
pub fn identity_within<'a, S: RequestSource + ?Sized>(
    parts: &'a [KeyPart],
    form: IdentityForm,
    req: &'a Request<'_, S>,
    xff_hops: u32,
    max_body: u64,
) -> Identity {
    let mut out = String::with_capacity(32);
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push_str("~~");
        }
        // Borrowed where the request holds the bytes: read on every request.
        let one = |v: OneValue<'a>| match v {
            OneValue::One(b) => Ok(Some(Cow::Borrowed(b))),
            OneValue::Absent => Ok(None),
            OneValue::Conflicting => Err(i),
        };
        let value: Result<Option<Cow<'_, [u8]>>, usize> = match part {
            KeyPart::ClientIp => Ok(Some(Cow::Owned(client_ip(req, xff_hops)))),
            KeyPart::Path => Ok(req.path().map(Cow::Borrowed)),
            KeyPart::PathIgnoreCase => Ok(req.path().map(|p| Cow::Owned(p.to_ascii_lowercase()))),
            KeyPart::Method => Ok(req.method().map(Cow::Borrowed)),
            KeyPart::Authority => Ok(req.authority().map(Cow::Owned)),
            // One token, one budget, however its scheme is spelled.
            KeyPart::Header(name) if name == AUTHORIZATION => match one_credential(req.headers().lines(name)) {
                OneCredential::One(v) => Ok(Some(v)),
                OneCredential::Absent => Ok(None),
                OneCredential::Conflicting => Err(i),
            },
            KeyPart::Header(name) => one(one_member(req.headers().lines(name))),
            KeyPart::HeaderRaw(name) => one(one_line(req.headers().lines(name))),
            KeyPart::Query(name) => match req.query(name) {
                QueryValue::One(v) => Ok(Some(Cow::Owned(v))),
                QueryValue::Absent => Ok(None),
                QueryValue::Conflicting => Err(i),
            },
            KeyPart::Literal(text) => Ok(Some(Cow::Borrowed(text.as_bytes()))),
            // Escaped and bounded below like any header value.
            KeyPart::Body(field) => match req.body().field(field.keys(), max_body) {
                Ok(text) => Ok(Some(text)),
                Err(problem) => return Identity::BodyUnreadable(i, problem),
            },
        };
        match value {
            Ok(Some(v)) => escape_into(&mut out, &v),
            Ok(None) => return Identity::Absent,
            Err(part) => return Identity::Conflicting(part),
        }
    }
    if form == IdentityForm::Digest || out.len() > MAX_IDENTITY {
        return Identity::Key(digest(&out));
    }
    Identity::Key(out)
}

/// An escaped identity as a digest: `~H` and 32 hex digits (128 bits) of
/// its SHA-256. `~H` never starts an escaped identity, so a digest never
/// equals a clear one.
pub fn digest(escaped: &str) -> String {
    let mut half = [0u8; 16];
    half.copy_from_slice(&sha256(escaped.as_bytes())[..16]);
    let digits: [u8; 32] = hex(&half);
    let mut out = String::with_capacity(34);
    out.push_str("~H");
    out.extend(digits.iter().map(|&d| d as char));
    out
}

/// The client's address: the connection's (hops = 0), or the `hops`-th
/// X-Forwarded-For entry from the right, which a trusted proxy wrote (all
/// field lines of the header, in order, are one list). A client can
/// prepend anything to that header; only trusted hops count. Falls back to
/// the connection's address when the list is too short or that entry is
/// not an address. Normalized, so `::ffff:1.2.3.4`-style spellings of one
/// address are one identity. A connection's address that is no IP address
/// (a Unix socket's or an internal listener's peer) is the identity as the
/// host reports it, and no address at all is the empty one: every request
/// has a client, so a `client_ip` rule always applies.
pub fn client_ip<S: RequestSource + ?Sized>(req: &Request<'_, S>, hops: u32) -> Vec<u8> {
    if hops > 0 {
        let entries: Vec<&[u8]> = req.headers().lines("x-forwarded-for").flat_map(members).collect();
        if let Some(entry) = entries.len().checked_sub(hops as usize).and_then(|i| entries.get(i)) {
            if let Some(ip) = crate::ip::canonical(entry) {
                return ip.into_bytes();
            }
        }
    }
    let source = req.source_address().unwrap_or_default();
    crate::ip::canonical(&source).map_or(source, String::into_bytes)
}

/// Appends `bytes`, escaping every byte outside [A-Za-z0-9._-] as `~XX`;
/// nothing at all as `~_`.
pub fn escape_into(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    if bytes.is_empty() {
        out.push_str("~_");
    }
    for &b in bytes {
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
        match identity(parts, IdentityForm::Clear, &Request::new(req), hops) {
            Identity::Key(k) => Some(k),
            Identity::Absent => None,
            Identity::Conflicting(i) => panic!("part {i} conflicts"),
            Identity::BodyUnreadable(i, p) => panic!("part {i}: {p:?}"),
        }
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
    fn a_digest_identity_is_the_hash_of_the_escaped_one_and_never_holds_the_value() {
        let req = FakeRequest::new("GET", "/").with("authorization", "Bearer sk-secret");
        let parts = [KeyPart::Header("authorization".into())];
        let Identity::Key(digest) = identity(&parts, IdentityForm::Digest, &Request::new(&req), 0) else { panic!() };
        let clear = id(&parts, &req, 0).unwrap();
        assert_eq!(clear, "bearer~20sk-secret", "the scheme in canonical case");
        assert_eq!(digest, "~Hab3a5405d03b0103ca49d0e3920dcfc9");
        assert_eq!(digest, super::digest(&clear));
        assert!(!digest.contains("secret"));
        // Its local fingerprint digest is the clear one's, read from its digits.
        let of = crate::fingerprint::IdentityDigest::of;
        assert_eq!(of(&digest), of(&clear));
        // The same client, the same digest; a long clear identity hashes the same way.
        let again = FakeRequest::new("GET", "/").with("authorization", "Bearer sk-secret");
        assert_eq!(identity(&parts, IdentityForm::Digest, &Request::new(&again), 0), Identity::Key(digest));
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
    fn an_address_that_is_no_ip_is_still_the_clients_identity() {
        let mut req = FakeRequest::new("GET", "/");
        req.source = Some("[fe80::1%2]:8080".into());
        assert_eq!(id(&[KeyPart::ClientIp], &req, 0).as_deref(), Some("fe80~3A~3A1~252"));
        req.source = Some("/var/run/envoy.sock".into());
        assert_eq!(id(&[KeyPart::ClientIp], &req, 0).as_deref(), Some("~2Fvar~2Frun~2Fenvoy.sock"));
        req.source = Some("envoy_internal_listener".into());
        assert_eq!(id(&[KeyPart::ClientIp], &req, 0).as_deref(), Some("envoy_internal_listener"));
        req.source = Some("x".repeat(100));
        assert_eq!(id(&[KeyPart::ClientIp], &req, 0).map(|s| s.len()), Some(34), "bounded like any part");
        req.source = None;
        assert_eq!(id(&[KeyPart::ClientIp], &req, 0).as_deref(), Some("~_"), "no address: the empty one");
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

    #[test]
    #[wasm_bindgen_test]
    fn non_utf8_bytes_are_escaped_and_stay_distinct() {
        let k = [KeyPart::Header("x-api-key".into())];
        let ff = FakeRequest::new("GET", "/").with_bytes("x-api-key", b"\xff\xfe");
        assert_eq!(id(&k, &ff, 0).as_deref(), Some("~FF~FE"));
        let q = [KeyPart::Query("user".into())];
        assert_eq!(id(&q, &FakeRequest::new("GET", "/?user=%FF"), 0).as_deref(), Some("~FF"));
        assert_ne!(
            id(&q, &FakeRequest::new("GET", "/?user=%FF"), 0),
            id(&q, &FakeRequest::new("GET", "/?user=%FE"), 0)
        );
    }

    #[test]
    #[wasm_bindgen_test]
    fn an_empty_value_is_a_marked_part_never_an_empty_tag() {
        let k = [KeyPart::Header("x-api-key".into())];
        assert_eq!(id(&k, &FakeRequest::new("GET", "/").with("x-api-key", ""), 0).as_deref(), Some("~_"));
        let two = [KeyPart::Header("a".into()), KeyPart::Header("b".into())];
        let req = FakeRequest::new("GET", "/").with("a", "").with("b", "");
        assert_eq!(id(&two, &req, 0).as_deref(), Some("~_~~~_"));
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_key_header_with_two_different_values_conflicts() {
        let k = [KeyPart::Literal("x".into()), KeyPart::Header("x-api-key".into())];
        let two_lines = FakeRequest::new("GET", "/").with("x-api-key", "fresh").with("x-api-key", "spent");
        assert_eq!(identity(&k, IdentityForm::Clear, &Request::new(&two_lines), 0), Identity::Conflicting(1));
        let list = FakeRequest::new("GET", "/").with("x-api-key", "fresh, spent");
        assert_eq!(identity(&k, IdentityForm::Clear, &Request::new(&list), 0), Identity::Conflicting(1));
        let same = FakeRequest::new("GET", "/").with("x-api-key", "k1, k1");
        assert_eq!(id(&k, &same, 0).as_deref(), Some("x~~k1"), "k1, k1 is k1");
        let raw = [KeyPart::HeaderRaw("user-agent".into())];
        let ua = FakeRequest::new("GET", "/").with("user-agent", "M (KHTML, like Gecko)");
        assert_eq!(id(&raw, &ua, 0).as_deref(), Some("M~20~28KHTML~2C~20like~20Gecko~29"));
    }

    #[test]
    #[wasm_bindgen_test]
    fn authority_and_method_spellings_are_one_identity() {
        let k = [KeyPart::Authority, KeyPart::Method];
        let a = FakeRequest::default().with(":authority", "a:80").with(":method", "post");
        let b = FakeRequest::default().with(":authority", "A.").with(":method", "POST");
        assert_eq!(id(&k, &a, 0), id(&k, &b, 0));
        assert_eq!(id(&k, &a, 0).as_deref(), Some("a~~POST"));
    }

    #[test]
    #[wasm_bindgen_test]
    fn path_spellings_of_one_resource_are_one_identity() {
        let plain = [KeyPart::Path];
        let any_case = [KeyPart::PathIgnoreCase];
        let path = |p: &str| FakeRequest::new("GET", p);
        assert_eq!(id(&plain, &path("/api;p=1/x?q=1"), 0).as_deref(), Some("~2Fapi~2Fx"));
        assert_eq!(id(&plain, &path("/API/x"), 0).as_deref(), Some("~2FAPI~2Fx"), "case kept by default");
        for p in ["/API/x", "/%41pi;v=2/X", "/api%3B/x"] {
            assert_eq!(id(&any_case, &path(p), 0).as_deref(), Some("~2Fapi~2Fx"), "{p}");
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn every_spelling_of_an_authorization_scheme_is_one_client() {
        let k = [KeyPart::Header("authorization".into())];
        let req = |v: &str| FakeRequest::new("GET", "/").with("authorization", v);
        for v in ["Bearer T", "bearer T", "BEARER T", "Bearer   T", "Bearer\tT"] {
            assert_eq!(id(&k, &req(v), 0).as_deref(), Some("bearer~20T"), "{v:?}");
        }
        assert_eq!(id(&k, &req("Bearer t"), 0).as_deref(), Some("bearer~20t"), "the token's case is its own");
        let two_lines =
            FakeRequest::new("GET", "/").with("authorization", "Bearer T").with("authorization", "bearer T");
        assert_eq!(id(&k, &two_lines, 0).as_deref(), Some("bearer~20T"));
        let two_tokens =
            FakeRequest::new("GET", "/").with("authorization", "Bearer T").with("authorization", "Bearer U");
        assert_eq!(identity(&k, IdentityForm::Clear, &Request::new(&two_tokens), 0), Identity::Conflicting(0));
        // Other headers, and the raw reading, keep what was sent.
        let other = [KeyPart::Header("x-api-key".into())];
        assert_eq!(
            id(&other, &FakeRequest::new("GET", "/").with("x-api-key", "Bearer  T"), 0).as_deref(),
            Some("Bearer~20~20T")
        );
        let raw = [KeyPart::HeaderRaw("authorization".into())];
        assert_eq!(id(&raw, &req("Bearer  T"), 0).as_deref(), Some("Bearer~20~20T"));
    }

    #[test]
    #[wasm_bindgen_test]
    fn forwarded_for_lines_are_one_list() {
        let req = FakeRequest::new("GET", "/").with("x-forwarded-for", "6.6.6.6").with("x-forwarded-for", "1.2.3.4");
        assert_eq!(id(&[KeyPart::ClientIp], &req, 1).as_deref(), Some("1.2.3.4"));
        assert_eq!(id(&[KeyPart::ClientIp], &req, 2).as_deref(), Some("6.6.6.6"));
        let bad = FakeRequest::new("GET", "/").with_bytes("x-forwarded-for", b"\xff\xfe");
        assert_eq!(id(&[KeyPart::ClientIp], &bad, 1).as_deref(), Some("10.0.0.1"));
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_body_field_is_escaped_and_bounded_like_a_header_value() {
        use crate::config::BodyPath;
        use crate::request::{Body, BodyProblem};
        let parts = [KeyPart::Header("authorization".into()), KeyPart::Body(BodyPath::parse("model").unwrap())];
        let req = FakeRequest::new("POST", "/v1/chat/completions").with("authorization", "Bearer k");
        let key = |body: &[u8], max: u64| {
            let body = Body::of(body);
            identity_within(&parts, IdentityForm::Clear, &Request::with_body(&req, &body), 0, max)
        };
        assert_eq!(key(br#"{"model":"gpt-4o"}"#, 100), Identity::Key("bearer~20k~~gpt-4o".into()));
        assert_eq!(key(br#"{"model":"gpt\u002d4o"}"#, 100), key(br#"{"model":"gpt-4o"}"#, 100));
        assert_eq!(key(br#"{"model":"a}{b:c~~d"}"#, 100), Identity::Key("bearer~20k~~a~7D~7Bb~3Ac~7E~7Ed".into()));
        assert_eq!(key(br#"{"model":7}"#, 100), Identity::Key("bearer~20k~~7".into()));
        assert_eq!(key(br#"{"model":""}"#, 100), Identity::Key("bearer~20k~~~_".into()));
        let long = format!(r#"{{"model":"{}"}}"#, "m".repeat(100));
        assert_eq!(key(long.as_bytes(), 1000), Identity::Key(digest(&format!("bearer~20k~~{}", "m".repeat(100)))));
        assert_eq!(key(br#"{"model":"gpt-4o"}"#, 10), Identity::BodyUnreadable(1, BodyProblem::TooLarge(10)));
        assert_eq!(key(br#"{"other":1}"#, 100), Identity::BodyUnreadable(1, BodyProblem::Missing));
        assert_eq!(key(br#"{"model":{"id":"x"}}"#, 100), Identity::BodyUnreadable(1, BodyProblem::NotText));
        assert!(KeyPart::Body(BodyPath::parse("model").unwrap()).may_be_secret(), "the client chooses it");
    }
}
