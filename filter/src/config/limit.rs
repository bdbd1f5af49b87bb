//! `rules[].limits[]`: one limit, its algorithm and what it counts.

use super::duration::{parse_ms, DURATION_HELP};
use super::error::ConfigError;
use super::json::{uint, Obj, Result};
use crate::algorithm::Algorithm;
use crate::fingerprint::fingerprint;
use crate::json::Value;
use crate::spec::LimitSpec;

/// The largest sliding_log limit: its sorted set holds one entry per request.
pub const SLIDING_LOG_MAX: u64 = crate::spec::SLIDING_LOG_MAX;
/// limit x window and burst x window must stay exact in the script's doubles.
pub const MAX_EXACT: u64 = 1 << 53;

/// What a limit counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Counts {
    /// Each request, 1.
    Requests,
    /// The rule's cost (tokens, bytes, ...: whatever the cost measures).
    Cost,
}

/// One limit of a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    /// Its parameters as the script takes them.
    pub spec: LimitSpec,
    /// What it counts.
    pub counts: Counts,
    /// fixed_window only: each client's windows start at its own offset,
    /// so resets do not all fire on one instant.
    pub staggered: bool,
    /// Its name in the IETF `RateLimit-Policy` field (`<rule>/<window>`).
    pub policy: String,
    /// Identifies this limit with these exact parameters (and the rule's
    /// domain, name and cost): a changed limit never matches old entries of
    /// the deny cache or the fallback buckets.
    pub fingerprint: u64,
}

impl Limit {
    /// The units a request can hold at most: the bucket (token_bucket,
    /// gcra) or the limit.
    pub fn capacity(&self) -> u64 {
        match self.spec.algorithm {
            Algorithm::TokenBucket | Algorithm::Gcra => self.spec.burst,
            _ => self.spec.limit,
        }
    }
}

const LIMIT_FIELDS: &[&str] = &["algorithm", "limit", "window", "burst", "counts", "staggered", "max_hold"];

/// How long a concurrency permit lives unrenewed when the config says
/// nothing: a proxy that dies frees its clients' slots within this; a
/// live one renews each slot every third of it.
pub const DEFAULT_MAX_HOLD_MS: u64 = 60_000;
/// The shortest `max_hold`: renewals every third of it must reach the
/// store in time on a loaded proxy.
pub const MIN_MAX_HOLD_MS: u64 = 1_000;
/// The longest `max_hold`: a day.
pub const MAX_MAX_HOLD_MS: u64 = 86_400_000;

/// Parses `path` (one entry of `limits`); `fingerprint_parts` identify the
/// rule and its cost, mixed into the limit's fingerprint.
pub fn parse_limit(v: &Value, path: &str, fingerprint_parts: &[&[u8]]) -> Result<Limit> {
    let o = Obj::new(v, path, LIMIT_FIELDS)?;
    let algorithm = match o.str("algorithm")? {
        None => Algorithm::SlidingWindow,
        Some(a) => Algorithm::from_name(a).ok_or_else(|| {
            ConfigError::at(
                &o.path_of("algorithm"),
                "must be one of sliding_window, fixed_window, token_bucket, sliding_log, gcra, concurrency",
            )
        })?,
    };
    if algorithm == Algorithm::Concurrency {
        return parse_concurrency(&o, fingerprint_parts);
    }
    if o.value("max_hold").is_some() {
        return Err(ConfigError::at(&o.path_of("max_hold"), "applies to concurrency only"));
    }
    let limit = match o.value("limit") {
        None => return Err(ConfigError::at(&o.path_of("limit"), "is required")),
        Some(v) => uint(v, &o.path_of("limit"), 1, MAX_EXACT)?,
    };
    let window_text = o.required_str("window")?;
    let window_ms = parse_ms(window_text).ok_or_else(|| ConfigError::at(&o.path_of("window"), DURATION_HELP))?;
    let burst = match (o.uint("burst", 1, MAX_EXACT)?, algorithm) {
        (None, a) => a.default_burst(limit),
        (Some(b), Algorithm::TokenBucket | Algorithm::Gcra) => b,
        (Some(_), _) => {
            return Err(ConfigError::at(&o.path_of("burst"), "applies to token_bucket and gcra only"));
        }
    };
    if algorithm == Algorithm::SlidingLog && limit > SLIDING_LOG_MAX {
        return Err(ConfigError::at(
            &o.path_of("limit"),
            format!("sliding_log keeps one entry per request: at most {SLIDING_LOG_MAX}"),
        ));
    }
    if limit.saturating_mul(window_ms) >= MAX_EXACT || burst.saturating_mul(window_ms) >= MAX_EXACT {
        return Err(ConfigError::at(path, "limit (or burst) times the window in ms must stay below 2^53"));
    }
    let counts = match o.str("counts")? {
        None | Some("cost") => Counts::Cost,
        Some("requests") => Counts::Requests,
        Some(_) => return Err(ConfigError::at(&o.path_of("counts"), "must be \"cost\" or \"requests\"")),
    };
    let staggered = o.bool("staggered")?.unwrap_or(false);
    if staggered && algorithm != Algorithm::FixedWindow {
        return Err(ConfigError::at(&o.path_of("staggered"), "applies to fixed_window only"));
    }
    let spec = LimitSpec { algorithm, limit, window_ms, burst };
    let numbers = [limit, window_ms, burst, counts as u64, u64::from(staggered)];
    let fingerprint = limit_fingerprint(fingerprint_parts, algorithm, &numbers);
    Ok(Limit { spec, counts, staggered, policy: String::new(), fingerprint })
}

/// A limit's fingerprint: its rule's parts, its algorithm's code, and its
/// parameters as little-endian u64s.
fn limit_fingerprint(fingerprint_parts: &[&[u8]], algorithm: Algorithm, numbers: &[u64]) -> u64 {
    let bytes: Vec<u8> = numbers.iter().flat_map(|n| n.to_le_bytes()).collect();
    let mut parts: Vec<&[u8]> = fingerprint_parts.to_vec();
    parts.push(algorithm.code().as_bytes());
    parts.push(&bytes);
    fingerprint(&parts)
}

/// A concurrency limit: `limit` streams in flight at once, each slot
/// living `max_hold` unrenewed. It has no window, burst or cost: it counts
/// streams.
fn parse_concurrency(o: &Obj<'_>, fingerprint_parts: &[&[u8]]) -> Result<Limit> {
    for field in ["window", "burst", "counts", "staggered"] {
        if o.value(field).is_some() {
            return Err(ConfigError::at(
                &o.path_of(field),
                "does not apply to concurrency (it counts streams in flight)",
            ));
        }
    }
    let limit = match o.value("limit") {
        None => return Err(ConfigError::at(&o.path_of("limit"), "is required")),
        Some(v) => uint(v, &o.path_of("limit"), 1, SLIDING_LOG_MAX)?,
    };
    let max_hold_ms = match o.str("max_hold")? {
        None => DEFAULT_MAX_HOLD_MS,
        Some(text) => parse_ms(text)
            .filter(|ms| (MIN_MAX_HOLD_MS..=MAX_MAX_HOLD_MS).contains(ms))
            .ok_or_else(|| ConfigError::at(&o.path_of("max_hold"), "must be a duration from 1s to 24h"))?,
    };
    let spec = LimitSpec { algorithm: Algorithm::Concurrency, limit, window_ms: max_hold_ms, burst: 1 };
    let fingerprint = limit_fingerprint(fingerprint_parts, Algorithm::Concurrency, &[limit, max_hold_ms]);
    Ok(Limit { spec, counts: Counts::Requests, staggered: false, policy: String::new(), fingerprint })
}
