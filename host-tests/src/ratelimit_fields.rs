//! Reading the IETF RateLimit fields off real responses: `RateLimit-Policy`
//! and `RateLimit` as draft-ietf-httpapi-ratelimit-headers-11 defines them,
//! parsed by a real RFC 9651 parser (the `sfv` crate) into plain structs.
//!
//! Anything that is not valid structured-field syntax, or not what the
//! draft requires of these two fields (a non-empty List of Items whose
//! value is a String; `q` and `r` present, non-negative Integers; `w` a
//! positive Integer; `t` a non-negative Integer; `qu` a String; `pk` a Byte
//! Sequence), is an error that says which item and why. Other parameters
//! are comments (§3.1, §4.1) and are ignored. A response may split a field
//! over several lines: join their values with `, ` first (RFC 9110 §5.3).

use sfv::{BareItem, Item, List, ListEntry, Parser};

/// One quota policy of `RateLimit-Policy`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaPolicy {
    /// The policy's name.
    pub name: String,
    /// `q`: the quota.
    pub q: u64,
    /// `w`: the window in seconds.
    pub w: Option<u64>,
    /// `qu`: the quota unit.
    pub qu: Option<String>,
    /// `pk`: the partition key.
    pub pk: Option<Vec<u8>>,
}

/// One service limit of `RateLimit`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceLimit {
    /// The policy's name.
    pub name: String,
    /// `r`: the quota still available.
    pub r: u64,
    /// `t`: seconds until the effective window ends.
    pub t: Option<u64>,
    /// `pk`: the partition key.
    pub pk: Option<Vec<u8>>,
}

/// The policies of a `RateLimit-Policy` field value, in order.
pub fn parse_policy(value: &str) -> Result<Vec<QuotaPolicy>, String> {
    items("RateLimit-Policy", value)?
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let at = |e: String| format!("RateLimit-Policy {value:?}: item {}: {e}", i + 1);
            Ok(QuotaPolicy {
                name: name(&item).map_err(at)?,
                q: integer(&item, "q").map_err(at)?.ok_or_else(|| at("q is missing".into()))?,
                w: match integer(&item, "w").map_err(at)? {
                    Some(0) => return Err(at("w must be positive".into())),
                    w => w,
                },
                qu: string(&item, "qu").map_err(at)?,
                pk: bytes(&item, "pk").map_err(at)?,
            })
        })
        .collect()
}

/// The service limits of a `RateLimit` field value, in order.
pub fn parse_state(value: &str) -> Result<Vec<ServiceLimit>, String> {
    items("RateLimit", value)?
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let at = |e: String| format!("RateLimit {value:?}: item {}: {e}", i + 1);
            Ok(ServiceLimit {
                name: name(&item).map_err(at)?,
                r: integer(&item, "r").map_err(at)?.ok_or_else(|| at("r is missing".into()))?,
                t: integer(&item, "t").map_err(at)?,
                pk: bytes(&item, "pk").map_err(at)?,
            })
        })
        .collect()
}

/// The Items of a non-empty List.
fn items(field: &str, value: &str) -> Result<Vec<Item>, String> {
    let list: List =
        Parser::new(value).parse().map_err(|e| format!("{field} {value:?}: not a structured-field List: {e}"))?;
    if list.is_empty() {
        return Err(format!("{field} {value:?}: the List is empty"));
    }
    list.into_iter()
        .enumerate()
        .map(|(i, entry)| match entry {
            ListEntry::Item(item) => Ok(item),
            ListEntry::InnerList(_) => Err(format!("{field} {value:?}: item {}: an inner list, not an Item", i + 1)),
        })
        .collect()
}

fn name(item: &Item) -> Result<String, String> {
    match &item.bare_item {
        BareItem::String(s) => Ok(s.as_str().to_owned()),
        other => Err(format!("the policy name must be a String, not {}", kind(other))),
    }
}

fn integer(item: &Item, key: &str) -> Result<Option<u64>, String> {
    match item.params.get(key) {
        None => Ok(None),
        Some(BareItem::Integer(n)) => {
            u64::try_from(*n).map(Some).map_err(|_| format!("{key} must not be negative, not {n}"))
        }
        Some(other) => Err(format!("{key} must be an Integer, not {}", kind(other))),
    }
}

fn string(item: &Item, key: &str) -> Result<Option<String>, String> {
    match item.params.get(key) {
        None => Ok(None),
        Some(BareItem::String(s)) => Ok(Some(s.as_str().to_owned())),
        Some(other) => Err(format!("{key} must be a String, not {}", kind(other))),
    }
}

fn bytes(item: &Item, key: &str) -> Result<Option<Vec<u8>>, String> {
    match item.params.get(key) {
        None => Ok(None),
        Some(BareItem::ByteSequence(b)) => Ok(Some(b.clone())),
        Some(other) => Err(format!("{key} must be a Byte Sequence, not {}", kind(other))),
    }
}

