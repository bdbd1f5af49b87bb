//! The request's header field lines as the host serializes them
//! (proxy-wasm's map format), read once and looked at as bytes: Envoy
//! passes header values through unchanged, and a value need not be UTF-8.

use std::ops::Range;

/// More field lines than this make the list unreadable (Envoy's own
/// default limit is 100).
pub const MAX_LINES: usize = 1024;

/// Every header field line, in order, pseudo-headers included.
#[derive(Clone, Debug, Default)]
pub struct HeaderList {
    buf: Vec<u8>,
    lines: Vec<(Range<usize>, Range<usize>)>,
    /// The host's list could not be read whole (more than `MAX_LINES`
    /// lines, a broken serialization, a failed hostcall): no rule can be
    /// matched on it, and none may be skipped for it.
    unreadable: bool,
}

fn u32_at(buf: &[u8], at: usize) -> Option<usize> {
    let b = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
}

impl HeaderList {
    /// Parses proxy-wasm's serialization: a u32 count, then the length of
    /// each name and value (u32 each), then each name and value followed by
    /// a NUL. `None` when the bytes do not follow it.
    pub fn parse(buf: Vec<u8>) -> Option<HeaderList> {
        let count = u32_at(&buf, 0)?;
        if count > MAX_LINES {
            return None;
        }
        let mut lines = Vec::with_capacity(count);
        let mut data = 4usize.checked_add(count.checked_mul(8)?)?;
        for i in 0..count {
            let name_len = u32_at(&buf, 4 + i * 8)?;
            let value_len = u32_at(&buf, 8 + i * 8)?;
            let name = data..data.checked_add(name_len)?;
            let value = name.end.checked_add(1)?..name.end.checked_add(1)?.checked_add(value_len)?;
            data = value.end.checked_add(1)?;
            if data > buf.len() {
                return None;
            }
            lines.push((name, value));
        }
        Some(HeaderList { buf, lines, unreadable: false })
    }

    /// The list of a request whose headers could not be read whole.
    pub fn unreadable() -> HeaderList {
        HeaderList { unreadable: true, ..HeaderList::default() }
    }

    /// Whether the headers could not be read whole.
    pub fn is_unreadable(&self) -> bool {
        self.unreadable
    }

    /// Builds the list from (name, value) pairs (tests, other hosts).
    pub fn from_pairs<N: AsRef<[u8]>, V: AsRef<[u8]>>(pairs: &[(N, V)]) -> HeaderList {
        let mut buf = Vec::new();
        let mut lines = Vec::with_capacity(pairs.len());
        for (n, v) in pairs {
            let (n, v) = (n.as_ref(), v.as_ref());
            let name = buf.len()..buf.len() + n.len();
            buf.extend_from_slice(n);
            let value = buf.len()..buf.len() + v.len();
            buf.extend_from_slice(v);
            lines.push((name, value));
        }
        HeaderList { buf, lines, unreadable: false }
    }

    /// The values of every field line named `name` (ASCII case-insensitive), in order.
    pub fn lines<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.lines
            .iter()
            .filter(move |(n, _)| self.buf[n.clone()].eq_ignore_ascii_case(name.as_bytes()))
            .map(move |(_, v)| &self.buf[v.clone()])
    }

    /// The value of the first field line named `name`.
    pub fn first<'a>(&'a self, name: &'a str) -> Option<&'a [u8]> {
        self.lines(name).next()
    }
}

/// What a header says when one value is expected of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OneValue<'a> {
    /// Not sent.
    Absent,
    /// This value (possibly empty).
    One(&'a [u8]),
    /// Several different values: which one the upstream reads is unknown.
    Conflicting,
}

/// Optional white space around list members (RFC 9110).
pub fn trim_ows(mut b: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = b {
        b = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = b {
        b = rest;
    }
    b
}

/// The members of a field value read as a comma-separated list.
pub fn members(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&c| c == b',').map(trim_ows)
}

