//! `response_headers`: which rate-limit fields the client is sent.

use super::error::ConfigError;
use super::json::Result;
use crate::json::Value;

/// Which rate-limit fields go on responses (`Retry-After` always does on
/// a 429).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeaderStyle {
    /// `X-RateLimit-*` and `RateLimit-Limit/-Remaining/-Reset` (what most
    /// clients read today).
    pub legacy: bool,
    /// The IETF structured fields `RateLimit-Policy` and `RateLimit`
    /// (draft-ietf-httpapi-ratelimit-headers-11).
    pub ietf: bool,
}

impl HeaderStyle {
    /// The default: the legacy fields.
    pub const LEGACY: HeaderStyle = HeaderStyle { legacy: true, ietf: false };
}

const HELP: &str = "must be true, false, \"legacy\", \"ietf\", \"both\" or \"none\"";

/// Parses a `response_headers` value.
pub fn parse_style(v: &Value, path: &str) -> Result<HeaderStyle> {
    let (legacy, ietf) = match (v.as_bool(), v.as_str()) {
        (Some(true), _) | (_, Some("legacy")) => (true, false),
        (Some(false), _) | (_, Some("none")) => (false, false),
        (_, Some("ietf")) => (false, true),
        (_, Some("both")) => (true, true),
        _ => return Err(ConfigError::at(path, HELP)),
    };
    Ok(HeaderStyle { legacy, ietf })
}
