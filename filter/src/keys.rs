//! Redis key names for one limit of one client.
//!
//! `<domain>:{<identity>}:<rule>:<algorithm>:<window ms>[:<window index>]`,
//! and for a concurrency limit `<domain>:{<identity>}:<rule>:cc`: how long a
//! slot lives unrenewed (its "window") is each slot's own expiry, so a
//! changed `max_hold` keeps counting the streams in flight.
//!
//! A fixed window with an offset works on `now + offset`, and its code in
//! the key is `fo` instead of `fw`: switching offsets on never mixes its
//! counts with those of the aligned windows.
//!
//! Every key of one identity carries the same hash tag `{<identity>}`, so one
//! script call covering all its limits stays on one Redis Cluster slot. The
//! window length is part of the name, so a changed window starts fresh while
//! a changed limit keeps its count (raising a limit takes effect at once).
//! The identity must already be escaped (see `identity`): no `{`, `}` or
//! control characters.

use std::fmt::Write;

use crate::algorithm::Algorithm;
use crate::spec::LimitSpec;
use crate::time::Instant;

/// The longest identity a key carries as it is; a longer one is replaced
/// by its digest (see `identity`), so a key's length is bounded.
pub const MAX_IDENTITY: usize = 64;

/// Appends the keys of one limit to `out`: sliding_window needs the current
/// and the previous window's counter, the others one key. `offset_ms`
/// shifts a fixed window's boundaries (ignored by the other algorithms).
pub fn limit_keys(
    out: &mut Vec<String>,
    domain: &str,
    identity: &str,
    rule: &str,
    spec: &LimitSpec,
    offset_ms: Option<u64>,
    now: Instant,
) {
    let window = spec.window_ms.max(1);
    let offset = shift(spec, offset_ms);
    let index = now.ms().saturating_add(offset.unwrap_or(0)) / window;
    let code = key_code(spec, offset_ms);
    let mut base = String::with_capacity(domain.len() + identity.len() + rule.len() + 32);
    // Writing to a String cannot fail.
    let _ = write!(base, "{domain}:{{{identity}}}:{rule}:{code}");
    if spec.algorithm != Algorithm::Concurrency {
        let _ = write!(base, ":{window}");
    }
    match spec.algorithm {
        Algorithm::SlidingWindow => {
            out.push(format!("{base}:{index}"));
            out.push(format!("{base}:{}", index.wrapping_sub(1)));
        }
        Algorithm::FixedWindow => out.push(format!("{base}:{index}")),
        _ => out.push(base),
    }
}

/// The key of an operator's override of `rule` for one client:
/// `<domain>:{<identity>}:<rule>:override`, in the client's hash slot (its
/// hash tag is the client's keys'), written with `redis-cli` and read by
/// the decision script with the counts (`lua/override.lua`).
pub fn override_key(domain: &str, identity: &str, rule: &str) -> String {
    format!("{domain}:{{{identity}}}:{rule}:override")
}

/// The index of overrides of `domain`: a set whose members are the
/// override keys an operator wrote (`store::override_index`). In no
/// client's hash slot: polled by a call of its own.
pub fn override_index_key(domain: &str) -> String {
    format!("{domain}:overrides")
}

/// The code in a limit's key names: its algorithm's, or `fo` for a fixed
/// window with an offset.
pub fn key_code(spec: &LimitSpec, offset_ms: Option<u64>) -> &'static str {
    match shift(spec, offset_ms) {
        Some(_) => "fo",
        None => spec.algorithm.code(),
    }
}

/// The offset that shifts this limit's windows: fixed windows only.
fn shift(spec: &LimitSpec, offset_ms: Option<u64>) -> Option<u64> {
    offset_ms.filter(|_| spec.algorithm == Algorithm::FixedWindow)
}

/// A Redis Cluster hash slot (0 to 16383): which shard holds a client's
/// keys, and which breaker guards them. Not a concurrency permit
/// (`spec::PermitId`) nor a shared-data table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HashSlot(pub u16);

impl std::fmt::Display for HashSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The Redis Cluster hash slot of keys tagged `{tag}`: CRC16 (XMODEM) of
/// the tag, modulo 16384, as Redis computes it.
pub fn cluster_slot(tag: &str) -> HashSlot {
    let mut crc: u16 = 0;
    for &b in tag.as_bytes() {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    HashSlot(crc % 16384)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn keys(algorithm: Algorithm, now: u64) -> Vec<String> {
        keys_with_offset(algorithm, None, now)
    }

    fn keys_with_offset(algorithm: Algorithm, offset: Option<u64>, now: u64) -> Vec<String> {
        let spec = LimitSpec { algorithm, limit: 100, window_ms: 60_000, burst: 100 };
        let mut out = Vec::new();
        limit_keys(&mut out, "shop", "k=abc", "api", &spec, offset, Instant::from_ms(now));
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
    fn shifted_fixed_windows_have_their_own_code_and_index() {
        // 179_999 + 1 = 180_000: the shifted window 3 has begun.
        assert_eq!(keys_with_offset(Algorithm::FixedWindow, Some(1), 179_999), ["shop:{k=abc}:api:fo:60000:3"]);
        assert_eq!(keys_with_offset(Algorithm::FixedWindow, Some(0), 179_999), ["shop:{k=abc}:api:fo:60000:2"]);
        assert_eq!(keys_with_offset(Algorithm::FixedWindow, None, 179_999), ["shop:{k=abc}:api:fw:60000:2"]);
        // Only fixed windows shift.
        assert_eq!(
            keys_with_offset(Algorithm::SlidingWindow, Some(1), 179_999),
            ["shop:{k=abc}:api:sw:60000:2", "shop:{k=abc}:api:sw:60000:1"]
        );
    }

    #[test]
    #[wasm_bindgen_test]
    fn cluster_slots_are_redis_crc16() {
        // CRC16/XMODEM of "123456789" is 0x31C3 (Redis Cluster spec).
        assert_eq!(cluster_slot("123456789"), HashSlot(0x31C3)); // already below 16384
                                                                 // CLUSTER KEYSLOT foo = 12182, bar = 5061.
        assert_eq!(cluster_slot("foo"), HashSlot(12182));
        assert_eq!(cluster_slot("bar"), HashSlot(5061));
    }

    #[test]
    #[wasm_bindgen_test]
    fn an_override_sits_in_its_clients_hash_slot() {
        let key = override_key("shop", "k=abc", "api");
        assert_eq!(key, "shop:{k=abc}:api:override");
        let counts = keys(Algorithm::SlidingWindow, 5);
        assert!(counts.iter().all(|k| k.starts_with("shop:{k=abc}:api:")), "{counts:?}");
        assert_eq!(cluster_slot("k=abc"), cluster_slot(&key[key.find('{').unwrap() + 1..key.find('}').unwrap()]));
    }

    #[test]
    #[wasm_bindgen_test]
    fn clock_read_in_the_store_needs_no_index() {
        assert_eq!(keys(Algorithm::TokenBucket, 5), ["shop:{k=abc}:api:tb:60000"]);
        assert_eq!(keys(Algorithm::SlidingLog, 5), ["shop:{k=abc}:api:sl:60000"]);
        assert_eq!(keys(Algorithm::Gcra, 5), ["shop:{k=abc}:api:gc:60000"]);
    }
}
