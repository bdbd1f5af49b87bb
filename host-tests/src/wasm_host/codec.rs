//! What Envoy's codec does to a request's field lines before any filter
//! sees them: a repeated line of one of Envoy's inline headers is appended
//! to the first with a comma (`HeaderMapImpl::addViaMove`), so the filter
//! sees ONE `x-forwarded-for: a,b` for two lines; any other repeated name
//! stays as separate lines, in order.

use super::header_map::HeaderMap;

/// The request headers Envoy's request header map holds inline
/// (`INLINE_REQ_HEADERS` and `INLINE_REQ_RESP_HEADERS` in Envoy's
/// `envoy/http/header_map.h`), lower case.
const INLINE_REQUEST_HEADERS: [&str; 46] = [
    // Request and response.
    "connection",
    "content-type",
    "x-envoy-decorator-operation",
    "keep-alive",
    "proxy-connection",
    "proxy-status",
    "x-request-id",
    "transfer-encoding",
    "upgrade",
    "via",
    "content-length",
    "x-envoy-attempt-count",
    // Request only.
    "x-client-trace-id",
    "x-envoy-downstream-service-cluster",
    "x-envoy-downstream-service-node",
    "x-envoy-external-address",
    "x-envoy-force-trace",
    "x-envoy-hedge-on-per-try-timeout",
    "x-envoy-internal",
    "x-envoy-ip-tags",
    "x-envoy-retry-on",
    "x-envoy-retry-grpc-on",
    "x-envoy-retriable-status-codes",
    "x-envoy-retriable-header-names",
    "x-envoy-original-path",
    "x-envoy-original-url",
    "x-envoy-upstream-alt-stat-name",
    "x-envoy-upstream-rq-timeout-alt-response",
    "expect",
    "x-forwarded-client-cert",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "grpc-timeout",
    ":authority",
    ":method",
    ":path",
    ":protocol",
    ":scheme",
    "te",
    "user-agent",
    "x-envoy-expected-rq-timeout-ms",
    "x-envoy-max-retries",
    "x-envoy-upstream-rq-timeout-ms",
    "x-envoy-upstream-rq-per-try-timeout-ms",
    "x-envoy-upstream-stream-duration-ms",
];

fn inline(name: &[u8]) -> bool {
    INLINE_REQUEST_HEADERS.iter().any(|h| h.as_bytes() == name)
}

/// The request header map a filter sees for these field lines.
pub fn request_map(lines: &HeaderMap) -> HeaderMap {
    let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(lines.len());
    for (name, value) in lines.lines() {
        match out.iter_mut().find(|(n, _)| n == name).filter(|_| inline(name)) {
            Some((_, first)) => {
                first.push(b',');
                first.extend_from_slice(value);
            }
            None => out.push((name.clone(), value.clone())),
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_headers_are_joined_others_stay_separate() {
        let sent = HeaderMap::from_text(&[
            ("x-forwarded-for", "203.0.113.5"),
            ("x-api-key", "k1"),
            ("x-forwarded-for", "198.51.100.7"),
            ("x-api-key", "k2"),
        ]);
        let seen = request_map(&sent);
        assert_eq!(
            seen.to_text(),
            [
                ("x-forwarded-for".to_string(), "203.0.113.5,198.51.100.7".to_string()),
                ("x-api-key".to_string(), "k1".to_string()),
                ("x-api-key".to_string(), "k2".to_string())
            ]
        );
    }
}
