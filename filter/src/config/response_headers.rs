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
    /// Vendor fields an LLM API's clients read (OpenAI's or Anthropic's).
    pub vendor: Option<Vendor>,
}

/// Whose rate-limit fields (`response_headers: "openai"` or `"anthropic"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vendor {
    /// `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, the reset
    /// as a duration (`6m0s`).
    OpenAi,
    /// `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`,
    /// the reset as an RFC 3339 instant.
    Anthropic,
}

impl HeaderStyle {
    /// The default: the legacy fields.
    pub const LEGACY: HeaderStyle = HeaderStyle { legacy: true, ietf: false, vendor: None };
}

const HELP: &str = "must be true, false, \"legacy\", \"ietf\", \"both\", \"none\", \"openai\" or \"anthropic\"";

/// Parses a `response_headers` value.
pub fn parse_style(v: &Value, path: &str) -> Result<HeaderStyle> {
    let (legacy, ietf, vendor) = match (v.as_bool(), v.as_str()) {
        (Some(true), _) | (_, Some("legacy")) => (true, false, None),
        (Some(false), _) | (_, Some("none")) => (false, false, None),
        (_, Some("ietf")) => (false, true, None),
        (_, Some("both")) => (true, true, None),
        (_, Some("openai")) => (false, false, Some(Vendor::OpenAi)),
        (_, Some("anthropic")) => (false, false, Some(Vendor::Anthropic)),
        _ => return Err(ConfigError::at(path, HELP)),
    };
    Ok(HeaderStyle { legacy, ietf, vendor })
}
