//! The request body as rules read it: one JSON document, parsed once per
//! request by the strict parser (a key twice in one object, a lone
//! surrogate or bytes that are not UTF-8 are no JSON here: the upstream
//! might read either value), and its fields as key text.

use std::borrow::Cow;

use crate::json::{parse_bounded, JsonError, Value};

/// Deepest nesting of a body accepted (the usage reader's bound).
pub const MAX_BODY_DEPTH: usize = 64;

/// What became of the request body.
#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    /// Read whole: its length and the document, or why it is none.
    Read { len: u64, doc: Result<Value, String> },
    /// Longer than `len` bytes and every bound: not read.
    TooLarge { len: u64 },
    /// The host could not hand it over.
    Unreadable,
}

/// Why a rule cannot read a field of the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BodyProblem {
    /// Longer than the rule's `max_bytes` (which it says).
    TooLarge(u64),
    /// Not one JSON document (why: never any byte of the body itself).
    NotJson(String),
    /// The document has no such field (or it is `null`).
    Missing,
    /// The field is neither a string nor an integer.
    NotText,
    /// The field is no non-negative integer (an output bound).
    NotCount,
    /// A key on the field's path is also given spelled in another letter
    /// case: an upstream matching keys without case (Go's encoding/json)
    /// may read that one instead.
    CaseVariant,
    /// The host could not hand the body over.
    Unreadable,
}

impl Body {
    /// The body of `bytes` (empty: the headers ended the stream).
    pub fn of(bytes: &[u8]) -> Body {
        let doc = if bytes.is_empty() {
            Err("the request body is empty".to_string())
        } else {
            parse_bounded(bytes, MAX_BODY_DEPTH).map_err(|e| why(&e))
        };
        Body::Read { len: bytes.len() as u64, doc }
    }

    /// The body's length in bytes, for a rule reading at most `max_bytes`.
    pub fn len_within(&self, max_bytes: u64) -> Result<u64, BodyProblem> {
        match self {
            Body::Read { len, .. } if *len <= max_bytes => Ok(*len),
            Body::Unreadable => Err(BodyProblem::Unreadable),
            _ => Err(BodyProblem::TooLarge(max_bytes)),
        }
    }

    /// The non-negative integer at `keys` (`None`: absent or `null`), for
    /// a rule reading at most `max_bytes`.
    pub fn count(&self, keys: &[String], max_bytes: u64) -> Result<Option<u64>, BodyProblem> {
        match self.lookup(keys, max_bytes)? {
            None => Ok(None),
            Some(Value::Number(Some(i), _)) => u64::try_from(*i).map(Some).map_err(|_| BodyProblem::NotCount),
            Some(_) => Err(BodyProblem::NotCount),
        }
    }

    /// The value at `keys` (`None`: absent or `null`), for a rule reading
    /// at most `max_bytes`.
    pub fn value(&self, keys: &[String], max_bytes: u64) -> Result<Option<&Value>, BodyProblem> {
        self.lookup(keys, max_bytes)
    }

    /// The value at `keys` (`None`: absent or `null`), for a rule reading
    /// at most `max_bytes`. Refused when an object on the way has another
    /// key equal to the one looked for but for letter case: the upstream
    /// must read the same field this rule reads.
    fn lookup(&self, keys: &[String], max_bytes: u64) -> Result<Option<&Value>, BodyProblem> {
        let mut at = self.document(max_bytes)?;
        for key in keys {
            let Some(members) = at.as_object() else { return Ok(None) };
            if members.iter().any(|(k, _)| k != key && same_but_case(k, key)) {
                return Err(BodyProblem::CaseVariant);
            }
            match members.iter().find(|(k, _)| k == key) {
                Some((_, v)) => at = v,
                None => return Ok(None),
            }
        }
        Ok(Some(at).filter(|v| !v.is_null()))
    }

