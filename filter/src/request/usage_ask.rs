//! Asking for a stream's usage on the client's behalf: OpenAI's chat and
//! completions APIs report no usage in a stream (`"stream": true`) unless
//! the request says `"stream_options": {"include_usage": true}`, and the
//! official SDKs do not say it by default. A rule charging the usage adds
//! it (as Envoy AI Gateway does), and takes the usage event back out of
//! the stream (`usage::UsageStripper`), so the client sees what it asked
//! for. Only the member that changes is written; every other byte of the
//! body passes as it came.

use std::ops::Range;

use super::body::{Body, BodyProblem, MAX_BODY_DEPTH};
use crate::json::{ObjectText, Value};

/// The request-body fields a rule that asks for the usage reads.
const FIELDS: [&[&str]; 2] = [&["stream"], &["stream_options", "include_usage"]];

/// The body to send instead of `bytes` (read as `body`, within
/// `max_bytes`) so that a streamed request reports its usage: `None` when
/// it needs no change (not streamed, already asking, or no JSON object the
/// upstream would take: it refuses such a request itself). A field the
/// rule reads that is also given in another letter case is refused.
pub fn ask_for_usage(body: &Body, bytes: &[u8], max_bytes: u64) -> Result<Option<Vec<u8>>, (BodyProblem, String)> {
    for keys in FIELDS {
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        match body.value(&keys, max_bytes) {
            Err(BodyProblem::CaseVariant) => {
                return Err((BodyProblem::CaseVariant, format!("body:{}", keys.join("."))))
            }
            // A body that is no JSON is another rule's business (or none's).
            Err(_) => return Ok(None),
            Ok(_) => {}
        }
    }
    Ok(added(bytes))
}

fn added(bytes: &[u8]) -> Option<Vec<u8>> {
    let top = ObjectText::read(bytes, MAX_BODY_DEPTH)?;
    if top.member("stream")?.value != Value::Bool(true) {
        return None;
    }
    let Some(options) = top.member("stream_options") else {
        return Some(top.with_first(bytes, r#""stream_options":{"include_usage":true}"#));
    };
    let span = options.value_span.clone();
    match &options.value {
        Value::Null => Some(splice(bytes, span, br#"{"include_usage":true}"#)),
        Value::Object(_) => {
            let text = &bytes[span.clone()];
            let inner = ObjectText::read(text, MAX_BODY_DEPTH)?;
            match inner.member("include_usage") {
                Some(m) if m.value == Value::Bool(true) => None,
                Some(m) => {
                    let at = span.start + m.value_span.start..span.start + m.value_span.end;
                    Some(splice(bytes, at, b"true"))
                }
                None => Some(splice(bytes, span, &inner.with_first(text, r#""include_usage":true"#))),
            }
        }
        _ => None,
    }
}

fn splice(bytes: &[u8], at: Range<usize>, with: &[u8]) -> Vec<u8> {
    [&bytes[..at.start], with, &bytes[at.end..]].concat()
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn ask(text: &str) -> Result<Option<String>, (BodyProblem, String)> {
        let body = Body::of(text.as_bytes());
        ask_for_usage(&body, text.as_bytes(), 1 << 20).map(|b| b.map(|b| String::from_utf8(b).unwrap()))
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_stream_that_does_not_ask_for_its_usage_is_made_to() {
        let cases = [
            (
                r#"{"model":"m","stream":true,"messages":[]}"#,
                r#"{"stream_options":{"include_usage":true},"model":"m","stream":true,"messages":[]}"#,
            ),
            (r#"{"stream":true,"stream_options":null}"#, r#"{"stream":true,"stream_options":{"include_usage":true}}"#),
            (r#"{"stream":true,"stream_options":{}}"#, r#"{"stream":true,"stream_options":{"include_usage":true}}"#),
            (
                r#"{"stream":true,"stream_options":{"include_obfuscation":false}}"#,
                r#"{"stream":true,"stream_options":{"include_usage":true,"include_obfuscation":false}}"#,
            ),
            (
                r#"{"stream":true,"stream_options":{ "include_usage" : false }}"#,
                r#"{"stream":true,"stream_options":{ "include_usage" : true }}"#,
            ),
            (
                r#"{"stream":true,"stream_options":{"include_usage":null,"x":1}}"#,
                r#"{"stream":true,"stream_options":{"include_usage":true,"x":1}}"#,
            ),
        ];
        for (sent, upstream) in cases {
            let got = ask(sent).unwrap().unwrap();
            assert_eq!(got, upstream);
            assert!(crate::json::parse(got.as_bytes()).is_ok(), "{got}");
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_request_that_asks_or_does_not_stream_passes_as_it_came() {
        for body in [
            r#"{"model":"m"}"#,
            r#"{"stream":false}"#,
            r#"{"stream":"true"}"#,
            r#"{"stream":true,"stream_options":{"include_usage":true}}"#,
            r#"{"stream":true,"stream_options":[1]}"#,
            r#"[{"stream":true}]"#,
            "not json",
            "",
        ] {
            assert_eq!(ask(body), Ok(None), "{body}");
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_field_it_reads_given_again_in_another_case_is_refused() {
        let refused = |body: &str, part: &str| assert_eq!(ask(body), Err((BodyProblem::CaseVariant, part.into())));
        refused(r#"{"stream":false,"Stream":true}"#, "body:stream");
        refused(
            r#"{"stream":true,"stream_options":{"include_usage":true,"Include_Usage":false}}"#,
            "body:stream_options.include_usage",
        );
        refused(r#"{"stream":true,"STREAM_OPTIONS":{}}"#, "body:stream_options.include_usage");
    }
}
