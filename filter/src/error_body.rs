//! The body of a 429, in the format the rule's clients read: this
//! filter's own, OpenAI's (its SDKs raise `RateLimitError` with the
//! `error.message`), or Anthropic's.

use crate::config::ErrorBody;

/// What the limit that denied is, for the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Denied<'a> {
    /// The rule (`[a-z0-9_-]`: nothing to escape).
    pub rule: &'a str,
    /// The limit's value.
    pub limit: u64,
    /// Its window (ms); `None` for a concurrency limit.
    pub window_ms: Option<u64>,
    /// Whether it counts tokens (a cost), not requests.
    pub tokens: bool,
    /// Seconds to wait (the Retry-After).
    pub retry_after: u64,
}

/// A window as a person writes it: `1d`, `1h`, `90s`, `250ms`.
fn window_text(ms: u64) -> String {
    for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms >= size && ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// The sentence OpenAI's and Anthropic's formats carry.
fn message(d: &Denied<'_>) -> String {
    let what = match (d.window_ms, d.tokens) {
        (None, _) => format!("{} concurrent requests", d.limit),
        (Some(w), true) => format!("{} tokens per {}", d.limit, window_text(w)),
        (Some(w), false) => format!("{} requests per {}", d.limit, window_text(w)),
    };
    format!("Rate limit reached for rule {}: limit {what}. Please try again in {}s.", d.rule, d.retry_after)
}

/// The 429 body in `format`; `concurrency`: the denial was for streams at
/// once (the filter's own format says so with `"reason"`).
pub fn body(format: ErrorBody, d: &Denied<'_>) -> String {
    match format {
        ErrorBody::Ratelimit if d.window_ms.is_none() => format!(
            "{{\"error\":\"rate_limited\",\"rule\":\"{}\",\"retry_after\":{},\"reason\":\"concurrency\"}}",
            d.rule, d.retry_after
        ),
        ErrorBody::Ratelimit => {
            format!("{{\"error\":\"rate_limited\",\"rule\":\"{}\",\"retry_after\":{}}}", d.rule, d.retry_after)
        }
        ErrorBody::OpenAi => format!(
            "{{\"error\":{{\"message\":\"{}\",\"type\":\"{}\",\"param\":null,\"code\":\"rate_limit_exceeded\"}}}}",
            message(d),
            if d.tokens { "tokens" } else { "requests" }
        ),
        ErrorBody::Anthropic => {
            format!("{{\"type\":\"error\",\"error\":{{\"type\":\"rate_limit_error\",\"message\":\"{}\"}}}}", message(d))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    const TOKENS: Denied<'static> =
        Denied { rule: "llm", limit: 100_000, window_ms: Some(3_600_000), tokens: true, retry_after: 42 };

    #[test]
    #[wasm_bindgen_test]
    fn each_format_is_json_its_clients_parse() {
        assert_eq!(body(ErrorBody::Ratelimit, &TOKENS), r#"{"error":"rate_limited","rule":"llm","retry_after":42}"#);
        assert_eq!(
            body(ErrorBody::OpenAi, &TOKENS),
            r#"{"error":{"message":"Rate limit reached for rule llm: limit 100000 tokens per 1h. Please try again in 42s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#
        );
        let requests = Denied { tokens: false, window_ms: Some(90_000), ..TOKENS };
        assert_eq!(
            body(ErrorBody::Anthropic, &requests),
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"Rate limit reached for rule llm: limit 100000 requests per 90s. Please try again in 42s."}}"#
        );
        let streams = Denied { limit: 8, window_ms: None, ..TOKENS };
        assert_eq!(
            body(ErrorBody::Ratelimit, &streams),
            r#"{"error":"rate_limited","rule":"llm","retry_after":42,"reason":"concurrency"}"#
        );
        assert!(body(ErrorBody::OpenAi, &streams).contains("limit 8 concurrent requests"));
        for format in [ErrorBody::Ratelimit, ErrorBody::OpenAi, ErrorBody::Anthropic] {
            for d in [TOKENS, requests, streams] {
                assert!(crate::json::parse(body(format, &d).as_bytes()).is_ok(), "{format:?} {d:?}");
            }
        }
        assert_eq!(window_text(250), "250ms");
        assert_eq!(window_text(86_400_000), "1d");
    }
}
