//! `rules[].cost.reservation`: a cost known after the response, reserved
//! at its worst at admission and settled to the real usage afterwards, so
//! concurrent requests cannot spend a budget together past its limit (the
//! check-then-charge mode lets every request that finds `reserve` units
//! left through at once).
//!
//! `{"output_fields": [...], "choices_fields": [...], "default_output": N,
//! "input_bytes_per_unit": B}`: the worst case is the output bound the
//! request body states (the largest of `output_fields`, or `default_output`
//! when none is there) times the completions it asks for (the largest of
//! `choices_fields`, at least 1), plus ceil(body bytes / B) for its input,
//! at most the cost's `max` and the capacity of its smallest limit.

use super::error::ConfigError;
use super::json::{Obj, Result};
use super::request_body::BodyPath;
use crate::json::Value;

/// The request fields OpenAI's and Anthropic's APIs bound the output with:
/// chat completions (`max_tokens`, deprecated, and `max_completion_tokens`),
/// the Responses API (`max_output_tokens`), Anthropic messages (`max_tokens`).
pub const OUTPUT_FIELDS: [&str; 3] = ["max_tokens", "max_completion_tokens", "max_output_tokens"];
/// The request fields that ask for several completions, each bounded by
/// the output bound: chat completions' `n`, completions' `best_of` (the
/// candidates generated, at least `n`).
pub const CHOICES_FIELDS: [&str; 2] = ["n", "best_of"];
/// At most this many output (or choices) fields.
const MAX_OUTPUT_FIELDS: usize = 8;

/// How a rule reserves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// Request-body fields that bound the output; the largest present counts.
    pub output_fields: Vec<BodyPath>,
    /// Request-body fields that multiply the output bound (completions
    /// asked for); the largest present counts, 1 when none is.
    pub choices_fields: Vec<BodyPath>,
    /// The output bound of a request that states none.
    pub default_output: u64,
    /// Body bytes counted as one unit of input (1: a token is at least a
    /// byte of text, and the JSON around the text is more bytes still).
    pub input_bytes_per_unit: u64,
}

impl Reservation {
    /// A text that differs whenever the reservation's meaning does.
    pub fn fingerprint_text(&self) -> String {
        let fields: Vec<String> = self.output_fields.iter().map(ToString::to_string).collect();
        let choices: Vec<String> = self.choices_fields.iter().map(ToString::to_string).collect();
        format!(
            "reserve {} x{} {} {}",
            fields.join(","),
            choices.join(","),
            self.default_output,
            self.input_bytes_per_unit
        )
    }
}

/// Parses `cost.reservation` (`max`: the cost's).
pub fn parse(v: &Value, path: &str, max: u64) -> Result<Reservation> {
    let o = Obj::new(v, path, &["output_fields", "choices_fields", "default_output", "input_bytes_per_unit"])?;
    let output_fields = body_fields(&o, "output_fields", &OUTPUT_FIELDS)?;
    let choices_fields = body_fields(&o, "choices_fields", &CHOICES_FIELDS)?;
    let default_output = o.uint("default_output", 0, max)?.ok_or_else(|| {
        ConfigError::at(
            &o.path_of("default_output"),
            "is required: the output reserved for a request that states no bound",
        )
    })?;
    let input_bytes_per_unit = o.uint("input_bytes_per_unit", 1, 1_000)?.unwrap_or(1);
    Ok(Reservation { output_fields, choices_fields, default_output, input_bytes_per_unit })
}

/// A list of request-body fields, `default` when not given.
fn body_fields(o: &Obj<'_>, field: &str, default: &[&str]) -> Result<Vec<BodyPath>> {
    let Some(list) = o.array(field)? else {
        return Ok(default.iter().filter_map(|f| BodyPath::parse(f).ok()).collect());
    };
    let fpath = o.path_of(field);
    if list.is_empty() || list.len() > MAX_OUTPUT_FIELDS {
        return Err(ConfigError::at(&fpath, format!("must list 1 to {MAX_OUTPUT_FIELDS} request body fields")));
    }
    list.iter()
        .map(|f| {
            let text = f.as_str().ok_or_else(|| ConfigError::at(&fpath, "must list JSON field paths as strings"))?;
            BodyPath::parse(text).map_err(|e| ConfigError::at(&fpath, e))
        })
        .collect()
}
