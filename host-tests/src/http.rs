//! A plain HTTP client for the tests: every status is an answer, not an error.

use std::time::Duration;

/// An agent that reports 4xx/5xx as responses.
pub fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(timeout)).build().into()
}

/// One response, reduced to what tests look at.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// Headers, lower-case names.
    pub headers: Vec<(String, String)>,
    /// Body text.
    pub body: String,
}

impl Answer {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Sends `method url` with extra headers.
pub fn send(agent: &ureq::Agent, method: &str, url: &str, headers: &[(&str, &str)]) -> Answer {
    send_body(agent, method, url, headers, &[])
}

/// Sends `method url` with extra headers and `body` (none when empty).
pub fn send_body(agent: &ureq::Agent, method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    let mut req = ureq::http::Request::builder().method(method).uri(url);
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let sent = if body.is_empty() { agent.run(req.body(()).unwrap()) } else { agent.run(req.body(body).unwrap()) };
    let mut resp = sent.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let headers = resp
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_ascii_lowercase(), v.to_str().unwrap_or("").to_string()))
        .collect();
    // Bodies of any size (a 20 MB stream in the token tests). One that is
    // not UTF-8 (gzip) reads as ""; one cut off says why on stderr, so a
    // test that then counts too little shows its cause.
    let body = match resp.body_mut().with_config().limit(u64::MAX).read_to_vec() {
        Ok(bytes) => String::from_utf8(bytes).unwrap_or_default(),
        Err(e) => {
            eprintln!("{method} {url}: the body could not be read whole: {e}");
            String::new()
        }
    };
    Answer { status: resp.status().as_u16(), headers, body }
}
