//! What a rule reads of the request body (`body:<path>` key parts and
//! `match.body` conditions) and `request_body`: how much of it is waited
//! for, how long, and what a body the rule cannot read does.

use std::fmt;

use super::duration::parse_ms;
use super::error::ConfigError;
use super::json::{Obj, Result};
use crate::usage::UsageFields;

/// The body bytes a rule reads when `request_body.max_bytes` is not given:
/// Envoy's default `per_connection_buffer_limit_bytes`, past which Envoy
/// answers 413 itself while a filter buffers the body.
pub const DEFAULT_MAX_BODY: u64 = 1 << 20;
/// The most `max_bytes` may say: the body is copied into the VM and parsed
/// there whole, once per request (one request at a time per worker).
pub const MAX_BODY: u64 = 8 << 20;
/// How long a request may take to send its body when `request_body.timeout`
/// is not given.
pub const DEFAULT_BODY_TIMEOUT_MS: u64 = 30_000;
/// The shortest and longest `request_body.timeout`.
const BODY_TIMEOUT_MS: (u64, u64) = (100, 300_000);

/// A JSON field path into the request body (`model`, `metadata.user_id`):
/// object keys only, with the syntax of a usage path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BodyPath(Vec<String>);

impl BodyPath {
    /// Validates `text` as `response_body` paths are validated.
    pub fn parse(text: &str) -> std::result::Result<BodyPath, String> {
        UsageFields::parse(&[text])?;
        Ok(BodyPath(text.split('.').map(str::to_string).collect()))
    }

    /// Its keys, outermost first.
    pub fn keys(&self) -> &[String] {
        &self.0
    }
}

impl fmt::Display for BodyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("."))
    }
}

/// What a body the rule cannot read does: past `max_bytes`, not one JSON
/// document, or without the field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BodyInvalid {
    /// Refused: 413 past the bound, else 400 (the default: no client
    /// escapes the rule by sending a body it cannot read).
    Refuse,
    /// As an absent header: the rule does not apply to the request.
    Absent,
}

/// A rule's `request_body`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BodySettings {
    /// The most body bytes read; a longer body is not read at all.
    pub max_bytes: u64,
    /// How long after its headers the whole body may take to arrive.
    pub timeout_ms: u64,
    /// What a body the rule cannot read does.
    pub invalid: BodyInvalid,
}

impl Default for BodySettings {
    fn default() -> BodySettings {
        BodySettings { max_bytes: DEFAULT_MAX_BODY, timeout_ms: DEFAULT_BODY_TIMEOUT_MS, invalid: BodyInvalid::Refuse }
    }
}

/// Parses `request_body` (`reads`: whether the rule's key or match reads
/// the body; the setting applies to such rules only).
pub fn parse(v: Option<&crate::json::Value>, path: &str, reads: bool) -> Result<Option<BodySettings>> {
    let Some(v) = v else { return Ok(reads.then(BodySettings::default)) };
    if !reads {
        return Err(ConfigError::at(path, "applies to rules whose key or match reads the body (body:<path>)"));
    }
    let o = Obj::new(v, path, &["max_bytes", "timeout", "invalid"])?;
    let mut s = BodySettings::default();
    if let Some(n) = o.uint("max_bytes", 1, MAX_BODY)? {
        s.max_bytes = n;
    }
    if let Some(t) = o.str("timeout")? {
        s.timeout_ms = parse_ms(t)
            .filter(|ms| (BODY_TIMEOUT_MS.0..=BODY_TIMEOUT_MS.1).contains(ms))
            .ok_or_else(|| ConfigError::at(&o.path_of("timeout"), "must be a duration from 100ms to 5m"))?;
    }
    s.invalid = match o.str("invalid")? {
        None | Some("refuse") => BodyInvalid::Refuse,
        Some("absent") => BodyInvalid::Absent,
        Some(_) => return Err(ConfigError::at(&o.path_of("invalid"), "must be \"refuse\" or \"absent\"")),
    };
    Ok(Some(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse as json;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn settings(text: &str) -> std::result::Result<Option<BodySettings>, String> {
        let v = json(text.as_bytes()).unwrap();
        parse(Some(&v), "rules[0].request_body", true).map_err(|e| e.to_string())
    }

    #[test]
    #[wasm_bindgen_test]
    fn defaults_apply_to_rules_that_read_the_body_only() {
        assert_eq!(parse(None, "r", true), Ok(Some(BodySettings::default())));
        assert_eq!(parse(None, "r", false), Ok(None));
        assert_eq!(
            BodySettings::default(),
            BodySettings { max_bytes: 1_048_576, timeout_ms: 30_000, invalid: BodyInvalid::Refuse }
        );
        let v = json(b"{}").unwrap();
        assert_eq!(
            parse(Some(&v), "rules[0].request_body", false).unwrap_err().to_string(),
            "rules[0].request_body: applies to rules whose key or match reads the body (body:<path>)"
        );
    }

    #[test]
    #[wasm_bindgen_test]
    fn fields_are_read_and_bounded() {
        assert_eq!(
            settings(r#"{"max_bytes":1024,"timeout":"2s","invalid":"absent"}"#),
            Ok(Some(BodySettings { max_bytes: 1024, timeout_ms: 2000, invalid: BodyInvalid::Absent }))
        );
        assert_eq!(settings(r#"{"max_bytes":8388608}"#).unwrap().unwrap().max_bytes, 8_388_608);
        for (text, error) in [
            (r#"{"max_bytes":0}"#, "rules[0].request_body.max_bytes: must be at least 1"),
            (r#"{"max_bytes":8388609}"#, "rules[0].request_body.max_bytes: must be at most 8388608"),
            (r#"{"timeout":"50ms"}"#, "rules[0].request_body.timeout: must be a duration from 100ms to 5m"),
            (r#"{"timeout":"6m"}"#, "rules[0].request_body.timeout: must be a duration from 100ms to 5m"),
            (r#"{"timeout":"soon"}"#, "rules[0].request_body.timeout: must be a duration from 100ms to 5m"),
            (r#"{"invalid":"ignore"}"#, r#"rules[0].request_body.invalid: must be "refuse" or "absent""#),
            (r#"{"max":1}"#, "rules[0].request_body.max: unknown field (expected one of: max_bytes, timeout, invalid)"),
        ] {
            assert_eq!(settings(text), Err(error.to_string()), "{text}");
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn paths_have_the_syntax_of_usage_paths() {
        assert_eq!(BodyPath::parse("metadata.user_id").unwrap().keys(), ["metadata", "user_id"]);
        assert_eq!(BodyPath::parse("model").unwrap().to_string(), "model");
        assert_eq!(
            BodyPath::parse("messages[0].role").unwrap_err(),
            "\"messages[0].role\": keys may hold only A-Z a-z 0-9 _ -"
        );
        assert_eq!(BodyPath::parse("").unwrap_err(), "\"\" has an empty key (keys are joined by single dots)");
    }
}
