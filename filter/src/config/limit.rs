//! `rules[].limits[]`: one limit, its algorithm and what it counts.

use super::duration::{parse_ms, DURATION_HELP};
use super::error::ConfigError;
use super::json::{uint, Obj, Result};
use crate::algorithm::Algorithm;
use crate::fingerprint::fingerprint;
use crate::json::Value;
use crate::spec::LimitSpec;

/// The largest sliding_log limit: its sorted set holds one entry per request.
pub const SLIDING_LOG_MAX: u64 = 10_000;
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

const LIMIT_FIELDS: &[&str] = &["algorithm", "limit", "window", "burst", "counts", "staggered"];

/// Parses `path` (one entry of `limits`); `fingerprint_parts` identify the
/// rule and its cost, mixed into the limit's fingerprint.
pub fn parse_limit(v: &Value, path: &str, fingerprint_parts: &[&[u8]]) -> Result<Limit> {
    let o = Obj::new(v, path, LIMIT_FIELDS)?;
    let algorithm = match o.str("algorithm")? {
        None => Algorithm::SlidingWindow,
        Some(a) => Algorithm::from_name(a).ok_or_else(|| {
            ConfigError::at(
                &o.path_of("algorithm"),
                "must be one of sliding_window, fixed_window, token_bucket, sliding_log, gcra",
            )
        })?,
    };
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
    let mut bytes = [0u8; 40];
    for (chunk, n) in bytes.chunks_mut(8).zip(numbers) {
        chunk.copy_from_slice(&n.to_le_bytes());
    }
    let mut parts: Vec<&[u8]> = fingerprint_parts.to_vec();
    parts.push(algorithm.code().as_bytes());
    parts.push(&bytes);
    Ok(Limit { spec, counts, staggered, policy: String::new(), fingerprint: fingerprint(&parts) })
}
