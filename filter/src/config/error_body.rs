//! `error_body`: the format of a rule's 429 body.

use super::error::ConfigError;
use super::json::Result;

/// A rule's `error_body`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ErrorBody {
    /// `{"error":"rate_limited","rule":...,"retry_after":...}`.
    #[default]
    Ratelimit,
    /// `{"error":{"message":...,"type":...,"param":null,"code":"rate_limit_exceeded"}}`.
    OpenAi,
    /// `{"type":"error","error":{"type":"rate_limit_error","message":...}}`.
    Anthropic,
}

/// Parses an `error_body` value.
pub fn parse(v: Option<&str>, path: &str) -> Result<ErrorBody> {
    match v {
        None | Some("ratelimit") => Ok(ErrorBody::Ratelimit),
        Some("openai") => Ok(ErrorBody::OpenAi),
        Some("anthropic") => Ok(ErrorBody::Anthropic),
        Some(_) => Err(ConfigError::at(path, "must be \"ratelimit\", \"openai\" or \"anthropic\"")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn an_unknown_format_is_refused_naming_the_choices() {
        assert_eq!(parse(Some("openai"), "rules[0].error_body"), Ok(ErrorBody::OpenAi));
        let e = parse(Some("OpenAI"), "rules[0].error_body").unwrap_err();
        assert_eq!(e.to_string(), r#"rules[0].error_body: must be "ratelimit", "openai" or "anthropic""#);
    }
}
