//! The IETF RateLimit fields, `RateLimit-Policy` and `RateLimit`, exactly as
//! draft-ietf-httpapi-ratelimit-headers-11 (23 May 2026) defines them: each
//! an RFC 9651 List of Items whose value names a quota policy and whose
//! parameters carry the numbers. The fields' syntax has not changed since
//! draft-08; a later revision (draft-12 appeared in November 2026) must be
//! checked against the tests here, which pin draft-11's exact strings.
//!
//! ```text
//! RateLimit-Policy: "api/1m";q=100;w=60;pk=:9N6ubKYHmdw=:, "api/1d";q=10000;w=86400;pk=:9N6ubKYHmdw=:
//! RateLimit: "api/1m";r=99;t=60;pk=:9N6ubKYHmdw=:
//! ```
//!
//! The choices, and why:
//! - **Names are sf-strings** (§3: "The Item value MUST be a String"), one
//!   per limit, `<rule>/<window>` ([`policy_name`]): stable while the limit
//!   keeps its counters (changing its value keeps the name; changing its
//!   window starts a new policy, as it starts new keys), readable, and
//!   unique across the rules a request matched.
//! - **Parameter order** follows the draft's examples: `q`, `qu`, `w`, `pk`
//!   and `r`, `t`, `pk`. Lists are joined with `, ` (RFC 9651 §4.1.1).
//! - **Integers** are clamped to 15 digits (RFC 9651's range). `q` and `r`
//!   are required, so clamping beats omitting; a clamped `q` or `r` only
//!   understates, which §7.2 allows; no real window or reset gets there.
//! - **`w`** is whole seconds, non-zero, "sub-second precision is not
//!   supported" (§3.1.3): a window in ms is rounded UP, and `q` kept. So
//!   250ms → `w=1`, 1500ms → `w=2`: the advertised rate `q/w` never exceeds
//!   the real one and a burst of `q` is still admitted, whereas rounding
//!   down is invalid (0) and scaling `q` up to a second would advertise
//!   bursts the limiter refuses.
//! - **`t`** is delay-seconds (§4.1.2), rounded UP like Retry-After: a
//!   client that waits `t` is never early.
//! - **`qu`** is omitted for requests: it is the default (§3.1), and that
//!   also avoids the draft's own inconsistency (§3.1.2 says `requests`, its
//!   registry table in §10.3 says `request`). See [`QuotaUnit`].
//! - **`pk`** is a [`PartitionKey`]: a digest, never the identity.
//! - **`RateLimit` has one item**, the most restrictive policy: §B.1.2
//!   lets a server omit the others.

mod jitter;
pub mod sf;

pub use jitter::retry_after_with_jitter;
pub use sf::INTEGER_MAX;

use crate::digest::sha256;

/// A quota unit of the draft's registry (§3.1.2, §10.3).
///
/// There is no registered unit for LLM tokens, and `qu` must be a value
/// of the registry (§3.1.2), which grows only by registration with a
/// specification (§10.3): a token budget has no truthful `qu`. Omitting
/// `qu` would claim requests, and so would a vendor-prefixed parameter to a
/// client that ignores it (§3.1: other parameters are comments), so a token
/// limit is left out of the fields rather than sent as `Requests`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaUnit {
    /// The default: `qu` is omitted.
    Requests,
    /// `qu="content-bytes"`.
    ContentBytes,
    /// `qu="concurrent-requests"`.
    ConcurrentRequests,
}

impl QuotaUnit {
    /// The `qu` value, `None` for the default.
    fn parameter(self) -> Option<&'static str> {
        match self {
            QuotaUnit::Requests => None,
            QuotaUnit::ContentBytes => Some("content-bytes"),
            QuotaUnit::ConcurrentRequests => Some("concurrent-requests"),
        }
    }
}

/// A partition key (`pk`): the first 8 bytes of SHA-256 of
/// `"ratelimit.pk\0"` followed by the client's identity (as the filter
/// builds it: escaped, parts joined by `~~`). It can only be built from a
/// digest, so the raw identity (an address, an API key) never reaches a
/// header.
///
/// The prefix keeps it apart from the digests the filter uses internally
/// (deny-cache fingerprints, the `~H` form of long identities). §6.1 asks
/// servers to document how keys are made, so clients can predict them:
/// this doc is that. 8 bytes tell a client's partitions apart; collisions
/// would only mislabel a hint. Note what a hash does not do: a low-entropy
/// identity (an IPv4 address) can be recovered from its key by trying
/// every value, so the key is a pseudonym, not a secret. It goes to the
/// client whose identity it is; where intermediaries' logs matter, leave
/// `pk` out (it is optional).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PartitionKey([u8; 8]);

