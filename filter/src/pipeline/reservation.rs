//! What a request of a rule in reservation mode takes at admission: the
//! worst its body allows (`config::Reservation`). The body's own bound on
//! the output (the largest of the output fields, else the rule's default)
//! times the completions it asks for (`n`, `best_of`), plus its bytes as
//! input, priced at its model's dearest usage field when the rule has
//! prices; at most `cap` (the cost's `max`, and the capacity of the rule's
//! smallest limit counting cost: a worst case past it could never be
//! admitted, and would be refused with a Retry-After that never comes
//! true), at least 1 (the script takes no empty amount).

use crate::config::{BodyInvalid, BodyPath, BodySettings, Price, Reservation};
use crate::request::{Body, BodyProblem};

/// What the request reserves, or why its body cannot say, with the field
/// at fault (for the 400). A body the rule cannot read reserves `max` when
/// the rule treats it as absent: no body reserves less than its worst.
pub(super) fn worst_case(
    body: &Body,
    reservation: &Reservation,
    cap: u64,
    settings: BodySettings,
    price: Option<&Price>,
) -> Result<u64, (BodyProblem, String)> {
    match read(body, reservation, settings.max_bytes) {
        // Priced: what that many units cost at the most expensive field.
        Ok(units) => Ok(price.map_or(units, |p| p.most(units)).clamp(1, cap.max(1))),
        Err(_) if settings.invalid == BodyInvalid::Absent => Ok(cap.max(1)),
        Err(e) => Err(e),
    }
}

/// The most field `fields` states (`None`: none is there).
fn largest(body: &Body, fields: &[BodyPath], max_bytes: u64) -> Result<Option<u64>, (BodyProblem, String)> {
    let mut most: Option<u64> = None;
    for field in fields {
        let stated = body.count(field.keys(), max_bytes).map_err(|p| (p, format!("body:{field}")))?;
        most = most.max(stated);
    }
    Ok(most)
}

