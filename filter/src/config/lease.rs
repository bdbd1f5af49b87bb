//! `rules[].lease`: `{"max_units": N, "max_age": "<duration>"}`. A hot
//! client's requests are then admitted in the proxy from units the store
//! counted in advance (see `crate::lease`). Refused where a leased unit
//! could not be counted exactly before it is spent: a `sliding_log` limit
//! (its log holds each admitted request with its own time), a cost that
//! is not the same integer for every request, a shadow rule.

use super::duration::{parse_ms, DURATION_HELP};
use super::error::ConfigError;
use super::json::{Obj, Result};
use crate::json::Value;

/// Requests one lease admits at most, whatever `max_units` says.
pub const MAX_LEASE_UNITS: u64 = 1_000_000;

/// A rule's lease settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseSettings {
    /// Requests one lease admits at most.
    pub max_units: u64,
    /// How long a lease holds at most (ms).
    pub max_age_ms: u64,
}

/// Parses `rules[i].lease` (the caller checks it against the rule).
pub fn parse_lease(v: &Value, path: &str) -> Result<LeaseSettings> {
    let o = Obj::new(v, path, &["max_units", "max_age"])?;
    let max_units = o
        .uint("max_units", 1, MAX_LEASE_UNITS)?
        .ok_or_else(|| ConfigError::at(&o.path_of("max_units"), "is required: the most requests one lease admits"))?;
    let age = o.required_str("max_age")?;
    let max_age_ms = parse_ms(age).ok_or_else(|| ConfigError::at(&o.path_of("max_age"), DURATION_HELP))?;
    if !(10..=3_600_000).contains(&max_age_ms) {
        return Err(ConfigError::at(&o.path_of("max_age"), "must be from 10ms to 1h"));
    }
    Ok(LeaseSettings { max_units, max_age_ms })
}