fn kind(item: &BareItem) -> String {
    match item {
        BareItem::Decimal(d) => format!("the Decimal {d}"),
        BareItem::Integer(n) => format!("the Integer {n}"),
        BareItem::String(s) => format!("the String {:?}", s.as_str()),
        BareItem::ByteSequence(_) => "a Byte Sequence".to_owned(),
        BareItem::Boolean(b) => format!("the Boolean {b}"),
        BareItem::Token(t) => format!("the Token {}", t.as_str()),
        BareItem::Date(d) => format!("the Date {d}"),
        BareItem::DisplayString(s) => format!("the Display String {s:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use ratelimit::ratelimit_fields::{
        policy_field, policy_name, state_field, PartitionKey, Policy, QuotaUnit, INTEGER_MAX,
    };

    fn policy(name: &str, q: u64, w: Option<u64>, qu: Option<&str>, pk: Option<&[u8]>) -> QuotaPolicy {
        QuotaPolicy { name: name.into(), q, w, qu: qu.map(Into::into), pk: pk.map(Into::into) }
    }

    fn limit(name: &str, r: u64, t: Option<u64>, pk: Option<&[u8]>) -> ServiceLimit {
        ServiceLimit { name: name.into(), r, t, pk: pk.map(Into::into) }
    }

    #[test]
    fn the_serializers_output_parses_back_exactly() {
        let pk = PartitionKey::of("203.0.113.7");
        let policies = [
            Policy {
                name: "api/1m",
                quota: 100,
                window_ms: 60_000,
                unit: QuotaUnit::Requests,
                partition_key: Some(pk),
            },
            Policy { name: "api/250ms", quota: 5, window_ms: 250, unit: QuotaUnit::ContentBytes, partition_key: None },
            Policy {
                name: "cc/1s",
                quota: 3,
                window_ms: 1000,
                unit: QuotaUnit::ConcurrentRequests,
                partition_key: None,
            },
        ];
        let field = policy_field(&policies).unwrap();
        assert_eq!(
            parse_policy(&field).unwrap(),
            [
                policy("api/1m", 100, Some(60), None, Some(pk.as_bytes())),
                policy("api/250ms", 5, Some(1), Some("content-bytes"), None),
                policy("cc/1s", 3, Some(1), Some("concurrent-requests"), None),
            ]
        );
        let state = state_field("api/1m", 99, 59_001, Some(pk));
        assert_eq!(parse_state(&state).unwrap(), [limit("api/1m", 99, Some(60), Some(pk.as_bytes()))]);
        let clamped = state_field("x", u64::MAX, u64::MAX, None);
        assert_eq!(parse_state(&clamped).unwrap(), [limit("x", INTEGER_MAX, Some(INTEGER_MAX), None)]);
    }

    #[test]
    fn the_drafts_policy_examples_parse() {
        let examples: [(&str, Vec<QuotaPolicy>); 7] = [
            (
                r#""burst";q=100;w=60,"daily";q=1000;w=86400"#,
                vec![policy("burst", 100, Some(60), None, None), policy("daily", 1000, Some(86400), None, None)],
            ),
            (r#""default";q=100;w=10"#, vec![policy("default", 100, Some(10), None, None)]),
            (
                r#""permin";q=50;w=60,"perhr";q=1000;w=3600"#,
                vec![policy("permin", 50, Some(60), None, None), policy("perhr", 1000, Some(3600), None, None)],
            ),
            (
                r#""peruser";q=100;w=60;pk=:cHsdsRa894==:"#,
                vec![policy("peruser", 100, Some(60), None, Some(&[0x70, 0x7b, 0x1d, 0xb1, 0x16, 0xbc, 0xf7]))],
            ),
            (
                r#""peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:"#,
                vec![policy(
                    "peruser",
                    65535,
                    Some(10),
                    Some("content-bytes"),
                    Some(&[0xb1, 0xd7, 0xe3, 0x2c, 0x95, 0x0e, 0x50]),
                )],
            ),
            (
                r#""hour";q=1000;w=3600, "day";q=5000;w=86400"#,
                vec![policy("hour", 1000, Some(3600), None, None), policy("day", 5000, Some(86400), None, None)],
            ),
            (r#""sliding";q=100;w=60;burst=1000"#, vec![policy("sliding", 100, Some(60), None, None)]),
        ];
        for (value, expected) in examples {
            assert_eq!(parse_policy(value).unwrap(), expected, "{value}");
        }
    }

    #[test]
    fn the_drafts_service_limit_examples_parse() {
        let examples = [
            (r#""default";r=50;t=30"#, limit("default", 50, Some(30), None)),
            (r#""default";r=999;pk=:dHJpYWwxMjEzMjM=:"#, limit("default", 999, None, Some(b"trial121323"))),
            (
                r#""default";r=300000000;t=60;pk=:QXBwLTk5OQ==:"#,
                limit("default", 300_000_000, Some(60), Some(b"App-999")),
            ),
            (r#""problemPolicy";r=0;t=10"#, limit("problemPolicy", 0, Some(10), None)),
            (r#""dayLimit";r=100;t=36000"#, limit("dayLimit", 100, Some(36000), None)),
            (r#""sliding";q=12;r=6;t=1"#, limit("sliding", 6, Some(1), None)),
        ];
        for (value, expected) in examples {
            assert_eq!(parse_state(value).unwrap(), [expected], "{value}");
        }
    }

    #[test]
    fn what_is_not_a_valid_field_fails_with_the_reason() {
        let policy_errors = [
            ("", r#"RateLimit-Policy "": the List is empty"#),
            (
                r#"default;q=1"#,
                r#"RateLimit-Policy "default;q=1": item 1: the policy name must be a String, not the Token default"#,
            ),
            (r#""a";w=1"#, r#"RateLimit-Policy "\"a\";w=1": item 1: q is missing"#),
            (
                r#""a";q=1, "b";q=-1"#,
                r#"RateLimit-Policy "\"a\";q=1, \"b\";q=-1": item 2: q must not be negative, not -1"#,
            ),
            (r#""a";q=1;w=0"#, r#"RateLimit-Policy "\"a\";q=1;w=0": item 1: w must be positive"#),
            (r#""a";q=1.5"#, r#"RateLimit-Policy "\"a\";q=1.5": item 1: q must be an Integer, not the Decimal 1.5"#),
            (
                r#""a";q=1;qu=requests"#,
                r#"RateLimit-Policy "\"a\";q=1;qu=requests": item 1: qu must be a String, not the Token requests"#,
            ),
            (
                r#""a";q=1;pk="x""#,
                r#"RateLimit-Policy "\"a\";q=1;pk=\"x\"": item 1: pk must be a Byte Sequence, not the String "x""#,
            ),
            (r#"("a" "b");q=1"#, r#"RateLimit-Policy "(\"a\" \"b\");q=1": item 1: an inner list, not an Item"#),
        ];
        for (value, message) in policy_errors {
            assert_eq!(parse_policy(value).unwrap_err(), message);
        }
        let state_errors = [
            (r#""a";t=1"#, r#"RateLimit "\"a\";t=1": item 1: r is missing"#),
            (r#""a";r=1;t=?1"#, r#"RateLimit "\"a\";r=1;t=?1": item 1: t must be an Integer, not the Boolean true"#),
        ];
        for (value, message) in state_errors {
            assert_eq!(parse_state(value).unwrap_err(), message);
        }
        // Syntax errors carry the parser's own message after the field.
        for bad in [r#""a";r=1,,"#, r#""a";r=1000000000000000"#, r#""a;r=1"#, r#""a";r=1;pk=:%%:"#, r#""é";r=1"#] {
            let e = parse_state(bad).unwrap_err();
            assert!(e.starts_with(&format!("RateLimit {bad:?}: not a structured-field List: ")), "{e}");
        }
    }

    proptest! {
        #[test]
        fn any_policy_and_state_round_trip_through_a_real_parser(
            rule in "[a-z0-9_-]{1,64}",
            window_ms in any::<u64>(),
            quota in any::<u64>(),
            unit in prop_oneof![Just(QuotaUnit::Requests), Just(QuotaUnit::ContentBytes), Just(QuotaUnit::ConcurrentRequests)],
            identity in proptest::option::of("[ -~]{0,80}"),
            odd_name in "[ -~]{0,40}",
            remaining in any::<u64>(),
            reset_ms in any::<u64>(),
        ) {
            let name = policy_name(&rule, window_ms, None);
            let partition_key = identity.as_deref().map(PartitionKey::of);
            let pk = partition_key.map(|k| k.as_bytes().to_vec());
            let p = Policy { name: &name, quota, window_ms, unit, partition_key };
            let odd = Policy { name: &odd_name, ..p };
            let parsed = parse_policy(&policy_field(&[p, odd]).unwrap()).unwrap();
            let w = window_ms.div_ceil(1000).clamp(1, INTEGER_MAX);
            let qu = match unit {
                QuotaUnit::Requests => None,
                QuotaUnit::ContentBytes => Some("content-bytes".to_owned()),
                QuotaUnit::ConcurrentRequests => Some("concurrent-requests".to_owned()),
            };
            let expected = QuotaPolicy { name: name.clone(), q: quota.min(INTEGER_MAX), w: Some(w), qu, pk: pk.clone() };
            prop_assert_eq!(&parsed[0], &expected);
            prop_assert_eq!(&parsed[1], &QuotaPolicy { name: odd_name.clone(), ..expected });
            let state = parse_state(&state_field(&odd_name, remaining, reset_ms, partition_key)).unwrap();
            let t = reset_ms.div_ceil(1000).min(INTEGER_MAX);
            prop_assert_eq!(state, vec![ServiceLimit { name: odd_name, r: remaining.min(INTEGER_MAX), t: Some(t), pk }]);
        }
    }
}
