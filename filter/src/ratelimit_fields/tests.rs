use super::*;
use wasm_bindgen_test::wasm_bindgen_test;

fn policy(name: &str, quota: u64, window_ms: u64) -> Policy<'_> {
    Policy { name, quota, window_ms, unit: QuotaUnit::Requests, partition_key: None }
}

#[test]
#[wasm_bindgen_test]
fn policy_names_state_the_window_in_its_largest_exact_unit() {
    let cases = [
        (250, "api/250ms"),
        (1000, "api/1s"),
        (1500, "api/1500ms"),
        (30_000, "api/30s"),
        (60_000, "api/1m"),
        (90_000, "api/90s"),
        (5_400_000, "api/90m"),
        (3_600_000, "api/1h"),
        (86_400_000, "api/1d"),
        (172_800_000, "api/2d"),
        (0, "api/0ms"),
    ];
    for (window_ms, expected) in cases {
        assert_eq!(policy_name("api", window_ms, None), expected);
    }
    assert_eq!(policy_name("login_v2", 60_000, Some("token_bucket")), "login_v2/1m/token_bucket");
}

#[test]
#[wasm_bindgen_test]
fn one_policy_carries_name_quota_and_window() {
    assert_eq!(policy_field(&[policy("api/1m", 100, 60_000)]).as_deref(), Some(r#""api/1m";q=100;w=60"#));
}

#[test]
#[wasm_bindgen_test]
fn no_policy_means_no_field() {
    assert_eq!(policy_field(&[]), None);
}

#[test]
#[wasm_bindgen_test]
fn windows_are_rounded_up_to_whole_seconds_and_never_zero() {
    let field = |window_ms| policy_field(&[policy("p", 10, window_ms)]);
    assert_eq!(field(250).as_deref(), Some(r#""p";q=10;w=1"#), "sub-second");
    assert_eq!(field(1).as_deref(), Some(r#""p";q=10;w=1"#));
    assert_eq!(field(0).as_deref(), Some(r#""p";q=10;w=1"#), "w must be non-zero");
    assert_eq!(field(1000).as_deref(), Some(r#""p";q=10;w=1"#));
    assert_eq!(field(1001).as_deref(), Some(r#""p";q=10;w=2"#), "non-integral");
    assert_eq!(field(1500).as_deref(), Some(r#""p";q=10;w=2"#));
    assert_eq!(field(86_400_000).as_deref(), Some(r#""p";q=10;w=86400"#));
}

#[test]
#[wasm_bindgen_test]
fn units_and_partition_keys_follow_the_drafts_parameter_order() {
    let pk = PartitionKey::of("203.0.113.7");
    let p = Policy {
        name: "peruser",
        quota: 65535,
        window_ms: 10_000,
        unit: QuotaUnit::ContentBytes,
        partition_key: Some(pk),
    };
    assert_eq!(policy_field(&[p]).as_deref(), Some(r#""peruser";q=65535;qu="content-bytes";w=10;pk=:9N6ubKYHmdw=:"#));
    let p = Policy { unit: QuotaUnit::ConcurrentRequests, partition_key: None, ..p };
    assert_eq!(policy_field(&[p]).as_deref(), Some(r#""peruser";q=65535;qu="concurrent-requests";w=10"#));
    let p = Policy { unit: QuotaUnit::Requests, ..p };
    assert_eq!(policy_field(&[p]).as_deref(), Some(r#""peruser";q=65535;w=10"#), "requests is the default: no qu");
}

#[test]
#[wasm_bindgen_test]
fn many_policies_form_one_list_in_order() {
    let pk = Some(PartitionKey::of("key~~abc"));
    let names: Vec<String> = (0..16).map(|i| policy_name("r", (i + 1) * 1000, None)).collect();
    let policies: Vec<Policy<'_>> = names
        .iter()
        .enumerate()
        .map(|(i, n)| Policy { partition_key: pk, ..policy(n, i as u64, (i as u64 + 1) * 1000) })
        .collect();
    let field = policy_field(&policies).unwrap();
    let items: Vec<&str> = field.split(", ").collect();
    assert_eq!(items.len(), 16);
    assert_eq!(items[0], r#""r/1s";q=0;w=1;pk=:lEhedW6kMY8=:"#);
    assert_eq!(items[15], r#""r/16s";q=15;w=16;pk=:lEhedW6kMY8=:"#);
    let two = policy_field(&[policy("api/1m", 100, 60_000), policy("api/1d", 10_000, 86_400_000)]);
    assert_eq!(two.as_deref(), Some(r#""api/1m";q=100;w=60, "api/1d";q=10000;w=86400"#));
}

#[test]
#[wasm_bindgen_test]
fn numbers_beyond_fifteen_digits_are_clamped() {
    let p = policy("big", u64::MAX, u64::MAX);
    assert_eq!(policy_field(&[p]).as_deref(), Some(r#""big";q=999999999999999;w=999999999999999"#));
    assert_eq!(state_field("big", u64::MAX, u64::MAX, None), r#""big";r=999999999999999;t=999999999999999"#);
    let just_fits = policy("n", 999_999_999_999_999, 1000);
    assert_eq!(policy_field(&[just_fits]).as_deref(), Some(r#""n";q=999999999999999;w=1"#));
}

#[test]
#[wasm_bindgen_test]
fn the_state_carries_remaining_and_the_reset_rounded_up() {
    assert_eq!(state_field("api/1m", 99, 60_000, None), r#""api/1m";r=99;t=60"#);
    assert_eq!(state_field("api/1m", 0, 59_001, None), r#""api/1m";r=0;t=60"#);
    assert_eq!(state_field("api/1m", 0, 1, None), r#""api/1m";r=0;t=1"#);
    assert_eq!(state_field("api/1m", 5, 0, None), r#""api/1m";r=5;t=0"#);
    let pk = Some(PartitionKey::of("203.0.113.7"));
    assert_eq!(state_field("api/1m", 7, 2500, pk), r#""api/1m";r=7;t=3;pk=:9N6ubKYHmdw=:"#);
}

#[test]
#[wasm_bindgen_test]
fn names_outside_printable_ascii_cannot_break_the_field() {
    assert_eq!(state_field("a\"b\\c\nd", 1, 1000, None), r#""a\"b\\c_d";r=1;t=1"#);
}

#[test]
#[wasm_bindgen_test]
fn partition_keys_are_digests_not_identities() {
    let pk = PartitionKey::of("203.0.113.7");
    assert_eq!(pk.as_bytes(), &[0xf4, 0xde, 0xae, 0x6c, 0xa6, 0x07, 0x99, 0xdc]);
    assert_ne!(PartitionKey::of("203.0.113.8"), pk);
    // Not the plain SHA-256 prefix the filter's internal digests start from.
    assert_ne!(&crate::digest::sha256(b"203.0.113.7")[..8], pk.as_bytes());
}
