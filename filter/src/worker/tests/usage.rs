//! What a response is charged, whatever the client asks for (compression)
//! or does (hanging up).

use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;

use super::*;

const LLM: &str = r#"{"name":"llm","match":{"path_prefix":"/v1/"},"key":["header:x-user"],
    "cost":{"response_body":"usage.total_tokens","default":10,"max":200000},
    "limits":[{"algorithm":"fixed_window","limit":100000000,"window":"1h"}]}"#;

/// A response with these headers.
struct Headers(&'static [(&'static str, &'static str)]);

impl ResponseSource for Headers {
    fn header(&self, name: &str) -> Option<Vec<u8>> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_bytes().to_vec())
    }
}

const JSON: Headers = Headers(&[(":status", "200"), ("content-type", "application/json")]);
const GZIP: Headers =
    Headers(&[(":status", "200"), ("content-type", "application/json"), ("content-encoding", "gzip")]);
const BROTLI: Headers =
    Headers(&[(":status", "200"), ("content-type", "application/json"), ("content-encoding", "br")]);
const SSE: Headers = Headers(&[(":status", "200"), ("content-type", "text/event-stream")]);
/// Envoy's own answer when the upstream timed out.
const TIMEOUT: Headers = Headers(&[(":status", "504"), ("content-type", "text/plain")]);

/// A worker with stream 1 of client "a" admitted by the store.
fn admitted() -> (FakeHost, Worker) {
    let host = FakeHost::new();
    let mut w = Worker::new(config("", &format!("{LLM},{API}")), Instant::from_ms(NOW));
    w.on_request(&host, 1, &user("/v1/chat", "a"));
    w.on_answer(&host, host.token(0), ints(&ALLOW));
    (host, w)
}

/// The amount of the charge call `n` (its one `g` limit).
fn charged(host: &FakeHost, n: usize) -> u64 {
    let body = host.body(n);
    let at = body.find("/g/").unwrap_or_else(|| panic!("no charge in {body}"));
    body[at + 3..].split('/').next().unwrap().parse().unwrap()
}

#[test]
#[wasm_bindgen_test]
fn a_request_a_body_rule_applies_to_asks_for_an_uncompressed_answer() {
    let host = FakeHost::new();
    let mut w = Worker::new(config("", &format!("{LLM},{API}")), Instant::from_ms(NOW));
    w.on_request(&host, 1, &user("/api/x", "a"));
    assert!(host.request_headers.borrow().is_empty(), "a rule with a fixed cost leaves the request alone");
    w.on_request(&host, 2, &user("/v1/chat", "a"));
    assert_eq!(*host.request_headers.borrow(), [("accept-encoding".to_string(), "identity".to_string())]);
}

#[test]
#[wasm_bindgen_test]
fn a_gzip_answer_is_charged_the_usage_inside() {
    let (host, mut w) = admitted();
    let mut e = GzEncoder::new(Vec::new(), Compression::default());
    e.write_all(br#"{"choices":[],"usage":{"total_tokens":150000}}"#).unwrap();
    let wire = e.finish().unwrap();
    w.on_response_headers(&host, 1, &GZIP, false);
    assert_eq!(w.decoders.running(), 1);
    w.on_response_body(&host, 1, &wire[..10], false);
    w.on_response_body(&host, 1, &wire[10..], true);
    assert_eq!(w.decoders.running(), 0, "the decoder is freed with the body");
    assert_eq!(charged(&host, 1), 150_000);
    assert_eq!(host.metrics.get(0, Event::UsageUnreadable), 0);
}

#[test]
#[wasm_bindgen_test]
fn an_answer_in_an_encoding_the_filter_cannot_read_is_charged_max_counted_and_logged() {
    let (host, mut w) = admitted();
    w.on_response_headers(&host, 1, &BROTLI, false);
    assert_eq!(charged(&host, 1), 200_000);
    assert_eq!(host.metrics.get(0, Event::UsageUnreadable), 1);
    assert_eq!(
        *host.warnings.borrow(),
        ["ratelimit: the usage of 1 responses could not be read since the last such line (rule llm: content-encoding br cannot be decoded); they were charged 200000 units"]
    );
}

#[test]
#[wasm_bindgen_test]
fn a_stream_reset_right_after_its_usage_event_is_charged_that_usage() {
    let (host, mut w) = admitted();
    w.on_response_headers(&host, 1, &SSE, false);
    w.on_response_body(&host, 1, b"data: {\"choices\":[]}\n\ndata: {\"usage\":{\"total_tokens\":4321}}\n\n", false);
    w.on_stream_end(&host, 1);
    assert_eq!(charged(&host, 1), 4321);
    assert_eq!(host.metrics.get(0, Event::UsageMissing), 0);
}

#[test]
#[wasm_bindgen_test]
fn a_stream_reset_before_its_usage_is_charged_what_it_delivered() {
    let (host, mut w) = admitted();
    w.on_response_headers(&host, 1, &JSON, false);
    w.on_response_body(&host, 1, b"{\"choices\":[{\"message\":{\"content\":\"", false);
    for _ in 0..512 {
        w.on_response_body(&host, 1, &[b'x'; 1024], false);
    }
    w.on_stream_end(&host, 1);
    // 512 KB and 36 bytes at 4 bytes a unit (below max).
    assert_eq!(charged(&host, 1), (512 * 1024 + 36_u64).div_ceil(4));
    assert_eq!(host.metrics.get(0, Event::UsageMissing), 1);
    // An event stream: one unit per event, at least the default.
    let (host, mut w) = admitted();
    w.on_response_headers(&host, 1, &SSE, false);
    for _ in 0..300 {
        w.on_response_body(&host, 1, b"data: {\"choices\":[{\"delta\":{\"content\":\"tok\"}}]}\n\n", false);
    }
    w.on_stream_end(&host, 1);
    assert_eq!(charged(&host, 1), 300);
}

#[test]
#[wasm_bindgen_test]
fn an_error_answer_is_no_usage_report_and_is_charged_as_one_without_usage() {
    let (host, mut w) = admitted();
    w.on_response_headers(&host, 1, &TIMEOUT, false);
    w.on_response_body(&host, 1, b"upstream request timeout", true);
    assert_eq!(charged(&host, 1), 10, "the default, not max");
    assert_eq!((host.metrics.get(0, Event::UsageMissing), host.metrics.get(0, Event::UsageUnreadable)), (1, 0));
}
