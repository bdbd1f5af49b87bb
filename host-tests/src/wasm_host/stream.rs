//! One HTTP stream as Envoy holds it for the module: the request the test
//! sends, the response, and where the filter has left it.

use std::collections::BTreeMap;

use super::codec::request_map;
use super::header_map::HeaderMap;

/// A request as the downstream client sends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The field lines as sent, pseudo-headers first. The filter sees them
    /// as Envoy's codec keeps them (see `codec`): repeated inline headers
    /// such as `x-forwarded-for` joined with a comma, others line by line.
    pub headers: HeaderMap,
    /// The connection's address (`source.address`), "ip:port".
    pub source: String,
    /// The body, sent whole after the headers (none: the headers end the
    /// stream).
    pub body: Option<Vec<u8>>,
    /// Trailers ending the stream after the body (HTTP/2): the body's last
    /// chunk then comes without `end_of_stream`.
    pub trailers: Option<HeaderMap>,
}

impl Request {
    /// `GET path` for `example.com` from 10.0.0.1:40000.
    pub fn get(path: &str) -> Request {
        Request::new("GET", path)
    }

    /// `method path` for `example.com` from 10.0.0.1:40000.
    pub fn new(method: &str, path: &str) -> Request {
        Request {
            headers: HeaderMap::from_text(&[
                (":method", method),
                (":path", path),
                (":authority", "example.com"),
                (":scheme", "http"),
            ]),
            source: "10.0.0.1:40000".into(),
            body: None,
            trailers: None,
        }
    }

    /// With `body`, sent whole after the headers.
    pub fn body(mut self, body: &[u8]) -> Request {
        self.body = Some(body.to_vec());
        self
    }

    /// Ended by these trailers after its body (an empty body if none was set).
    pub fn trailers(mut self, fields: &[(&str, &str)]) -> Request {
        self.body.get_or_insert_with(Vec::new);
        self.trailers = Some(HeaderMap::from_text(fields));
        self
    }

    /// From another address ("ip:port").
    pub fn from(mut self, source: &str) -> Request {
        self.source = source.into();
        self
    }

    /// With one more field line (the name in lower case, as Envoy gives it).
    pub fn header(self, name: &str, value: &str) -> Request {
        self.header_bytes(name, value)
    }

    /// With one more field line of raw bytes (the name lower-cased, as
    /// Envoy's codec does). Call it again with the same name for several
    /// lines of one header.
    pub fn header_bytes(mut self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Request {
        self.headers.push(name.as_ref().to_ascii_lowercase(), value);
        self
    }

    /// With `name` (a pseudo-header such as `:path`, or any other) set to
    /// these raw bytes where it stands.
    pub fn set_header_bytes(mut self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Request {
        self.headers.set_in_place(&name.as_ref().to_ascii_lowercase(), value.as_ref());
        self
    }
}

/// A local reply the module sent (`proxy_send_local_response`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalReply {
    /// HTTP status.
    pub status: u32,
    /// Envoy's response code details.
    pub details: String,
    /// Headers.
    pub headers: HeaderMap,
    /// Body.
    pub body: Vec<u8>,
}

/// Where the filter has left the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Paused, waiting for the filter to resume it or reply.
    Waiting,
    /// Let through to the backend.
    Continued,
    /// Answered by the filter itself (or, with details `wasm_fail_stream`,
    /// by Envoy because the VM had failed).
    Replied(LocalReply),
}

/// The response the client got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// HTTP status.
    pub status: u32,
    /// Headers, in order.
    pub headers: HeaderMap,
    /// Body as text.
    pub body: String,
    /// Whether the filter sent it (else the backend did).
    pub local: bool,
}

impl Response {
    /// The first value of a header as text (fails the test if it is not UTF-8).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.text(name)
    }

    /// The first value of a header as bytes.
    pub fn header_bytes(&self, name: &str) -> Option<&[u8]> {
        self.headers.first(name)
    }
}

/// A live stream inside a VM.
#[derive(Clone, Debug)]
pub struct Stream {
    /// Request headers (the filter may change them).
    pub request_headers: HeaderMap,
    /// Response headers, once the backend answered.
    pub response_headers: Option<HeaderMap>,
    /// Properties by dotted path (`source.address`).
    pub properties: BTreeMap<String, Vec<u8>>,
    /// Where the filter has left it.
    pub state: State,
    /// Whether the request headers can still be read or changed: Envoy lets
    /// go of them once `proxy_on_request_headers` returned Continue.
    pub request_map_open: bool,
    /// The request body as it went on, after the filter's changes.
    pub upstream_body: Option<Vec<u8>>,
}

impl Stream {
    /// A stream for `request`.
    pub fn new(request: &Request) -> Stream {
        let mut properties = BTreeMap::new();
        properties.insert("source.address".to_string(), request.source.as_bytes().to_vec());
        Stream {
            request_headers: request_map(&request.headers),
            response_headers: None,
            properties,
            state: State::Waiting,
            request_map_open: true,
            upstream_body: None,
        }
    }
}
