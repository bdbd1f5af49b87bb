//! The 429 of a refused request, with the fields its rule's style asks for.

use super::response_fields::{ietf_fields, Listed};
use super::vendor_fields;
use crate::algorithm::Algorithm;
use crate::config::{Config, Cost, Counts};
use crate::error_body::Denied;
use crate::response::{blocked, too_many_requests, LocalReply, PolicyRef, Shown};
use crate::time::Instant;

/// Whether `shown` is a concurrency limit's outcome.
pub(super) fn is_concurrency(config: &Config, shown: &Shown) -> bool {
    shown.policy.is_some_and(|p| {
        config.rules.get(p.rule).and_then(|r| r.limits.get(p.limit)).map(|l| l.spec.algorithm)
            == Some(Algorithm::Concurrency)
    })
}

/// How rule `r` refuses a request `worst` denies: 403 when an operator's
/// override blocks the client, else the 429 of `denial`.
pub(super) fn refusal(
    config: &Config,
    r: usize,
    worst: &Shown,
    all: &[Shown],
    now: Instant,
    random: u64,
) -> LocalReply {
    match config.rules.get(r) {
        Some(rule) if worst.outcome.blocked() => blocked(&rule.name),
        _ => denial(config, r, worst, all, now, random),
    }
}

/// The 429 of rule `r` denying `worst`, with the fields its style asks
/// for. `all` holds the outcomes of every limit decided for the request;
/// `RateLimit-Policy` names those and every limit of rule `r` (a denial
/// from the deny cache decided only one of them).
pub(super) fn denial(config: &Config, r: usize, worst: &Shown, all: &[Shown], now: Instant, random: u64) -> LocalReply {
    let rule = &config.rules[r];
    let style = rule.headers.unwrap_or(config.headers);
    let limit = worst.policy.and_then(|p| rule.limits.get(p.limit));
    // A concurrency limit has no window: its body says streams at once.
    let window_ms = if is_concurrency(config, worst) { None } else { Some(limit.map_or(0, |l| l.spec.window_ms)) };
    // Tokens: a limit counting a cost that is not one per request.
    let tokens = limit.is_some_and(|l| l.counts == Counts::Cost) && !matches!(rule.cost, Cost::Fixed(1));
    let body = |retry_after| {
        let denied = Denied { rule: &rule.name, limit: worst.limit, window_ms, tokens, retry_after };
        crate::error_body::body(rule.error_body, &denied)
    };
    let mut reply = too_many_requests(worst, now, style.legacy, random, config.retry_after_jitter_ppm, body);
    if let Some(vendor) = style.vendor {
        reply.headers.extend(vendor_fields::vendor_fields(config, vendor, all, now));
    }
    if style.ietf {
        let partition = worst.policy.and_then(|p| p.partition);
        let of_rule =
            rule.limits.iter().enumerate().map(|(i, l)| (PolicyRef { rule: r, limit: i, partition }, l.spec.limit));
        let listed: Vec<Listed> = all.iter().filter_map(|s| s.policy.map(|p| (p, s.limit))).chain(of_rule).collect();
        reply.headers.extend(ietf_fields(config, &listed, all, true));
    }
    reply
}
