use super::*;
use wasm_bindgen_test::wasm_bindgen_test;

fn err(input: &str) -> String {
    parse(input.as_bytes()).unwrap_err().to_string()
}

#[test]
#[wasm_bindgen_test]
fn values_of_every_kind_parse_in_document_order() {
    let v = parse(br#" {"b":[1,-2,3.5,1e3,true,false,null],"a":"x\u00e9\n\ud83d\ude00","n":{}} "#).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["b", "a", "n"]);
    let b = v.get("b").unwrap().as_array().unwrap();
    assert_eq!((b[0].as_u64(), b[1].as_i64(), b[1].as_u64()), (Some(1), Some(-2), None));
    assert_eq!((b[2].as_i64(), b[2].as_f64()), (None, Some(3.5)));
    assert_eq!((b[3].as_i64(), b[3].as_f64()), (None, Some(1000.0)), "an exponent is not an integer literal");
    assert_eq!((b[4].as_bool(), b[5].as_bool(), b[6].is_null()), (Some(true), Some(false), true));
    assert_eq!(v.get("a").unwrap().as_str(), Some("xé\n😀"));
    assert_eq!(parse(b"9223372036854775808").unwrap().as_i64(), None, "beyond i64: not an integer");
    for (text, want) in [
        ("0.25", 0.25),
        ("1", 1.0),
        ("-2.5e-1", -0.25),
        ("12345678901234567890", 1.2345678901234567e19),
        ("1E2", 100.0),
        ("0.000001", 1e-6),
    ] {
        let got = parse(text.as_bytes()).unwrap().as_f64().unwrap();
        assert!((got - want).abs() <= want.abs() * 1e-15, "{text}: {got}");
    }
}

#[test]
#[wasm_bindgen_test]
fn a_repeated_key_is_refused_with_its_path() {
    assert_eq!(
        err(r#"{"rules":[{"limits":[{"limit":5,"limit":1000000}]}]}"#),
        "rules[0].limits[0].limit: appears twice in its object"
    );
    assert_eq!(err(r#"{"a":1,"a":1}"#), "a: appears twice in its object");
    assert!(parse(br#"{"a":{"x":1},"b":{"x":1}}"#).is_ok(), "the same key in two objects is fine");
}

#[test]
#[wasm_bindgen_test]
fn malformed_documents_are_errors_with_a_position() {
    for (input, want) in [
        ("", "not valid JSON at byte 0: unexpected end"),
        ("{", "not valid JSON at byte 1: expected a member name"),
        ("[1,]", "not valid JSON at byte 3: expected a value"),
        ("01", "not valid JSON at byte 2: bad number"),
        ("1.", "not valid JSON at byte 2: bad number"),
        ("-", "not valid JSON at byte 1: bad number"),
        ("\"a\nb\"", "not valid JSON at byte 3: control character in a string"),
        ("\"\\x\"", "not valid JSON at byte 3: bad escape"),
        ("\"\\ud800\"", "not valid JSON at byte 7: lone surrogate"),
        ("{\"a\" 1}", "not valid JSON at byte 5: expected ':'"),
        ("[1] 2", "not valid JSON at byte 4: unexpected data after the document"),
        ("tru", "not valid JSON at byte 0: expected a value"),
    ] {
        assert_eq!(err(input), want, "{input:?}");
    }
    assert_eq!(parse(b"\"\xff\"").unwrap_err().to_string(), "not valid JSON: not UTF-8");
}

#[test]
#[wasm_bindgen_test]
fn nesting_is_bounded() {
    let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
    assert!(err(&deep).ends_with(&format!("nested deeper than {MAX_DEPTH} levels")));
    let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
    assert!(parse(ok.as_bytes()).is_ok());
}

#[test]
#[wasm_bindgen_test]
fn names_in_errors_are_printable_and_bounded() {
    assert_eq!(printable("a\nb"), "a?b");
    assert_eq!(printable(&"x".repeat(100)).len(), 67);
    assert_eq!(err("{\"a\\nb\":1,\"a\\nb\":2}"), "a?b: appears twice in its object");
}
