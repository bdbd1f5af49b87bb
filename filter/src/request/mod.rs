//! The request as the rules see it, read lazily from the host and as
//! bytes: a header value, path or query need not be UTF-8, and any byte is
//! escaped like any other before it reaches a key, a header or a log.

mod authority;
mod body;
mod credentials;
mod header_list;
mod path;
mod usage_ask;

use std::cell::OnceCell;

pub use authority::canonical_authority;
pub use body::{Body, BodyProblem, MAX_BODY_DEPTH};
pub use credentials::{canonical_credentials, one_credential, OneCredential, AUTHORIZATION};
pub use header_list::{members, one_line, one_member, trim_ows, HeaderList, OneValue};
pub use path::normalize_path;
pub use usage_ask::ask_for_usage;

use crate::percent::decode;

/// What the host can tell about the request.
pub trait RequestSource {
    /// Every request header field line, pseudo-headers included, read once.
    fn headers(&self) -> HeaderList;
    /// The downstream peer's address, "ip:port" or "[ipv6]:port".
    fn source_address(&self) -> Option<Vec<u8>>;
}

/// One request, with what has been read of it cached.
pub struct Request<'a, S: RequestSource + ?Sized> {
    source: &'a S,
    headers: OnceCell<HeaderList>,
    path: OnceCell<Option<Vec<u8>>>,
    method: OnceCell<Option<Vec<u8>>>,
    body: Option<&'a Body>,
}

impl<'a, S: RequestSource + ?Sized> Request<'a, S> {
    /// A view of the request `source` describes.
    pub fn new(source: &'a S) -> Request<'a, S> {
        Request { source, headers: OnceCell::new(), path: OnceCell::new(), method: OnceCell::new(), body: None }
    }

    /// The same request with its body read.
    pub fn with_body(source: &'a S, body: &'a Body) -> Request<'a, S> {
        Request { body: Some(body), ..Request::new(source) }
    }

    /// The body, if it was waited for (a rule that reads the body of a
    /// request whose body was not read cannot read it: refused, never passed).
    pub fn body(&self) -> &Body {
        self.body.unwrap_or(&Body::Unreadable)
    }

    /// The header field lines.
    pub fn headers(&self) -> &HeaderList {
        self.headers.get_or_init(|| self.source.headers())
    }

    /// The path without query or fragment, percent-escapes of unreserved
    /// characters decoded (`/%6Cogin` is `/login`) and each segment's `;`
    /// parameters dropped (`/api;p=1/x` is `/api/x`), so an encoding trick
    /// neither dodges a rule nor makes a new identity (see `normalize_path`).
    pub fn path(&self) -> Option<&[u8]> {
        self.path.get_or_init(|| self.headers().first(":path").map(normalize_path)).as_deref()
    }

    /// The method in upper case: methods are case-sensitive in HTTP, but
    /// many upstreams take `post` for `POST`, so a POST-only rule must too.
    pub fn method(&self) -> Option<&[u8]> {
        self.method.get_or_init(|| self.headers().first(":method").map(<[u8]>::to_ascii_uppercase)).as_deref()
    }

    /// The canonical :authority (see `canonical_authority`).
    pub fn authority(&self) -> Option<Vec<u8>> {
        let h = self.headers();
        h.first(":authority").map(|a| canonical_authority(a, h.first(":scheme")))
    }

    /// The value of query parameter `name`, decoded to bytes. A name given
    /// several different values conflicts (the upstream may read any one).
    pub fn query(&self, name: &str) -> QueryValue {
        let Some(raw) = self.headers().first(":path") else { return QueryValue::Absent };
        let Some(at) = raw.iter().position(|&b| b == b'?') else { return QueryValue::Absent };
        let query = &raw[at + 1..];
        let query = query.split(|&b| b == b'#').next().unwrap_or(query);
        let mut found: Option<Vec<u8>> = None;
        for pair in query.split(|&b| b == b'&') {
            let (k, v) = match pair.iter().position(|&b| b == b'=') {
                Some(i) => (&pair[..i], &pair[i + 1..]),
                None => (pair, &pair[pair.len()..]),
            };
            if decode(k, true) != name.as_bytes() {
                continue;
            }
            let v = decode(v, true);
            match &found {
                None => found = Some(v),
                Some(f) if *f == v => {}
                Some(_) => return QueryValue::Conflicting,
            }
        }
        found.map_or(QueryValue::Absent, QueryValue::One)
    }

    /// The connection's address, as the host reports it.
    pub fn source_address(&self) -> Option<Vec<u8>> {
        self.source.source_address()
    }
}

/// A query parameter's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueryValue {
    /// Not in the query.
    Absent,
    /// Its value, decoded.
    One(Vec<u8>),
    /// Given several different values.
    Conflicting,
}

#[cfg(test)]
pub(crate) mod fake {
    //! A request made of a header list, for tests.
    use super::{HeaderList, RequestSource};

    /// Headers and a source address.
    #[derive(Default)]
    pub struct FakeRequest {
        /// (lower-case name, value)
        pub headers: Vec<(Vec<u8>, Vec<u8>)>,
        /// "ip:port"
        pub source: Option<String>,
        /// The host could not hand the headers over whole.
        pub unreadable: bool,
    }

    impl FakeRequest {
        /// A request for `method path` from 10.0.0.1.
        pub fn new(method: &str, path: &str) -> FakeRequest {
            FakeRequest::default()
                .with(":method", method)
                .with(":path", path)
                .with(":authority", "example.com")
                .from("10.0.0.1:40000")
        }

        /// Adds a header.
        pub fn with(self, name: &str, value: &str) -> FakeRequest {
            self.with_bytes(name, value.as_bytes())
        }

        /// Adds a header with a raw byte value.
        pub fn with_bytes(mut self, name: &str, value: &[u8]) -> FakeRequest {
            self.headers.push((name.as_bytes().to_vec(), value.to_vec()));
            self
        }

        /// Sets the peer address.
        pub fn from(mut self, address: &str) -> FakeRequest {
            self.source = Some(address.into());
            self
        }
    }

    impl RequestSource for FakeRequest {
        fn headers(&self) -> HeaderList {
            if self.unreadable {
                return HeaderList::unreadable();
            }
            HeaderList::from_pairs(&self.headers)
        }
        fn source_address(&self) -> Option<Vec<u8>> {
            self.source.clone().map(String::into_bytes)
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
    fn query_values_are_decoded_to_bytes_and_conflicts_are_told() {
        let src = FakeRequest::new("GET", "/s?q=a%20b&k=%61bc&k=abc&flag&u=%FF&two=1&two=2");
        let req = Request::new(&src);
        assert_eq!(req.query("k"), QueryValue::One(b"abc".to_vec()), "the same value twice is one value");
        assert_eq!(req.query("q"), QueryValue::One(b"a b".to_vec()));
        assert_eq!(req.query("flag"), QueryValue::One(Vec::new()));
        assert_eq!(req.query("u"), QueryValue::One(vec![0xff]));
        assert_eq!(req.query("two"), QueryValue::Conflicting);
        assert_eq!(req.query("none"), QueryValue::Absent);
        assert_eq!(req.path(), Some(&b"/s"[..]));
    }

    #[test]
    #[wasm_bindgen_test]
    fn method_is_upper_case_and_authority_canonical() {
        let src = FakeRequest::default().with(":method", "post").with(":authority", "API.example.:0080");
        let req = Request::new(&src);
        assert_eq!(req.method(), Some(&b"POST"[..]));
        assert_eq!(req.authority().as_deref(), Some(&b"api.example"[..]));
    }
}