    /// The document, for a rule reading at most `max_bytes`.
    fn document(&self, max_bytes: u64) -> Result<&Value, BodyProblem> {
        match self {
            Body::TooLarge { .. } => Err(BodyProblem::TooLarge(max_bytes)),
            Body::Unreadable => Err(BodyProblem::Unreadable),
            Body::Read { len, .. } if *len > max_bytes => Err(BodyProblem::TooLarge(max_bytes)),
            Body::Read { doc: Err(why), .. } => Err(BodyProblem::NotJson(why.clone())),
            Body::Read { doc: Ok(doc), .. } => Ok(doc),
        }
    }

    /// The text of the field at `keys` for a rule reading at most
    /// `max_bytes`: a string's bytes (escapes decoded: `"gpt\u002d4o"` is
    /// `gpt-4o`), an integer's decimal text.
    pub fn field(&self, keys: &[String], max_bytes: u64) -> Result<Cow<'_, [u8]>, BodyProblem> {
        match self.lookup(keys, max_bytes)? {
            None => Err(BodyProblem::Missing),
            Some(Value::String(s)) => Ok(Cow::Borrowed(s.as_bytes())),
            Some(Value::Number(Some(i), _)) => Ok(Cow::Owned(i.to_string().into_bytes())),
            Some(_) => Err(BodyProblem::NotText),
        }
    }
}

/// Whether `a` and `b` are one key to a decoder that ignores case as Go's
/// `encoding/json` does (Unicode simple folding: besides ASCII letters,
/// U+017F `ſ` is an `s` and U+212A, the Kelvin sign, a `k`).
fn same_but_case(a: &str, b: &str) -> bool {
    fn fold(c: char) -> char {
        match c {
            '\u{17F}' => 's',
            '\u{212A}' => 'k',
            c => c.to_ascii_lowercase(),
        }
    }
    a.chars().map(fold).eq(b.chars().map(fold))
}

