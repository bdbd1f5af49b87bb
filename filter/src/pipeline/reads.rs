//! What the pipeline reads from a request besides its identity: a cost
//! the caller states, a staggered window's offset, a cached denial; and
//! how a key part is named in a 400.

use super::PolicyRef;
use crate::config::{KeyPart, Rule};
use crate::deny_cache::DenyCache;
use crate::fingerprint::{entry_fingerprint, IdentityDigest};
use crate::outcome::{LimitOutcome, Overridden};
use crate::ratelimit_fields::PartitionKey;
use crate::request::{one_member, OneValue, Request, RequestSource};
use crate::response::Shown;
use crate::shared::SharedData;
use crate::time::Instant;

/// The offset of a staggered fixed window for one client: stable, spread
/// uniformly over the window by the identity's digest.
pub(super) fn window_offset(limit_fingerprint: u64, digest: &IdentityDigest, window_ms: u64) -> u64 {
    entry_fingerprint(limit_fingerprint, digest) % window_ms.max(1)
}

/// A request-header cost: digits only, 1..=max; `default` when absent.
pub(super) fn header_cost<S: RequestSource + ?Sized>(
    req: &Request<'_, S>,
    name: &str,
    max: u64,
    default: u64,
) -> Option<u64> {
    match one_member(req.headers().lines(name)) {
        OneValue::Absent => Some(default),
        OneValue::One(v) if !v.is_empty() && v.len() <= 10 && v.iter().all(u8::is_ascii_digit) => {
            std::str::from_utf8(v).ok()?.parse::<u64>().ok().filter(|c| (1..=max).contains(c))
        }
        _ => None,
    }
}

/// What a key part is called in a 400's body.
pub(super) fn part_name(part: &KeyPart) -> String {
    match part {
        KeyPart::Header(n) => format!("header:{n}"),
        KeyPart::HeaderRaw(n) => format!("header_raw:{n}"),
        KeyPart::Query(n) => format!("query:{n}"),
        KeyPart::ClientIp => "client_ip".into(),
        KeyPart::Path | KeyPart::PathIgnoreCase => "path".into(),
        KeyPart::Method => "method".into(),
        KeyPart::Authority => "authority".into(),
        KeyPart::Literal(t) => format!("literal:{t}"),
        KeyPart::Body(field) => format!("body:{field}"),
    }
}

/// The cached denial of any of `rule`'s limits for `identity`, if one is in force.
pub(super) fn cached_denial<S: SharedData + ?Sized>(
    cache: &DenyCache<'_, S>,
    r: usize,
    rule: &Rule,
    identity: &IdentityDigest,
    partition: Option<PartitionKey>,
    now: Instant,
) -> Option<Shown> {
    rule.limits.iter().enumerate().find_map(|(i, l)| {
        let e = cache.lookup(entry_fingerprint(l.fingerprint, identity), now)?;
        let outcome = LimitOutcome {
            allowed: false,
            remaining: e.remaining,
            reset_ms: e.reset_at.since(now),
            retry_after_ms: Some(e.deny_until.since(now)),
            overridden: e.limit.map(|limit| Overridden { limit, reset: false }),
        };
        Some(Shown {
            limit: outcome.limit_or(l.spec.limit),
            outcome,
            policy: Some(PolicyRef { rule: r, limit: i, partition }),
        })
    })
}