/// The one value of a header read as a list (RFC 9110: several field lines
/// mean the same as one line joining them with commas): every non-empty
/// member must be the same, so `k1, k1` is `k1`, while `a, b` (or `a` and
/// `b` on two lines) conflicts. Only empty members: the empty value.
pub fn one_member<'a>(lines: impl Iterator<Item = &'a [u8]>) -> OneValue<'a> {
    let mut seen: Option<&[u8]> = None;
    let mut any = false;
    for line in lines {
        any = true;
        for m in members(line).filter(|m| !m.is_empty()) {
            match seen {
                None => seen = Some(m),
                Some(s) if s == m => {}
                Some(_) => return OneValue::Conflicting,
            }
        }
    }
    match (any, seen) {
        (false, _) => OneValue::Absent,
        (true, None) => OneValue::One(&[]),
        (true, Some(m)) => OneValue::One(m),
    }
}

/// The one value of a header whose value is NOT a list (commas are part
/// of it, e.g. User-Agent): every field line must carry the same value.
pub fn one_line<'a>(lines: impl Iterator<Item = &'a [u8]>) -> OneValue<'a> {
    let mut seen: Option<&[u8]> = None;
    for line in lines.map(trim_ows) {
        match seen {
            None => seen = Some(line),
            Some(s) if s == line => {}
            Some(_) => return OneValue::Conflicting,
        }
    }
    seen.map_or(OneValue::Absent, OneValue::One)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn serialize(pairs: &[(&[u8], &[u8])]) -> Vec<u8> {
        let mut out = (pairs.len() as u32).to_le_bytes().to_vec();
        for (n, v) in pairs {
            out.extend_from_slice(&(n.len() as u32).to_le_bytes());
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        }
        for (n, v) in pairs {
            out.extend_from_slice(n);
            out.push(0);
            out.extend_from_slice(v);
            out.push(0);
        }
        out
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_host_serialization_parses_into_byte_values() {
        let buf = serialize(&[(b":path", b"/a"), (b"x-api-key", b"\xff\xfe"), (b"X-Api-Key", b"k")]);
        let h = HeaderList::parse(buf).unwrap();
        assert_eq!(h.first(":path"), Some(&b"/a"[..]));
        assert_eq!(h.lines("x-api-key").collect::<Vec<_>>(), [&b"\xff\xfe"[..], b"k"]);
        assert_eq!(h.first("absent"), None);
    }

    #[test]
    #[wasm_bindgen_test]
    fn truncated_or_lying_serializations_are_refused() {
        let good = serialize(&[(b"a", b"b")]);
        for cut in 0..good.len() {
            assert!(HeaderList::parse(good[..cut].to_vec()).is_none(), "cut at {cut}");
        }
        let mut huge = good.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(HeaderList::parse(huge).is_none());
        let mut many = good;
        many[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(HeaderList::parse(many).is_none());
        assert!(HeaderList::parse(serialize(&[])).is_some());
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_list_header_must_name_one_member() {
        fn one<'a>(lines: &[&'a [u8]]) -> OneValue<'a> {
            one_member(lines.iter().copied())
        }
        assert_eq!(one(&[]), OneValue::Absent);
        assert_eq!(one(&[b"k1"]), OneValue::One(b"k1"));
        assert_eq!(one(&[b"k1, k1"]), OneValue::One(b"k1"));
        assert_eq!(one(&[b" k1 ", b"k1,"]), OneValue::One(b"k1"));
        assert_eq!(one(&[b""]), OneValue::One(b""));
        assert_eq!(one(&[b" , "]), OneValue::One(b""));
        assert_eq!(one(&[b"fresh, spent"]), OneValue::Conflicting);
        assert_eq!(one(&[b"fresh", b"spent"]), OneValue::Conflicting);
        assert_eq!(one(&[b"\xff", b"\xfe"]), OneValue::Conflicting);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_non_list_header_keeps_its_commas_but_not_a_second_line() {
        fn one<'a>(lines: &[&'a [u8]]) -> OneValue<'a> {
            one_line(lines.iter().copied())
        }
        assert_eq!(one(&[b"Mozilla/5.0 (KHTML, like Gecko)"]), OneValue::One(b"Mozilla/5.0 (KHTML, like Gecko)"));
        assert_eq!(one(&[b"a", b" a"]), OneValue::One(b"a"));
        assert_eq!(one(&[b"a", b"b"]), OneValue::Conflicting);
        assert_eq!(one(&[]), OneValue::Absent);
    }
}
