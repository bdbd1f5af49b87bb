//! The rate-limit fields LLM API clients read (`response_headers:
//! "openai"` or `"anthropic"`): one group for the tightest limit counting
//! requests and one for the tightest counting tokens (a cost other than
//! one per request), each with its limit, what remains and when it resets.

use crate::config::{Config, Cost, Counts, Vendor};
use crate::response::{most_restrictive, Headers, Shown};
use crate::time::Instant;

/// The fields of `vendor` for the outcomes `shown` at `now_ms`.
pub(super) fn vendor_fields(config: &Config, vendor: Vendor, shown: &[Shown], now: Instant) -> Headers {
    let now_ms = now.ms();
    let mut headers = Headers::new();
    for tokens in [false, true] {
        let group: Vec<Shown> = shown.iter().filter(|s| counts_tokens(config, s) == Some(tokens)).copied().collect();
        let Some(s) = most_restrictive(&group) else { continue };
        let d = &s.outcome;
        let wait = if d.allowed { d.reset_ms } else { d.retry_after_ms.unwrap_or(d.reset_ms) };
        let (limit, remaining) = (s.limit.to_string(), d.remaining.to_string());
        match vendor {
            Vendor::OpenAi => {
                headers.push((openai_name("limit", tokens), limit));
                headers.push((openai_name("remaining", tokens), remaining));
                headers.push((openai_name("reset", tokens), go_duration(wait)));
            }
            Vendor::Anthropic => {
                headers.push((anthropic_name("limit", tokens), limit));
                headers.push((anthropic_name("remaining", tokens), remaining));
                headers.push((anthropic_name("reset", tokens), rfc3339(now_ms.saturating_add(wait))));
            }
        }
    }
    headers
}

fn openai_name(field: &str, tokens: bool) -> &'static str {
    match (field, tokens) {
        ("limit", false) => "x-ratelimit-limit-requests",
        ("remaining", false) => "x-ratelimit-remaining-requests",
        ("reset", false) => "x-ratelimit-reset-requests",
        ("limit", true) => "x-ratelimit-limit-tokens",
        ("remaining", true) => "x-ratelimit-remaining-tokens",
        _ => "x-ratelimit-reset-tokens",
    }
}

fn anthropic_name(field: &str, tokens: bool) -> &'static str {
    match (field, tokens) {
        ("limit", false) => "anthropic-ratelimit-requests-limit",
        ("remaining", false) => "anthropic-ratelimit-requests-remaining",
        ("reset", false) => "anthropic-ratelimit-requests-reset",
        ("limit", true) => "anthropic-ratelimit-tokens-limit",
        ("remaining", true) => "anthropic-ratelimit-tokens-remaining",
        _ => "anthropic-ratelimit-tokens-reset",
    }
}

/// Whether the limit of `s` counts tokens (`Some(true)`) or requests
/// (`Some(false)`); `None` for a concurrency limit (no rate) or one not
/// found.
fn counts_tokens(config: &Config, s: &Shown) -> Option<bool> {
    let p = s.policy?;
    let r = config.rules.get(p.rule)?;
    let l = r.limits.get(p.limit)?;
    if l.spec.algorithm == crate::algorithm::Algorithm::Concurrency {
        return None;
    }
    Some(l.counts == Counts::Cost && r.cost != Cost::Fixed(1))
}

/// A duration as Go prints one, as OpenAI's fields carry it: `120ms`,
/// `1.5s`, `6m0s`, `1h2m3s`.
fn go_duration(ms: u64) -> String {
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let (h, m, s, frac) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1_000 % 60, ms % 1_000);
    let secs = if frac == 0 { format!("{s}s") } else { format!("{s}.{}s", format!("{frac:03}").trim_end_matches('0')) };
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

/// `ms` since the epoch as RFC 3339 in UTC, to the second, rounded up (a
/// client waiting until then finds the limit reset).
fn rfc3339(ms: u64) -> String {
    let secs = ms.div_ceil(1_000);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rest / 3_600, rest / 60 % 60, rest % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn resets_read_as_the_vendors_write_them() {
        assert_eq!(go_duration(120), "120ms");
        assert_eq!(go_duration(1_500), "1.5s");
        assert_eq!(go_duration(360_000), "6m0s");
        assert_eq!(go_duration(3_723_000), "1h2m3s");
        assert_eq!(go_duration(61_250), "1m1.25s");
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000_001), "2023-11-14T22:13:21Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
    }
}