fn read(body: &Body, reservation: &Reservation, max_bytes: u64) -> Result<u64, (BodyProblem, String)> {
    let len = body.len_within(max_bytes).map_err(|p| (p, "the request body".to_string()))?;
    let output = largest(body, &reservation.output_fields, max_bytes)?.unwrap_or(reservation.default_output);
    let choices = largest(body, &reservation.choices_fields, max_bytes)?.unwrap_or(1).max(1);
    let input = len.div_ceil(reservation.input_bytes_per_unit.max(1));
    Ok(output.saturating_mul(choices).saturating_add(input))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CHOICES_FIELDS, OUTPUT_FIELDS};
    use wasm_bindgen_test::wasm_bindgen_test;

    fn reservation(default_output: u64, input_bytes_per_unit: u64) -> Reservation {
        let output_fields = OUTPUT_FIELDS.iter().map(|f| BodyPath::parse(f).unwrap()).collect();
        let choices_fields = CHOICES_FIELDS.iter().map(|f| BodyPath::parse(f).unwrap()).collect();
        Reservation { output_fields, choices_fields, default_output, input_bytes_per_unit }
    }

    fn reserve(body: &[u8], invalid: BodyInvalid) -> Result<u64, (BodyProblem, String)> {
        let settings = BodySettings { invalid, ..BodySettings::default() };
        worst_case(&Body::of(body), &reservation(1000, 1), 100_000, settings, None)
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_stated_output_bound_plus_the_body_bytes() {
        let body = br#"{"model":"m","max_tokens":300}"#;
        assert_eq!(reserve(body, BodyInvalid::Refuse), Ok(300 + body.len() as u64));
        let both = br#"{"max_tokens":5,"max_completion_tokens":700}"#;
        assert_eq!(reserve(both, BodyInvalid::Refuse), Ok(700 + both.len() as u64), "the largest bound counts");
        let none = br#"{"model":"m","max_tokens":null}"#;
        assert_eq!(reserve(none, BodyInvalid::Refuse), Ok(1000 + none.len() as u64), "null states no bound");
        let responses = br#"{"max_output_tokens":64}"#;
        assert_eq!(reserve(responses, BodyInvalid::Refuse), Ok(64 + responses.len() as u64));
    }

    #[test]
    #[wasm_bindgen_test]
    fn each_completion_asked_for_may_use_the_whole_output_bound() {
        let n = br#"{"n":8,"max_tokens":3000}"#;
        assert_eq!(reserve(n, BodyInvalid::Refuse), Ok(8 * 3000 + n.len() as u64));
        let best_of = br#"{"n":2,"best_of":5,"max_tokens":100}"#;
        assert_eq!(reserve(best_of, BodyInvalid::Refuse), Ok(5 * 100 + best_of.len() as u64), "the candidates");
        let default = br#"{"n":3}"#;
        assert_eq!(reserve(default, BodyInvalid::Refuse), Ok(3 * 1000 + default.len() as u64), "default_output each");
        let zero = br#"{"n":0,"max_tokens":10}"#;
        assert_eq!(reserve(zero, BodyInvalid::Refuse), Ok(10 + zero.len() as u64), "at least one");
        let bad = br#"{"n":"8","max_tokens":10}"#;
        assert_eq!(reserve(bad, BodyInvalid::Refuse), Err((BodyProblem::NotCount, "body:n".to_string())));
        let case = br#"{"n":1,"N":8,"max_tokens":10}"#;
        assert_eq!(reserve(case, BodyInvalid::Refuse), Err((BodyProblem::CaseVariant, "body:n".to_string())));
    }

    #[test]
    #[wasm_bindgen_test]
    fn input_is_counted_per_configured_bytes_rounded_up_and_the_whole_is_capped_at_max() {
        let settings = BodySettings::default();
        let body = Body::of(br#"{"max_tokens":10}"#); // 17 bytes
        assert_eq!(worst_case(&body, &reservation(0, 4), 100, settings, None), Ok(10 + 5));
        assert_eq!(worst_case(&body, &reservation(0, 1), 20, settings, None), Ok(20), "max");
        let huge = Body::of(br#"{"max_tokens":9007199254740991}"#);
        assert_eq!(worst_case(&huge, &reservation(0, 1), 100, settings, None), Ok(100), "saturates, then max");
        let zero = Body::of(br#"{"max_tokens":0}"#);
        assert_eq!(worst_case(&zero, &reservation(0, 1000), 100, settings, None), Ok(1), "never an empty amount");
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_bound_that_is_no_count_is_refused_or_reserves_max() {
        for bad in
            [&br#"{"max_tokens":-1}"#[..], br#"{"max_tokens":"9"}"#, br#"{"max_tokens":1.5}"#, br#"{"max_tokens":{}}"#]
        {
            let refused = reserve(bad, BodyInvalid::Refuse);
            assert_eq!(refused, Err((BodyProblem::NotCount, "body:max_tokens".to_string())));
            assert_eq!(reserve(bad, BodyInvalid::Absent), Ok(100_000));
        }
        let not_json = reserve(b"max_tokens=1", BodyInvalid::Refuse).unwrap_err();
        assert!(matches!(not_json, (BodyProblem::NotJson(_), ref part) if part == "body:max_tokens"), "{not_json:?}");
        assert_eq!(reserve(b"max_tokens=1", BodyInvalid::Absent), Ok(100_000));
        let settings = BodySettings { max_bytes: 4, ..BodySettings::default() };
        let long = worst_case(&Body::of(br#"{"max_tokens":1}"#), &reservation(0, 1), 50, settings, None);
        assert_eq!(long, Err((BodyProblem::TooLarge(4), "the request body".to_string())));
        assert_eq!(
            worst_case(&Body::Unreadable, &reservation(0, 1), 50, settings, None).map_err(|e| e.0),
            Err(BodyProblem::Unreadable)
        );
    }
}
