//! The `Authorization` header as one identity per credential.
//!
//! RFC 9110 §11.1: the auth-scheme is case-insensitive and one or more
//! spaces separate it from the credentials, so an upstream that follows it
//! takes `Bearer T`, `bearer T`, `BEARER T`, `Bearer   T` (and, leniently,
//! `Bearer<TAB>T`) as one token. Read raw, each spelling would be a budget
//! of its own. The canonical form is the scheme in lower case, one space,
//! then the credentials as sent (a token68 is case-sensitive).

use std::borrow::Cow;

use super::header_list::members;

/// The header this canonical form applies to (a `header:` key part).
pub const AUTHORIZATION: &str = "authorization";

/// `value` with its scheme lower-cased and the white space after it one
/// space. Borrowed when already canonical (no allocation).
pub fn canonical_credentials(value: &[u8]) -> Cow<'_, [u8]> {
    let is_ws = |b: &u8| matches!(b, b' ' | b'\t');
    let scheme_end = value.iter().position(is_ws).unwrap_or(value.len());
    let (scheme, after) = value.split_at(scheme_end);
    let gap = after.iter().take_while(|b| is_ws(b)).count();
    let rest = &after[gap..];
    let lower = !scheme.iter().any(u8::is_ascii_uppercase);
    let one_space = gap == 1 && after.first() == Some(&b' ');
    if lower && (one_space || (gap == 0 && rest.is_empty())) {
        return Cow::Borrowed(value);
    }
    let mut out = Vec::with_capacity(scheme.len() + 1 + rest.len());
    out.extend(scheme.iter().map(u8::to_ascii_lowercase));
    if !rest.is_empty() {
        out.push(b' ');
        out.extend_from_slice(rest);
    }
    Cow::Owned(out)
}

/// What the Authorization field lines say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OneCredential<'a> {
    /// Not sent.
    Absent,
    /// This credential, canonical (possibly empty).
    One(Cow<'a, [u8]>),
    /// Two different credentials.
    Conflicting,
}

/// The one credential of the Authorization field lines, canonical: read as
/// a list like any `header:` part (the same credential repeated is one;
/// two different ones conflict), members compared in canonical form so
/// that two spellings of one token never conflict nor differ.
pub fn one_credential<'a>(lines: impl Iterator<Item = &'a [u8]>) -> OneCredential<'a> {
    let mut seen: Option<Cow<'a, [u8]>> = None;
    let mut any = false;
    for line in lines {
        any = true;
        for m in members(line).filter(|m| !m.is_empty()) {
            let m = canonical_credentials(m);
            match &seen {
                None => seen = Some(m),
                Some(s) if *s == m => {}
                Some(_) => return OneCredential::Conflicting,
            }
        }
    }
    match (any, seen) {
        (false, _) => OneCredential::Absent,
        (true, None) => OneCredential::One(Cow::Borrowed(&[][..])),
        (true, Some(m)) => OneCredential::One(m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn every_spelling_of_one_bearer_token_is_one_credential() {
        let canonical = b"bearer T".to_vec();
        let mut spellings: Vec<Vec<u8>> = Vec::new();
        // Every case mix of the scheme (64), then 2-11 spaces, then a tab.
        for mask in 0u32..64 {
            let scheme: Vec<u8> = b"bearer"
                .iter()
                .enumerate()
                .map(|(i, b)| if mask >> i & 1 == 1 { b.to_ascii_uppercase() } else { *b })
                .collect();
            spellings.push([&scheme[..], b" T"].concat());
        }
        for n in 2..=11 {
            spellings.push([&b"Bearer"[..], &b" ".repeat(n), b"T"].concat());
        }
        spellings.push(b"Bearer\tT".to_vec());
        spellings.push(b"Bearer \t T".to_vec());
        assert_eq!(spellings.len(), 76);
        for s in &spellings {
            assert_eq!(canonical_credentials(s).as_ref(), &canonical[..], "{:?}", String::from_utf8_lossy(s));
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_credentials_keep_their_case_and_distinct_tokens_stay_distinct() {
        assert_eq!(canonical_credentials(b"Bearer AbC").as_ref(), b"bearer AbC");
        assert_ne!(canonical_credentials(b"Bearer abc"), canonical_credentials(b"Bearer ABC"));
        assert_eq!(canonical_credentials(b"Basic dXNlcjpwdw==").as_ref(), b"basic dXNlcjpwdw==");
        // Spaces inside the credentials are the client's own.
        assert_eq!(canonical_credentials(b"X a  b").as_ref(), b"x a  b");
        assert_eq!(canonical_credentials(b"BEARER").as_ref(), b"bearer", "a scheme alone");
        assert_eq!(canonical_credentials(b"").as_ref(), b"");
        assert_eq!(canonical_credentials(b"\xffA b").as_ref(), b"\xffa b", "non-ASCII bytes as sent");
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_canonical_value_is_borrowed() {
        assert!(matches!(canonical_credentials(b"bearer T"), Cow::Borrowed(_)));
        assert!(matches!(canonical_credentials(b"bearer"), Cow::Borrowed(_)));
        assert!(matches!(canonical_credentials(b"Bearer T"), Cow::Owned(_)));
        assert!(matches!(canonical_credentials(b"bearer  T"), Cow::Owned(_)));
        assert!(matches!(canonical_credentials(b"bearer\tT"), Cow::Owned(_)));
    }

    #[test]
    #[wasm_bindgen_test]
    fn two_lines_are_one_credential_when_they_spell_one_token() {
        fn one(lines: &[&'static [u8]]) -> OneCredential<'static> {
            one_credential(lines.iter().copied())
        }
        let canonical = OneCredential::One(Cow::Borrowed(&b"bearer T"[..]));
        assert_eq!(one(&[]), OneCredential::Absent);
        assert_eq!(one(&[b"Bearer T", b"bearer   T"]), canonical);
        assert_eq!(one(&[b"Bearer T, BEARER T"]), canonical);
        assert_eq!(one(&[b"Bearer T", b"Bearer U"]), OneCredential::Conflicting);
        assert_eq!(one(&[b""]), OneCredential::One(Cow::Borrowed(&b""[..])));
    }
}
