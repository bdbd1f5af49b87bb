//! Reads a JSON object field by field, knowing each field's path, so every
//! error names exactly where it is; unknown fields are refused.

use super::error::ConfigError;
use crate::json::{printable, Value};

/// Result of reading configuration.
pub type Result<T> = std::result::Result<T, ConfigError>;

/// One JSON object of the configuration and its path.
pub struct Obj<'a> {
    path: String,
    members: &'a [(String, Value)],
}

/// The path of `field` inside `parent`.
#[inline(never)]
pub fn child(parent: &str, field: &str) -> String {
    if parent.is_empty() {
        field.to_string()
    } else {
        format!("{parent}.{field}")
    }
}

impl<'a> Obj<'a> {
    /// `value` as an object whose fields are all in `known`.
    #[inline(never)]
    pub fn new(value: &'a Value, path: &str, known: &[&str]) -> Result<Obj<'a>> {
        let members = value.as_object().ok_or_else(|| ConfigError::at(path, "must be an object"))?;
        if let Some((unknown, _)) = members.iter().find(|(k, _)| !known.contains(&k.as_str())) {
            let mut reason = String::from("unknown field (expected one of: ");
            for (i, k) in known.iter().enumerate() {
                if i > 0 {
                    reason.push_str(", ");
                }
                reason.push_str(k);
            }
            reason.push(')');
            return Err(ConfigError::at(&child(path, &printable(unknown)), reason));
        }
        Ok(Obj { path: path.to_string(), members })
    }

    /// The path of one of this object's fields.
    #[inline(never)]
    pub fn path_of(&self, field: &str) -> String {
        child(&self.path, field)
    }

    /// A field's raw value, if present and not null.
    #[inline(never)]
    pub fn value(&self, field: &str) -> Option<&'a Value> {
        self.members.iter().find(|(k, _)| k == field).map(|(_, v)| v).filter(|v| !v.is_null())
    }

    /// An optional string field.
    #[inline(never)]
    pub fn str(&self, field: &str) -> Result<Option<&'a str>> {
        match self.value(field) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| ConfigError::at(&self.path_of(field), "must be a string")),
        }
    }

    /// A required string field.
    #[inline(never)]
    pub fn required_str(&self, field: &str) -> Result<&'a str> {
        self.str(field)?.ok_or_else(|| ConfigError::at(&self.path_of(field), "is required"))
    }

    /// An optional boolean field.
    #[inline(never)]
    pub fn bool(&self, field: &str) -> Result<Option<bool>> {
        match self.value(field) {
            None => Ok(None),
            Some(v) => {
                v.as_bool().map(Some).ok_or_else(|| ConfigError::at(&self.path_of(field), "must be true or false"))
            }
        }
    }

    /// An optional integer field within `min..=max`.
    #[inline(never)]
    pub fn uint(&self, field: &str, min: u64, max: u64) -> Result<Option<u64>> {
        match self.value(field) {
            None => Ok(None),
            Some(v) => uint(v, &self.path_of(field), min, max).map(Some),
        }
    }

    /// An optional array field.
    #[inline(never)]
    pub fn array(&self, field: &str) -> Result<Option<&'a [Value]>> {
        match self.value(field) {
            None => Ok(None),
            Some(v) => v.as_array().map(Some).ok_or_else(|| ConfigError::at(&self.path_of(field), "must be an array")),
        }
    }
}

/// An integer within `min..=max`.
#[inline(never)]
pub fn uint(v: &Value, path: &str, min: u64, max: u64) -> Result<u64> {
    let n = match (v.as_i64(), v.as_decimal()) {
        (Some(i), _) if i < 0 => return Err(ConfigError::at(path, format!("must be at least {min}"))),
        (Some(i), _) => i as u64,
        // A number beyond i64 (whose nearest double is at least 9.2e18,
        // as this read it when it read doubles: every such double is whole).
        (None, Some(d)) if !d.is_negative() && d.whole() >= 9_199_999_999_999_999_488 => u64::MAX,
        _ => return Err(ConfigError::at(path, "must be an integer")),
    };
    if n < min {
        Err(ConfigError::at(path, format!("must be at least {min}")))
    } else if n > max {
        Err(ConfigError::at(path, format!("must be at most {max}")))
    } else {
        Ok(n)
    }
}

/// A number from 0 to 1 (fractions allowed).
#[inline(never)]
pub fn fraction(v: &Value, path: &str) -> Result<f64> {
    match v.as_f64() {
        Some(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(ConfigError::at(path, "must be a number from 0 to 1")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn unknown_fields_are_named_with_their_path() {
        let v = parse(br#"{"a": 1, "zz": 2}"#).unwrap();
        let err = Obj::new(&v, "store", &["a", "b"]).err().unwrap();
        assert_eq!(err.to_string(), "store.zz: unknown field (expected one of: a, b)");
    }

    #[test]
    #[wasm_bindgen_test]
    fn integers_are_checked_for_type_and_range() {
        let v = parse(br#"{"n": 0, "f": 1.5, "neg": -3, "s": "7", "big": 99}"#).unwrap();
        let o = Obj::new(&v, "x", &["n", "f", "neg", "s", "big"]).unwrap();
        assert_eq!(o.uint("n", 1, 10).unwrap_err().to_string(), "x.n: must be at least 1");
        assert_eq!(o.uint("f", 1, 10).unwrap_err().to_string(), "x.f: must be an integer");
        assert_eq!(o.uint("neg", 1, 10).unwrap_err().to_string(), "x.neg: must be at least 1");
        assert_eq!(o.uint("s", 1, 10).unwrap_err().to_string(), "x.s: must be an integer");
        assert_eq!(o.uint("big", 1, 10).unwrap_err().to_string(), "x.big: must be at most 10");
        assert_eq!(o.uint("missing", 1, 10).unwrap(), None);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_number_past_i64_is_too_large_where_its_double_was() {
        // Until numbers were read without doubles, a number that is no i64
        // was "at most" refused when its nearest double was at least
        // 9.2e18, else "must be an integer": the same, on both sides.
        for text in [
            "9199999999999999488.0",
            "9199999999999999487.999",
            "9.2e18",
            "9.1999999999999994875e18",
            "9223372036854775808",
            "1e19",
            "1e300",
            "-1e19",
            "-0.0",
            "1e18",
            "12.0",
        ] {
            let before = match text.parse::<f64>().unwrap() {
                f if f.fract() == 0.0 && f >= 9.2e18 => "x: must be at most 10",
                _ => "x: must be an integer",
            };
            let v = parse(text.as_bytes()).unwrap();
            assert_eq!(uint(&v, "x", 1, 10).unwrap_err().to_string(), before, "{text}");
        }
    }
}