impl PartitionKey {
    /// The partition key of `identity`.
    pub fn of(identity: &str) -> PartitionKey {
        let mut msg = Vec::with_capacity(13 + identity.len());
        msg.extend_from_slice(b"ratelimit.pk\0");
        msg.extend_from_slice(identity.as_bytes());
        let mut key = [0u8; 8];
        key.copy_from_slice(&sha256(&msg)[..8]);
        PartitionKey(key)
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8; 8] {
        &self.0
    }
}

/// One quota policy: one limit that applied to the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy<'a> {
    /// The policy's name, from [`policy_name`].
    pub name: &'a str,
    /// The quota (`q`) in `unit`s per window.
    pub quota: u64,
    /// The window in ms; sent as `w` in whole seconds, rounded up.
    pub window_ms: u64,
    /// The quota unit.
    pub unit: QuotaUnit,
    /// The partition key, if the field should carry one.
    pub partition_key: Option<PartitionKey>,
}

/// The policy name of a rule's limit: `<rule>/<window>`, the window in the
/// largest unit that states it exactly (`250ms`, `90s`, `1m`, `1h`, `2d`),
/// e.g. `api/1m`. Rule names are `[a-z0-9_-]`, so `/` separates without
/// ambiguity and the name needs no escaping.
///
/// A rule may have two limits with the same window (different algorithms):
/// for those pass `algorithm` (e.g. `Some("token_bucket")`) to get
/// `api/1m/token_bucket`; pass `None` otherwise, so the usual name stays
/// short. A limit's name must be the same in every response (§3: the field
/// "SHOULD remain consistent"), so decide once, at configuration.
pub fn policy_name(rule: &str, window_ms: u64, algorithm: Option<&str>) -> String {
    const UNITS: [(u64, &str); 4] = [(86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1000, "s")];
    let (count, unit) = UNITS
        .iter()
        .find(|(ms, _)| window_ms > 0 && window_ms % ms == 0)
        .map_or((window_ms, "ms"), |&(ms, unit)| (window_ms / ms, unit));
    let mut name = format!("{rule}/{count}{unit}");
    if let Some(algorithm) = algorithm {
        name.push('/');
        name.push_str(algorithm);
    }
    name
}

/// The `RateLimit-Policy` value for `policies`, in their order, or `None`
/// when there are none (the field is a non-empty List, §3: omit it).
pub fn policy_field(policies: &[Policy<'_>]) -> Option<String> {
    if policies.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(48 * policies.len());
    for (i, p) in policies.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        sf::string(&mut out, p.name);
        out.push_str(";q=");
        sf::integer(&mut out, p.quota);
        if let Some(unit) = p.unit.parameter() {
            out.push_str(";qu=");
            sf::string(&mut out, unit);
        }
        out.push_str(";w=");
        sf::integer(&mut out, ceil_seconds(p.window_ms).max(1));
        partition_key(&mut out, p.partition_key);
    }
    Some(out)
}

/// The `RateLimit` value: policy `name` has `remaining` units left (`r`),
/// and `reset_ms` from now (`t`, seconds rounded up) it is fully available
/// again.
///
/// §6: with a Retry-After in the same response, Retry-After must not be
/// earlier than `t`. On a 429, pass the denial's retry time as `reset_ms`;
/// [`retry_after_with_jitter`] only ever adds to it.
pub fn state_field(name: &str, remaining: u64, reset_ms: u64, partition_key: Option<PartitionKey>) -> String {
    let mut out = String::with_capacity(48);
    sf::string(&mut out, name);
    out.push_str(";r=");
    sf::integer(&mut out, remaining);
    out.push_str(";t=");
    sf::integer(&mut out, ceil_seconds(reset_ms));
    self::partition_key(&mut out, partition_key);
    out
}

fn partition_key(out: &mut String, key: Option<PartitionKey>) {
    if let Some(key) = key {
        out.push_str(";pk=");
        sf::byte_sequence(out, key.as_bytes());
    }
}

fn ceil_seconds(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

#[cfg(test)]
mod tests;
