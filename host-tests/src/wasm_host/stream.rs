//! One HTTP stream as Envoy holds it for the module: the request the test
//! sends, the response, and where the filter has left it.

use std::collections::BTreeMap;

use super::header_map::Headers;

/// A request as the downstream client sends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Request headers, pseudo-headers first.
    pub headers: Headers,
    /// The connection's address (`source.address`), "ip:port".
    pub source: String,
}

impl Request {
    /// `GET path` for `example.com` from 10.0.0.1:40000.
    pub fn get(path: &str) -> Request {
        Request::new("GET", path)
    }

    /// `method path` for `example.com` from 10.0.0.1:40000.
    pub fn new(method: &str, path: &str) -> Request {
        Request {
            headers: vec![
                (":method".into(), method.into()),
                (":path".into(), path.into()),
                (":authority".into(), "example.com".into()),
                (":scheme".into(), "http".into()),
            ],
            source: "10.0.0.1:40000".into(),
        }
    }

    /// From another address ("ip:port").
    pub fn from(mut self, source: &str) -> Request {
        self.source = source.into();
        self
    }

    /// With one more header (the name in lower case, as Envoy gives it).
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.to_ascii_lowercase(), value.into()));
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
    pub headers: Headers,
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
    /// Answered by the filter itself.
    Replied(LocalReply),
}

/// The response the client got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// HTTP status.
    pub status: u32,
    /// Headers, in order.
    pub headers: Headers,
    /// Body as text.
    pub body: String,
    /// Whether the filter sent it (else the backend did).
    pub local: bool,
}

impl Response {
    /// The first value of a header (lower-case name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// A live stream inside a VM.
#[derive(Clone, Debug)]
pub struct Stream {
    /// Request headers (the filter may change them).
    pub request_headers: Headers,
    /// Response headers, once the backend answered.
    pub response_headers: Option<Headers>,
    /// Properties by dotted path (`source.address`).
    pub properties: BTreeMap<String, Vec<u8>>,
    /// Where the filter has left it.
    pub state: State,
}

impl Stream {
    /// A stream for `request`.
    pub fn new(request: &Request) -> Stream {
        let mut properties = BTreeMap::new();
        properties.insert("source.address".to_string(), request.source.as_bytes().to_vec());
        Stream { request_headers: request.headers.clone(), response_headers: None, properties, state: State::Waiting }
    }
}
