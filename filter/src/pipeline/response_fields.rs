//! The rate-limit fields of a response the filter lets through, and the
//! IETF fields of any response.

use super::Verdict;
use crate::config::{Config, Cost, Counts};
use crate::ratelimit_fields::{policy_field, state_field, Policy, QuotaUnit};
use crate::response::{most_restrictive, rate_limit_headers, shadow_headers, Headers, PolicyRef, Shown};
use crate::time::Instant;

/// The fields of a response let through: the most restrictive limit of
/// the enforced rules (in the style of its rule), and, for shadow rules
/// that ask for it, what the client would have seen, as
/// `X-RateLimit-Shadow-*`.
pub(super) fn response_headers(config: &Config, verdicts: &[(usize, Verdict)], now: Instant) -> Headers {
    let shadowed = || -> Vec<Shown> {
        verdicts
            .iter()
            .filter(|(r, _)| config.rules[*r].shadow && config.rules[*r].shadow_headers)
            .flat_map(|(_, v)| v.shown().iter().copied())
            .collect()
    };
    let mut headers = Headers::new();
    // A concurrency limit is no rate: the fields describe the rate limits.
    let enforced: Vec<Shown> = verdicts
        .iter()
        .filter(|(r, _)| !config.rules[*r].shadow)
        .flat_map(|(_, v)| v.shown().iter().copied())
        .filter(|s| !super::is_concurrency(config, s))
        .collect();
    if let Some(s) = most_restrictive(&enforced) {
        let style = s.policy.and_then(|p| config.rules.get(p.rule)).and_then(|r| r.headers).unwrap_or(config.headers);
        if style.legacy {
            // The usual response's only fields: taken whole, not copied.
            headers = rate_limit_headers(&s, now);
        }
        if let Some(vendor) = style.vendor {
            headers.extend(super::vendor_fields::vendor_fields(config, vendor, &enforced, now));
        }
        if style.ietf {
            let listed: Vec<Listed> = enforced.iter().filter_map(|s| s.policy.map(|p| (p, s.limit))).collect();
            headers.extend(ietf_fields(config, &listed, &enforced, false));
        }
    }
    if let Some(s) = most_restrictive(&shadowed()) {
        headers.extend(shadow_headers(&s, now));
    }
    headers
}

/// A limit `RateLimit-Policy` may name: which, and its quota (for a
/// fallback bucket, this proxy's share).
pub(super) type Listed = (PolicyRef, u64);

/// The IETF fields:
/// - `RateLimit-Policy` names every limit of `listed` that counts requests,
///   once each, in order;
/// - `RateLimit` is the state of the most restrictive of those limits among
///   `states`. On a 429 (`refused`), only a limit that refused the request
///   qualifies: the state of another would not explain the refusal, and its
///   reset could come after the `Retry-After`, which draft-11 §6 asks
///   servers to avoid. So a 429 that a token limit alone gave carries
///   `RateLimit-Policy` and no `RateLimit`.
///
/// A limit counting a cost (tokens) is named in neither: draft-11 allows
/// only the quota units of its registry (§3.1.2, §10.3: requests,
/// content-bytes, concurrent-requests), and without `qu` a quota is read
/// as requests, so it is left out rather than announced as requests.
pub(super) fn ietf_fields(config: &Config, listed: &[Listed], states: &[Shown], refused: bool) -> Headers {
    let mut policies = Vec::with_capacity(listed.len());
    for &(p, quota) in listed {
        let Some((name, window_ms)) = counts_requests(config, p) else { continue };
        if policies.iter().any(|q: &Policy<'_>| q.name == name) {
            continue;
        }
        policies.push(Policy { name, quota, window_ms, unit: QuotaUnit::Requests, partition_key: p.partition });
    }
    let mut headers = Headers::new();
    if let Some(field) = policy_field(&policies) {
        headers.push(("ratelimit-policy", field));
    }
    let named: Vec<Shown> = states
        .iter()
        .filter(|s| s.policy.and_then(|p| counts_requests(config, p)).is_some() && !(refused && s.outcome.allowed))
        .copied()
        .collect();
    if let Some((s, p)) = most_restrictive(&named).and_then(|s| s.policy.map(|p| (s, p))) {
        if let Some((name, _)) = counts_requests(config, p) {
            let d = &s.outcome;
            let until = if d.allowed { d.reset_ms } else { d.retry_after_ms.unwrap_or(d.reset_ms) };
            headers.push(("ratelimit", state_field(name, d.remaining, until, p.partition)));
        }
    }
    headers
}

/// The policy name and window of limit `p`, if it counts requests: a limit
/// counting requests, or one counting the cost of a rule whose cost is 1.
fn counts_requests(config: &Config, p: PolicyRef) -> Option<(&str, u64)> {
    let r = config.rules.get(p.rule)?;
    let l = r.limits.get(p.limit)?;
    if l.spec.algorithm == crate::algorithm::Algorithm::Concurrency {
        return None;
    }
    let requests = l.counts == Counts::Requests || r.cost == Cost::Fixed(1);
    requests.then_some((l.policy.as_str(), l.spec.window_ms))
}

#[cfg(test)]
mod tests;
