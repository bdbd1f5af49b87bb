//! What the client sees: rate-limit headers, the 429 and the 503.

use crate::outcome::LimitOutcome;
use crate::ratelimit_fields::{retry_after_with_jitter, PartitionKey};
use crate::time::Instant;

/// One limit's outcome as the headers describe it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shown {
    /// The limit value (for a fallback bucket: this proxy's share).
    pub limit: u64,
    /// What the limit said.
    pub outcome: LimitOutcome,
    /// Which limit of which rule, for whom (the IETF fields name it).
    pub policy: Option<PolicyRef>,
}

/// Which configured limit a shown outcome is, and the client's partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyRef {
    /// The rule (index into the configuration's rules).
    pub rule: usize,
    /// The limit (index into the rule's limits).
    pub limit: usize,
    /// The client's partition key (a digest of its identity), when the
    /// rule sends the IETF fields.
    pub partition: Option<PartitionKey>,
}

/// A response the filter sends itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalReply {
    /// 400, 429 or 503.
    pub status: u32,
    /// Headers (lower-case names).
    pub headers: Headers,
    /// JSON body.
    pub body: String,
}

/// Header list (lower-case names).
pub type Headers = Vec<(&'static str, String)>;

/// The content type of every reply the filter sends.
fn json() -> String {
    "application/json".to_string()
}

fn ceil_seconds(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

/// Retry-After in whole seconds: rounded up, at least 1.
pub fn retry_after_seconds(d: &LimitOutcome) -> u64 {
    ceil_seconds(d.retry_after_ms.unwrap_or(d.reset_ms)).max(1)
}

/// The most restrictive of several outcomes: among denials, the one that
/// lasts longest; otherwise the least remaining (ties: the latest reset).
pub fn most_restrictive(shown: &[Shown]) -> Option<Shown> {
    let denied = shown.iter().filter(|s| !s.outcome.allowed);
    if let Some(worst) = denied.max_by_key(|s| (s.outcome.retry_after_ms.unwrap_or(u64::MAX), s.outcome.reset_ms)) {
        return Some(*worst);
    }
    shown.iter().min_by_key(|s| (s.outcome.remaining, u64::MAX - s.outcome.reset_ms)).copied()
}

/// X-RateLimit-* (Reset in Unix seconds) and RateLimit-* (Reset in seconds
/// from now): they differ on purpose.
pub fn rate_limit_headers(s: &Shown, now: Instant) -> Headers {
    let limit = s.limit.to_string();
    let remaining = s.outcome.remaining.to_string();
    vec![
        ("x-ratelimit-limit", limit.clone()),
        ("x-ratelimit-remaining", remaining.clone()),
        ("x-ratelimit-reset", ceil_seconds(now.after(s.outcome.reset_ms).ms()).to_string()),
        ("ratelimit-limit", limit),
        ("ratelimit-remaining", remaining),
        ("ratelimit-reset", ceil_seconds(s.outcome.reset_ms).to_string()),
    ]
}

/// `X-RateLimit-Shadow-*`: what a shadow rule would have shown.
pub fn shadow_headers(s: &Shown, now: Instant) -> Headers {
    vec![
        ("x-ratelimit-shadow-limit", s.limit.to_string()),
        ("x-ratelimit-shadow-remaining", s.outcome.remaining.to_string()),
        ("x-ratelimit-shadow-reset", ceil_seconds(now.after(s.outcome.reset_ms).ms()).to_string()),
    ]
}

/// The 429 of a denial shown by `s`, its body made by `body` from the
/// seconds it asks the client to wait; `random` and `jitter_ppm` spread
/// Retry-After (0: exact).
pub fn too_many_requests(
    s: &Shown,
    now: Instant,
    with_headers: bool,
    random: u64,
    jitter_ppm: u32,
    body: impl FnOnce(u64) -> String,
) -> LocalReply {
    let retry = retry_after_with_jitter(s.outcome.retry_after_ms.unwrap_or(s.outcome.reset_ms), jitter_ppm, random);
    let mut headers = vec![("content-type", json()), ("retry-after", retry.to_string())];
    if with_headers {
        headers.extend(rate_limit_headers(s, now));
    }
    LocalReply { status: 429, headers, body: body(retry) }
}

/// The 400 of a request the filter cannot decide: `error` names the
/// problem, `detail` says what to fix (both from the configuration, never
/// from the request).
pub fn bad_request(error: &str, rule: &str, detail: &str) -> LocalReply {
    refused(400, error, rule, detail)
}

/// A 4xx in the style of `bad_request` with another status (413, 408).
pub fn refused(status: u32, error: &str, rule: &str, detail: &str) -> LocalReply {
    // Names are [a-z0-9_-] and header names HTTP tokens: nothing to escape but quotes.
    let detail = detail.replace(['"', '\\'], "");
    LocalReply {
        status,
        headers: vec![("content-type", json())],
        body: format!("{{\"error\":\"{error}\",\"rule\":\"{rule}\",\"detail\":\"{detail}\"}}"),
    }
}

/// The 403 of a client an operator's override blocks on rule `rule`
/// (`lua/override.lua`): not a rate limit, so no Retry-After.
pub fn blocked(rule: &str) -> LocalReply {
    LocalReply {
        status: 403,
        headers: vec![("content-type", json())],
        body: format!("{{\"error\":\"blocked\",\"rule\":\"{rule}\"}}"),
    }
}

/// The 503 of a fail-closed rule whose store is unavailable.
pub fn unavailable() -> LocalReply {
    LocalReply {
        status: 503,
        headers: vec![("content-type", json()), ("retry-after", "1".to_string())],
        body: "{\"error\":\"rate_limiter_unavailable\"}".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn shown(allowed: bool, remaining: u64, reset_ms: u64, retry: u64) -> Shown {
        Shown {
            limit: 5,
            outcome: LimitOutcome { allowed, remaining, reset_ms, retry_after_ms: Some(retry), overridden: None },
            policy: None,
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn headers_give_unix_and_relative_resets_rounded_up() {
        let h = rate_limit_headers(&shown(true, 3, 1500, 0), Instant::from_ms(1_700_000_000_200));
        assert_eq!(
            h,
            vec![
                ("x-ratelimit-limit", "5".into()),
                ("x-ratelimit-remaining", "3".into()),
                ("x-ratelimit-reset", "1700000002".into()),
                ("ratelimit-limit", "5".into()),
                ("ratelimit-remaining", "3".into()),
                ("ratelimit-reset", "2".into()),
            ]
        );
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_429_rounds_retry_after_up_and_never_below_one() {
        let retry = |retry: u64| retry.to_string();
        let r = too_many_requests(&shown(false, 0, 900, 1), Instant::from_ms(0), false, 0, 0, retry);
        assert_eq!(r.status, 429);
        assert_eq!(r.headers, vec![("content-type", "application/json".into()), ("retry-after", "1".into())]);
        assert_eq!(r.body, "1");
        let r = too_many_requests(&shown(false, 0, 9000, 2001), Instant::from_ms(0), true, u64::MAX, 0, retry);
        assert_eq!(r.body, "3");
        assert_eq!(r.headers.len(), 8);
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_most_restrictive_limit_speaks() {
        let a = shown(true, 7, 1000, 0);
        let b = shown(true, 2, 500, 0);
        let c = shown(true, 2, 900, 0);
        assert_eq!(most_restrictive(&[a, b, c]), Some(c), "least remaining, then latest reset");
        let d = shown(false, 0, 100, 50);
        let e = shown(false, 0, 100, 700);
        assert_eq!(most_restrictive(&[a, d, e, b]), Some(e), "the denial that lasts longest");
        assert_eq!(most_restrictive(&[]), None);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_blocked_client_is_forbidden_with_its_rule_named() {
        let r = blocked("api");
        assert_eq!((r.status, r.body.as_str()), (403, r#"{"error":"blocked","rule":"api"}"#));
        assert_eq!(r.headers, vec![("content-type", "application/json".into())]);
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_503_is_not_a_rate_limit() {
        let r = unavailable();
        assert_eq!(r.status, 503);
        assert_eq!(r.body, r#"{"error":"rate_limiter_unavailable"}"#);
        assert!(r.headers.contains(&("retry-after", "1".into())));
    }
}
