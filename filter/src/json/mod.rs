//! A small, strict JSON parser for the plugin configuration and webdis's
//! replies: every input byte is hostile, so parsing is total (no panics),
//! bounded in depth, and an object that repeats a key is refused with the
//! path of the repetition (serde_json silently keeps the last one, so
//! `"limit":5,"limit":1000000` enforced a million).

mod members;
mod number;
mod parser;
mod value;

pub use members::{Member, ObjectText};
pub use number::Decimal;
pub use parser::{parse, parse_bounded, printable, JsonError, MAX_DEPTH};
pub use value::Value;

#[cfg(test)]
mod tests;
