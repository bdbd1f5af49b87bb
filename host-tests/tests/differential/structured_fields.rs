//! `ratelimit::ratelimit_fields::sf`, the three RFC 9651 bare items the
//! RateLimit fields are made of, against the `sfv` parser: every string,
//! integer and byte sequence the filter writes parses to exactly what went
//! in (a string's bytes outside printable ASCII as `_`, an integer clamped
//! to the largest sf-integer).

use proptest::prelude::*;
use ratelimit::ratelimit_fields::sf;
use sfv::{BareItem, Item, Parser};

/// `"<s>";n=<n>;b=:<bytes>:` as the filter writes it.
fn item(s: &str, n: u64, bytes: &[u8]) -> String {
    let mut out = String::new();
    sf::string(&mut out, s);
    out.push_str(";n=");
    sf::integer(&mut out, n);
    out.push_str(";b=");
    sf::byte_sequence(&mut out, bytes);
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn every_item_the_filter_writes_parses_to_what_went_in(s in any::<String>(), n in any::<u64>(), bytes in prop::collection::vec(any::<u8>(), 0..40)) {
        let text = item(&s, n, &bytes);
        let parsed: Item = Parser::new(&text).parse_item().map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        let printable: String = s.bytes().map(|b| if (0x20..=0x7e).contains(&b) { b as char } else { '_' }).collect();
        prop_assert_eq!(parsed.bare_item, BareItem::String(sfv::String::from_string(printable).unwrap()));
        let param = |k: &str| parsed.params.iter().find(|(key, _)| key.as_str() == k).map(|(_, v)| v.clone());
        let clamped = i64::try_from(n.min(sf::INTEGER_MAX)).unwrap();
        prop_assert_eq!(param("n"), Some(BareItem::Integer(sfv::Integer::try_from(clamped).unwrap())));
        prop_assert_eq!(param("b"), Some(BareItem::ByteSequence(bytes)));
    }
}
