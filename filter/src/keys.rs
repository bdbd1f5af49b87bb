//! Redis key names for one limit of one client.
//!
//! `<domain>:{<identity>}:<rule>:<algorithm>:<window ms>[:<window index>]`
//!
//! Every key of one identity carries the same hash tag `{<identity>}`, so one
//! script call covering all its limits stays on one Redis Cluster slot. The
//! window length is part of the name, so a changed window starts fresh while
//! a changed limit keeps its count (raising a limit takes effect at once).
//! The identity must already be escaped (see `identity`): no `{`, `}` or
//! control characters.

use std::fmt::Write;

use crate::algorithm::Algorithm;
use crate::model::LimitSpec;

/// Appends the keys of one limit to `out`: sliding_window needs the current
/// and the previous window's counter, the others one key. A fixed window
/// staggered by `offset_ms` counts in windows shifted by that much, named
/// `fo` instead of `fw` (turning staggering on starts fresh counters rather
/// than mixing counts of differently aligned windows).
pub fn limit_keys(
    out: &mut Vec<String>,
    domain: &str,
    identity: &str,
    rule: &str,
    spec: &LimitSpec,
    now_ms: u64,
    offset_ms: Option<u64>,
) {
    let window = spec.window_ms.max(1);
    let staggered = offset_ms.is_some() && spec.algorithm == Algorithm::FixedWindow;
    let index = now_ms.saturating_add(if staggered { offset_ms.unwrap_or(0) } else { 0 }) / window;
    let code = if staggered { "fo" } else { spec.algorithm.code() };
    let mut base = String::with_capacity(domain.len() + identity.len() + rule.len() + 32);
    // Writing to a String cannot fail.
    let _ = write!(base, "{domain}:{{{identity}}}:{rule}:{code}:{window}");
    match spec.algorithm {
        Algorithm::SlidingWindow => {
            out.push(format!("{base}:{index}"));
            out.push(format!("{base}:{}", index.wrapping_sub(1)));
        }
        Algorithm::FixedWindow => out.push(format!("{base}:{index}")),
        _ => out.push(base),
    }
}

/// The Redis Cluster hash slot of keys tagged `{tag}`: CRC16 (XMODEM) of
/// the tag, modulo 16384, as Redis computes it.
pub fn cluster_slot(tag: &str) -> u16 {
    let mut crc: u16 = 0;
    for &b in tag.as_bytes() {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn keys(algorithm: Algorithm, now: u64) -> Vec<String> {
        let spec = LimitSpec { algorithm, limit: 100, window_ms: 60_000, burst: 100 };
        let mut out = Vec::new();
        limit_keys(&mut out, "shop", "k=abc", "api", &spec, now, None);
        out
    }

    #[test]
    #[wasm_bindgen_test]
    fn windowed_keys_carry_the_window_index() {
        assert_eq!(
            keys(Algorithm::SlidingWindow, 120_000),
            ["shop:{k=abc}:api:sw:60000:2", "shop:{k=abc}:api:sw:60000:1"]
        );
        assert_eq!(keys(Algorithm::FixedWindow, 179_999), ["shop:{k=abc}:api:fw:60000:2"]);
    }

    #[test]
    #[wasm_bindgen_test]
    fn cluster_slots_are_redis_crc16() {
        // CRC16/XMODEM of "123456789" is 0x31C3 (Redis Cluster spec).
        assert_eq!(cluster_slot("123456789"), 0x31C3); // already below 16384
                                                       // CLUSTER KEYSLOT foo = 12182, bar = 5061.
        assert_eq!(cluster_slot("foo"), 12182);
        assert_eq!(cluster_slot("bar"), 5061);
    }

    #[test]
    #[wasm_bindgen_test]
    fn clock_read_in_the_store_needs_no_index() {
        assert_eq!(keys(Algorithm::TokenBucket, 5), ["shop:{k=abc}:api:tb:60000"]);
        assert_eq!(keys(Algorithm::SlidingLog, 5), ["shop:{k=abc}:api:sl:60000"]);
        assert_eq!(keys(Algorithm::Gcra, 5), ["shop:{k=abc}:api:gc:60000"]);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_staggered_fixed_window_is_named_apart_and_indexed_by_its_shifted_window() {
        let spec = LimitSpec { algorithm: Algorithm::FixedWindow, limit: 100, window_ms: 60_000, burst: 100 };
        let mut out = Vec::new();
        limit_keys(&mut out, "shop", "k", "api", &spec, 119_999, Some(1));
        limit_keys(&mut out, "shop", "k", "api", &spec, 119_998, Some(1));
        assert_eq!(out, ["shop:{k}:api:fo:60000:2", "shop:{k}:api:fo:60000:1"]);
    }
}
