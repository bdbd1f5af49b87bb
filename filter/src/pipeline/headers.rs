//! The rate-limit fields of a response the filter lets through, and the
//! IETF fields of a 429.

use super::Verdict;
use crate::config::{Config, Cost, Counts};
use crate::ratelimit_fields::{policy_field, state_field, Policy, QuotaUnit};
use crate::response::{most_restrictive, rate_limit_headers, shadow_headers, Headers, Shown};

/// The fields of a response let through: the most restrictive limit of
/// the enforced rules (in the style of its rule), and, for shadow rules
/// that ask for it, what the client would have seen, as
/// `X-RateLimit-Shadow-*`.
pub(super) fn response_headers(config: &Config, verdicts: &[(usize, Verdict)], now: u64) -> Headers {
    let shown = |shadow: bool| -> Vec<Shown> {
        verdicts
            .iter()
            .filter(|(r, _)| config.rules[*r].shadow == shadow && (!shadow || config.rules[*r].shadow_headers))
            .flat_map(|(_, v)| v.shown().iter().copied())
            .collect()
    };
    let mut headers = Headers::new();
    let enforced = shown(false);
    if let Some(s) = most_restrictive(&enforced) {
        let style = s.policy.and_then(|p| config.rules.get(p.rule)).and_then(|r| r.headers).unwrap_or(config.headers);
        if style.legacy {
            headers.extend(rate_limit_headers(&s, now));
        }
        if style.ietf {
            headers.extend(ietf_fields(config, &enforced, &s));
        }
    }
    if let Some(s) = most_restrictive(&shown(true)) {
        headers.extend(shadow_headers(&s, now));
    }
    headers
}

/// `RateLimit-Policy` (every limit in `all` that counts requests) and
/// `RateLimit` (the state of `worst`). A limit counting a cost (tokens)
/// has no registered quota unit, so it is left out rather than announced
/// as requests.
pub(super) fn ietf_fields(config: &Config, all: &[Shown], worst: &Shown) -> Headers {
    let counts_requests = |rule: usize, limit: usize| -> Option<&str> {
        let r = config.rules.get(rule)?;
        let l = r.limits.get(limit)?;
        let requests = l.counts == Counts::Requests || r.cost == Cost::Fixed(1);
        requests.then_some(l.policy.as_str())
    };
    let mut policies = Vec::with_capacity(all.len());
    for s in all {
        let Some(p) = s.policy else { continue };
        let Some(name) = counts_requests(p.rule, p.limit) else { continue };
        let Some(window_ms) = config.rules[p.rule].limits.get(p.limit).map(|l| l.spec.window_ms) else { continue };
        if policies.iter().any(|q: &Policy<'_>| q.name == name) {
            continue;
        }
        policies.push(Policy {
            name,
            quota: s.limit,
            window_ms,
            unit: QuotaUnit::Requests,
            partition_key: p.partition,
        });
    }
    let mut headers = Headers::new();
    if let Some(field) = policy_field(&policies) {
        headers.push(("ratelimit-policy", field));
    }
    if let Some(name) = worst.policy.and_then(|p| counts_requests(p.rule, p.limit).map(|n| (n, p.partition))) {
        let d = &worst.decision;
        let until = if d.allowed { d.reset_ms } else { d.retry_after_ms.unwrap_or(d.reset_ms) };
        headers.push(("ratelimit", state_field(name.0, d.remaining, until, name.1)));
    }
    headers
}
