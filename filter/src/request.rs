//! The request as the rules see it, read lazily from the host: a request
//! that no rule looks at costs no hostcalls beyond the ones it needs.

use std::cell::OnceCell;

use crate::percent::{decode, is_unreserved};

/// What the host can tell about the request.
pub trait RequestSource {
    /// A request header by lower-case name (":path", ":method",
    /// ":authority" for the pseudo-headers).
    fn header(&self, name: &str) -> Option<String>;
    /// The downstream connection's address, "ip:port" or "[ipv6]:port".
    fn source_address(&self) -> Option<String>;
}

/// One request, with what has been read of it cached.
pub struct Request<'a, S: RequestSource + ?Sized> {
    source: &'a S,
    raw_path: OnceCell<Option<String>>,
    path: OnceCell<Option<String>>,
    method: OnceCell<Option<String>>,
}

impl<'a, S: RequestSource + ?Sized> Request<'a, S> {
    /// A view of the request `source` describes.
    pub fn new(source: &'a S) -> Request<'a, S> {
        Request { source, raw_path: OnceCell::new(), path: OnceCell::new(), method: OnceCell::new() }
    }

    fn raw_path(&self) -> Option<&str> {
        self.raw_path.get_or_init(|| self.source.header(":path")).as_deref()
    }

    /// The path without query or fragment, percent-escapes of unreserved
    /// characters decoded (`/%6Cogin` is `/login`), so an encoding trick
    /// neither dodges a rule nor makes a new identity.
    pub fn path(&self) -> Option<&str> {
        self.path.get_or_init(|| self.raw_path().map(normalize_path)).as_deref()
    }

    /// The HTTP method.
    pub fn method(&self) -> Option<&str> {
        self.method.get_or_init(|| self.source.header(":method")).as_deref()
    }

    /// A header by lower-case name.
    pub fn header(&self, name: &str) -> Option<String> {
        self.source.header(name)
    }

    /// The first value of query parameter `name`, decoded.
    pub fn query(&self, name: &str) -> Option<String> {
        let raw = self.raw_path()?;
        let query = raw.split_once('?')?.1;
        let query = query.split_once('#').map_or(query, |(q, _)| q);
        query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k, true) == name).then(|| decode(v, true))
        })
    }

    /// The connection's address, as the host reports it.
    pub fn source_address(&self) -> Option<String> {
        self.source.source_address()
    }
}

/// Strips query and fragment and decodes escapes of unreserved characters
/// (RFC 3986 normalization); other escapes stay, with upper-case hex.
pub fn normalize_path(raw: &str) -> String {
    let end = raw.find(['?', '#']).unwrap_or(raw.len());
    let bytes = &raw.as_bytes()[..end];
    let mut out = String::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            if let (Some(h), Some(l)) = (bytes.get(i + 1).and_then(|b| hex(*b)), bytes.get(i + 2).and_then(|b| hex(*b)))
            {
                let b = h << 4 | l;
                if is_unreserved(b) {
                    out.push(b as char);
                } else {
                    out.push('%');
                    out.push(bytes[i + 1].to_ascii_uppercase() as char);
                    out.push(bytes[i + 2].to_ascii_uppercase() as char);
                }
                i += 3;
                continue;
            }
        }
        // The path arrived as a &str, so a lone byte here is ASCII or part of
        // a UTF-8 sequence copied whole below.
        let ch_len = utf8_len(bytes[i]);
        out.push_str(&raw[i..(i + ch_len).min(end)]);
        i += ch_len;
    }
    out
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
pub(crate) mod fake {
    //! A request made of a header list, for tests.
    use super::RequestSource;

    /// Headers and a source address.
    #[derive(Default)]
    pub struct FakeRequest {
        /// (lower-case name, value)
        pub headers: Vec<(String, String)>,
        /// "ip:port"
        pub source: Option<String>,
    }

    impl FakeRequest {
        /// A request for `method path` from 10.0.0.1.
        pub fn new(method: &str, path: &str) -> FakeRequest {
            FakeRequest {
                headers: vec![
                    (":method".into(), method.into()),
                    (":path".into(), path.into()),
                    (":authority".into(), "example.com".into()),
                ],
                source: Some("10.0.0.1:40000".into()),
            }
        }

        /// Adds a header.
        pub fn with(mut self, name: &str, value: &str) -> FakeRequest {
            self.headers.push((name.into(), value.into()));
            self
        }
    }

    impl RequestSource for FakeRequest {
        fn header(&self, name: &str) -> Option<String> {
            self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
        }
        fn source_address(&self) -> Option<String> {
            self.source.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeRequest;
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn path_normalization_defeats_encoding_tricks() {
        assert_eq!(normalize_path("/%6Cogin?x=1"), "/login");
        assert_eq!(normalize_path("/a%2fb#frag"), "/a%2Fb");
        assert_eq!(normalize_path("/caf%C3%A9/ü"), "/caf%C3%A9/ü");
        assert_eq!(normalize_path("/100%"), "/100%");
        assert_eq!(normalize_path("/%zz"), "/%zz");
    }

    #[test]
    #[wasm_bindgen_test]
    fn query_values_are_decoded_and_the_first_wins() {
        let src = FakeRequest::new("GET", "/s?q=a%20b&k=%61bc&k=2&flag");
        let req = Request::new(&src);
        assert_eq!(req.query("k").as_deref(), Some("abc"));
        assert_eq!(req.query("q").as_deref(), Some("a b"));
        assert_eq!(req.query("flag").as_deref(), Some(""));
        assert_eq!(req.query("none"), None);
        assert_eq!(req.path(), Some("/s"));
    }
}