/// Why the parser refused a body, without the path (which holds the
/// client's keys: no byte of the body reaches a reply or a log).
fn why(e: &JsonError) -> String {
    if e.path.is_empty() {
        return format!("it is {}", e.reason);
    }
    match e.reason.as_str() {
        "appears twice in its object" => "a key appears twice in one object".to_string(),
        other => format!("it is {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn keys(path: &str) -> Vec<String> {
        path.split('.').map(str::to_string).collect()
    }

    fn text(body: &[u8], path: &str) -> Result<Vec<u8>, BodyProblem> {
        Body::of(body).field(&keys(path), 1 << 20).map(Cow::into_owned)
    }

    #[test]
    #[wasm_bindgen_test]
    fn strings_and_integers_are_key_text_escapes_decoded() {
        let body = br#"{"model":"gpt-4o","metadata":{"user_id":"u\u00e9\"1","n":-42},"messages":[]}"#;
        assert_eq!(text(body, "model"), Ok(b"gpt-4o".to_vec()));
        assert_eq!(text(body, "metadata.user_id"), Ok("u\u{e9}\"1".as_bytes().to_vec()));
        assert_eq!(text(body, "metadata.n"), Ok(b"-42".to_vec()));
        assert_eq!(text(br#"{"model":"gpt\u002d4o"}"#, "model"), Ok(b"gpt-4o".to_vec()), "one model, one key");
        assert_eq!(text(br#"{"model":"gpt\u002D4o"}"#, "model"), Ok(b"gpt-4o".to_vec()));
        assert_eq!(text(br#"{"m\u006fdel":"x"}"#, "model"), Ok(b"x".to_vec()), "keys are decoded too");
        assert_eq!(text(br#"{"model":"\ud83d\ude00"}"#, "model"), Ok("\u{1F600}".as_bytes().to_vec()));
        assert_eq!(text(br#"{"model":""}"#, "model"), Ok(Vec::new()));
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_field_that_is_no_text_or_absent_is_told() {
        let body = br#"{"model":null,"a":{"b":[1]},"f":1.5,"big":123456789012345678901,"t":true,"o":{}}"#;
        assert_eq!(text(body, "model"), Err(BodyProblem::Missing), "null is no value");
        assert_eq!(text(body, "nothing"), Err(BodyProblem::Missing));
        assert_eq!(text(body, "a.b.c"), Err(BodyProblem::Missing));
        assert_eq!(text(body, "f.x"), Err(BodyProblem::Missing), "no keys inside a number");
        for path in ["a.b", "f", "big", "t", "o"] {
            assert_eq!(text(body, path), Err(BodyProblem::NotText), "{path}");
        }
        assert_eq!(text(br#"["model"]"#, "model"), Err(BodyProblem::Missing), "an array has no keys");
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_body_that_is_not_one_json_document_is_refused_without_its_bytes() {
        let not_json = |body: &[u8]| match text(body, "model") {
            Err(BodyProblem::NotJson(why)) => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(not_json(b""), "the request body is empty");
        assert_eq!(not_json(b"model=gpt-4o"), "it is not valid JSON at byte 0: expected a value");
        assert_eq!(not_json(br#"{"model":"a","model":"b"}"#), "a key appears twice in one object");
        assert_eq!(not_json(br#"{"x":{"secret-key":1,"secret-key":2}}"#), "a key appears twice in one object");
        assert_eq!(not_json(b"{\"model\":\"\xff\"}"), "it is not valid JSON: not UTF-8");
        assert_eq!(not_json(br#"{"model":"\ud800"}"#), "it is not valid JSON at byte 16: lone surrogate");
        assert_eq!(
            not_json(br#"{"model":"a"} {}"#),
            "it is not valid JSON at byte 14: unexpected data after the document"
        );
        let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
        assert_eq!(not_json(deep.as_bytes()), "it is nested deeper than 64 levels");
        let fine = format!("{{\"model\":\"m\",\"x\":{}{}}}", "[".repeat(63), "]".repeat(63));
        assert_eq!(text(fine.as_bytes(), "model"), Ok(b"m".to_vec()), "64 levels are fine");
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_key_given_again_in_another_case_is_refused_on_the_path_read() {
        let decoy = br#"{"model":"decoy-1","Model":"gpt-4o","max_tokens":1,"MAX_TOKENS":100000}"#;
        assert_eq!(text(decoy, "model"), Err(BodyProblem::CaseVariant));
        assert_eq!(Body::of(decoy).count(&keys("max_tokens"), 1 << 20), Err(BodyProblem::CaseVariant));
        // Go folds these two non-ASCII letters to ASCII ones.
        let kelvin = "{\"max_tokens\":1,\"max_to\u{212A}ens\":100000}";
        assert_eq!(Body::of(kelvin.as_bytes()).count(&keys("max_tokens"), 1 << 20), Err(BodyProblem::CaseVariant));
        assert_eq!(text("{\"stream\":1,\"\u{17F}tream\":2}".as_bytes(), "stream"), Err(BodyProblem::CaseVariant));
        assert_eq!(
            text(br#"{"meta":{"user":"a","USER":"b"}}"#, "meta.user"),
            Err(BodyProblem::CaseVariant),
            "at any depth"
        );
        assert_eq!(text(br#"{"META":{"user":"a"},"meta":{"user":"b"}}"#, "meta.user"), Err(BodyProblem::CaseVariant));
        // Only the fields read count, and only as spelled otherwise.
        assert_eq!(text(br#"{"model":"m","Other":1,"other":2}"#, "model"), Ok(b"m".to_vec()));
        assert_eq!(text(br#"{"model":"m","models":"x","mode":"y"}"#, "model"), Ok(b"m".to_vec()));
        assert_eq!(text(br#"{"Model":"gpt-4o"}"#, "model"), Err(BodyProblem::CaseVariant), "alone, too");
    }

    #[test]
    #[wasm_bindgen_test]
    fn each_rule_reads_within_its_own_bound() {
        let body = Body::of(br#"{"model":"gpt-4o"}"#);
        let model = keys("model");
        assert_eq!(body.field(&model, 18).as_deref(), Ok(&b"gpt-4o"[..]), "exactly the bound");
        assert_eq!(body.field(&model, 17), Err(BodyProblem::TooLarge(17)));
        assert_eq!(Body::TooLarge { len: 100 }.field(&model, 1000), Err(BodyProblem::TooLarge(1000)));
        assert_eq!(Body::Unreadable.field(&model, 1000), Err(BodyProblem::Unreadable));
    }
}
