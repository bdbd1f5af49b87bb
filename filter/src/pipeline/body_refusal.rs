//! The answer to a request whose body a rule cannot read: 413 past the
//! rule's bound, 400 otherwise, 408 when the body never came whole. The
//! detail names the field and the bound, never a byte of the body.

use crate::request::BodyProblem;
use crate::response::{refused, LocalReply};

/// The refusal of rule `rule`, which reads `part` (`body:model`), for
/// `problem`.
pub fn body_refusal(problem: &BodyProblem, rule: &str, part: &str) -> LocalReply {
    match problem {
        BodyProblem::TooLarge(max) => {
            refused(413, "request_body_too_large", rule, &format!("the request body is larger than {max} bytes"))
        }
        BodyProblem::NotJson(why) => {
            refused(400, "bad_request_body", rule, &format!("the request body must be one JSON document: {why}"))
        }
        BodyProblem::Missing => refused(400, "bad_request_body", rule, &format!("{part} is missing")),
        BodyProblem::NotText => {
            refused(400, "bad_request_body", rule, &format!("{part} must be a string or an integer"))
        }
        BodyProblem::NotCount => {
            refused(400, "bad_request_body", rule, &format!("{part} must be a non-negative integer"))
        }
        BodyProblem::CaseVariant => refused(
            400,
            "bad_request_body",
            rule,
            &format!("{part} is also given as a key spelled in another letter case"),
        ),
        BodyProblem::Unreadable => refused(400, "bad_request_body", rule, "the request body could not be read"),
    }
}

/// The 408 of rule `rule` when the body took longer than `timeout_ms`.
pub fn body_timeout(rule: &str, timeout_ms: u64) -> LocalReply {
    let within = if timeout_ms % 1000 == 0 { format!("{}s", timeout_ms / 1000) } else { format!("{timeout_ms}ms") };
    let detail = format!("the request body did not arrive within {within}");
    refused(408, "request_body_timeout", rule, &detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn each_problem_has_its_status_and_text() {
        let cases = [
            (
                BodyProblem::TooLarge(1024),
                413,
                r#"{"error":"request_body_too_large","rule":"llm","detail":"the request body is larger than 1024 bytes"}"#,
            ),
            (
                BodyProblem::NotJson("a key appears twice in one object".into()),
                400,
                r#"{"error":"bad_request_body","rule":"llm","detail":"the request body must be one JSON document: a key appears twice in one object"}"#,
            ),
            (
                BodyProblem::Missing,
                400,
                r#"{"error":"bad_request_body","rule":"llm","detail":"body:model is missing"}"#,
            ),
            (
                BodyProblem::NotText,
                400,
                r#"{"error":"bad_request_body","rule":"llm","detail":"body:model must be a string or an integer"}"#,
            ),
            (
                BodyProblem::CaseVariant,
                400,
                r#"{"error":"bad_request_body","rule":"llm","detail":"body:model is also given as a key spelled in another letter case"}"#,
            ),
            (
                BodyProblem::Unreadable,
                400,
                r#"{"error":"bad_request_body","rule":"llm","detail":"the request body could not be read"}"#,
            ),
        ];
        for (problem, status, body) in cases {
            let r = body_refusal(&problem, "llm", "body:model");
            assert_eq!((r.status, r.body.as_str()), (status, body), "{problem:?}");
            assert_eq!(r.headers, vec![("content-type", "application/json".into())]);
        }
        let r = body_timeout("llm", 2000);
        assert_eq!(
            (r.status, r.body.as_str()),
            (
                408,
                r#"{"error":"request_body_timeout","rule":"llm","detail":"the request body did not arrive within 2s"}"#
            )
        );
    }
}
