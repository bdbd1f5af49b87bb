//! An HTTP/2 cleartext client (prior knowledge, as `curl --http2-prior-knowledge`)
//! that ends a request with trailers after its body: what an HTTP/1.1
//! client cannot send through Envoy, and what gRPC and some HTTP/2 clients
//! send every time. Built on the `h2` crate over a current-thread tokio
//! runtime.

use std::future::poll_fn;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request};

/// One request.
#[derive(Clone, Debug, Default)]
pub struct H2Request {
    /// Path and query.
    pub path: String,
    /// Header fields (lower-case names).
    pub headers: Vec<(String, String)>,
    /// The body (sent as one DATA frame, or more under flow control).
    pub body: Vec<u8>,
    /// Trailer fields ending the stream (none: the body ends it).
    pub trailers: Vec<(String, String)>,
}

impl H2Request {
    /// `POST path` with `body` and these trailers.
    pub fn post(path: &str, body: &[u8], trailers: &[(&str, &str)]) -> H2Request {
        H2Request {
            path: path.into(),
            headers: Vec::new(),
            body: body.to_vec(),
            trailers: trailers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
        }
    }

    /// With one more header field.
    pub fn header(mut self, name: &str, value: &str) -> H2Request {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// An answer.
#[derive(Clone, Debug)]
pub struct H2Answer {
    /// The status.
    pub status: u16,
    /// The header fields.
    pub headers: HeaderMap,
    /// The body.
    pub body: Vec<u8>,
}

impl H2Answer {
    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Sends every request at once, each on its own stream of one connection
/// to 127.0.0.1:`port`; their answers in the same order (an error: the
/// stream was reset or the connection failed). Gives up after `within`.
pub fn send_all(port: u16, requests: &[H2Request], within: Duration) -> Vec<Result<H2Answer, String>> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        match tokio::time::timeout(within, exchange(port, requests)).await {
            Ok(Ok(answers)) => answers,
            Ok(Err(e)) => panic!("HTTP/2 connection to port {port}: {e}"),
            Err(_) => panic!("HTTP/2 requests to port {port} not answered within {within:?}"),
        }
    })
}

async fn exchange(port: u16, requests: &[H2Request]) -> Result<Vec<Result<H2Answer, String>>, String> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
    let (client, connection) = h2::client::handshake(tcp).await.map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut pending = Vec::new();
    for r in requests {
        let mut client = client.clone().ready().await.map_err(|e| e.to_string())?;
        let mut head = Request::builder().method(Method::POST).uri(format!("http://127.0.0.1:{port}{}", r.path));
        for (n, v) in &r.headers {
            head = head.header(n.as_str(), v.as_str());
        }
        let (response, mut send) = client.send_request(head.body(()).unwrap(), false).map_err(|e| e.to_string())?;
        send_body(&mut send, &r.body, r.trailers.is_empty()).await.map_err(|e| e.to_string())?;
        if !r.trailers.is_empty() {
            send.send_trailers(fields(&r.trailers)).map_err(|e| e.to_string())?;
        }
        pending.push(tokio::spawn(async move { read_answer(response).await.map_err(|e| e.to_string()) }));
    }
    let mut answers = Vec::new();
    for p in pending {
        answers.push(p.await.unwrap_or_else(|e| Err(e.to_string())));
    }
    Ok(answers)
}

/// Sends `body` as the peer's flow control allows.
async fn send_body(send: &mut h2::SendStream<Bytes>, body: &[u8], end: bool) -> Result<(), h2::Error> {
    let mut rest = Bytes::copy_from_slice(body);
    while !rest.is_empty() {
        send.reserve_capacity(rest.len());
        let granted = match poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(n) => n?,
            None => return Err(h2::Error::from(h2::Reason::STREAM_CLOSED)),
        };
        let part = rest.split_to(granted.min(rest.len()));
        send.send_data(part, end && rest.is_empty())?;
    }
    if body.is_empty() && end {
        send.send_data(Bytes::new(), true)?;
    }
    Ok(())
}

async fn read_answer(response: h2::client::ResponseFuture) -> Result<H2Answer, h2::Error> {
    let (parts, mut body) = response.await?.into_parts();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    Ok(H2Answer { status: parts.status.as_u16(), headers: parts.headers, body: bytes })
}

fn fields(list: &[(String, String)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (n, v) in list {
        map.append(HeaderName::from_bytes(n.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
    }
    map
}
