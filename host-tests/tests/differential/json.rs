//! `ratelimit::json` against `serde_json` (with `float_roundtrip`, its
//! exact number parsing): on every document serde_json reads, ours reads
//! the same values (numbers as written: their digits, read by std's
//! correct parser, are serde_json's double to the bit), except where it
//! refuses on purpose (a key twice in one object, nesting past 32 levels);
//! on every byte string serde_json refuses (a number beyond every double
//! included), ours refuses too.

use proptest::prelude::*;
use ratelimit::json::{parse, Value};
use serde_json::Value as Serde;

/// Whether ours equals serde_json's reading; a number's digits and
/// exponent, as std reads them, bit for bit (to the last place when ours
/// dropped a digit past the 19th).
fn same(ours: &Value, theirs: &Serde) -> bool {
    match (ours, theirs) {
        (Value::Null, Serde::Null) => true,
        (Value::Bool(a), Serde::Bool(b)) => a == b,
        (Value::Number(int, _), Serde::Number(n)) => {
            let int_ok = match n.as_i64() {
                Some(i) => *int == Some(i),
                // Beyond i64 (a u64, or a fraction or exponent): no integer.
                // "-0" is an integer literal to ours (0), a double to serde_json.
                None => int.is_none() || (*int == Some(0) && n.as_f64() == Some(0.0)),
            };
            let Some(d) = ours.as_decimal() else { return false };
            let (negative, digits, exponent, inexact) = d.parts();
            let read_back: f64 = format!("{}{digits}e{exponent}", if negative { "-" } else { "" }).parse().unwrap();
            int_ok
                && n.as_f64().is_some_and(|g| {
                    if inexact {
                        (g - read_back).abs() <= (g.abs() * f64::EPSILON).max(f64::from_bits(1))
                    } else {
                        // "-0" reads as the integer 0.
                        g.to_bits() == read_back.to_bits() || (*int == Some(0) && read_back == 0.0)
                    }
                })
        }
        (Value::String(a), Serde::String(b)) => a == b,
        (Value::Array(a), Serde::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y)),
        (Value::Object(a), Serde::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|w| same(v, w)))
        }
        _ => false,
    }
}

/// How deep a value nests (a scalar is 0).
fn depth(v: &Serde) -> usize {
    match v {
        Serde::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Serde::Object(members) => 1 + members.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Checks one input both ways.
fn check(input: &[u8]) -> Result<(), TestCaseError> {
    let ours = parse(input);
    let theirs: Result<Serde, _> = serde_json::from_slice(input);
    match (&ours, &theirs) {
        (Ok(a), Ok(b)) => {
            prop_assert!(same(a, b), "{:?}: ours {a:?}, serde_json {b:?}", String::from_utf8_lossy(input))
        }
        (Err(e), Ok(b)) => {
            let on_purpose = e.to_string().contains("appears twice") || depth(b) > ratelimit::json::MAX_DEPTH;
            prop_assert!(on_purpose, "{:?}: ours refused ({e}), serde_json read {b:?}", String::from_utf8_lossy(input));
        }
        (Ok(a), Err(e)) => {
            prop_assert!(false, "{:?}: ours read {a:?}, serde_json refused ({e})", String::from_utf8_lossy(input))
        }
        (Err(_), Err(_)) => {}
    }
    Ok(())
}

/// JSON documents of every kind, numbers of every shape included.
fn document() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| format!("{f:?}")),
        (any::<i32>(), -400i32..400).prop_map(|(m, e)| format!("{m}e{e}")),
        (0u64..1_000_000, 0u32..30, -30i32..30).prop_map(|(i, z, e)| format!("{i}.{}1E{e:+}", "0".repeat(z as usize))),
        "-?(0|[1-9][0-9]{0,30})(\\.[0-9]{1,30})?([eE][-+]?[0-9]{1,4})?",
    ];
    let string = prop_oneof![
        "[a-z]{0,8}".prop_map(|s| format!("{s:?}")),
        any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap()),
        "\\\\u[0-9a-fA-F]{4}".prop_map(|e| format!("\"{e}\"")),
    ];
    let leaf = prop_oneof![Just("null".to_string()), Just("true".into()), Just("false".into()), number, string.clone()];
    leaf.prop_recursive(6, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec(("[a-z]{1,3}", inner), 0..6).prop_map(|kv| format!(
                "{{{}}}",
                kv.iter().map(|(k, v)| format!("{k:?}:{v}")).collect::<Vec<_>>().join(" , ")
            )),
        ]
    })
}

/// A document with bytes changed, inserted or removed.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    let alphabet: Vec<u8> = b"{}[]\":,.-+eE0123456789 \t\n\\/ubfnrtxa\x00\x7f\xc3\xa9\xff".to_vec();
    (document(), prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, prop::sample::select(alphabet)), 1..4))
        .prop_map(|(doc, edits)| {
            let mut bytes = doc.into_bytes();
            for (at, kind, b) in edits {
                let i = at.index(bytes.len() + 1);
                match kind {
                    0 => bytes.insert(i, b),
                    1 if i < bytes.len() => bytes[i] = b,
                    _ if i < bytes.len() => {
                        bytes.remove(i);
                    }
                    _ => bytes.push(b),
                }
            }
            bytes
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn documents_read_as_serde_json_reads_them(doc in document()) {
        check(doc.as_bytes())?;
    }

    #[test]
    fn what_serde_json_refuses_is_refused(bytes in mutated()) {
        check(&bytes)?;
    }
}

#[test]
fn numbers_at_the_edges_read_as_serde_json_reads_them() {
    for text in [
        "0e400",
        "0E-400",
        "-0",
        "-0.0",
        "1e308",
        "1.7976931348623157e308",
        "1e309",
        "-1e309",
        "2.2250738585072014e-308",
        "4.9e-324",
        "2e-324",
        "1e-400",
        "9007199254740993",
        "18446744073709551616",
        "-9223372036854775809",
        "0.30000000000000004",
        "123456789012345678901234567890",
        "1.00000000000000000000000000001",
    ] {
        check(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"));
    }
}
