//! The local fallback bucket: while the store fails, an open rule admits at
//! most limit / fleet_size per window per identity on this proxy, counted in
//! shared data so every worker of the proxy spends the same budget.
//!
//! Aligned windows, one counter per (rule, limit, identity) in a fixed set
//! of entries. Two identities that share an entry take it over from each other
//! (a reset count): during an outage that can only admit more, never less.
//!
//! A concurrency limit's share counts streams held here instead, until an
//! expiry each hold or renewal pushes `max_hold` ahead: released when its
//! streams end (`release_permit`), and forgotten if nobody renews it (a VM
//! reloaded with streams open leaks nothing past `max_hold`). Such an
//! entry is never taken over while it holds streams: once the store is
//! back, its count is what keeps the client within its limit (the streams
//! it counts are not in the store yet), so a newcomer sharing its entry,
//! of any limit, is refused locally instead (a charge's share is not
//! spent).

use crate::time::Instant;
use std::num::NonZeroU32;

use crate::algorithm::CC_RETRY_MS;
use crate::outcome::LimitOutcome;
use crate::shared::{self, read_u64s, write_u64s, Change, SharedData, CAS_ATTEMPTS};

/// One limit to charge in the fallback.
#[derive(Clone, Copy, Debug)]
pub struct FallbackLimit {
    /// Fingerprint of (rule, limit, identity).
    pub fingerprint: u64,
    /// This proxy's share: limit / fleet_size.
    pub share: u64,
    /// Window length in ms.
    pub window_ms: u64,
    /// Units this request takes from it.
    pub cost: u64,
    /// A concurrency limit: streams held, each share entry living this
    /// long unrenewed (`window_ms` unused).
    pub hold_ms: Option<u64>,
}

/// The top bit of a stored fingerprint: set on concurrency entries, so
/// that any newcomer to an entry can tell one holding streams.
const HOLDS: u64 = 1 << 63;

/// `l`'s fingerprint as its entry stores it.
fn stored(l: &FallbackLimit) -> u64 {
    match l.hold_ms {
        Some(_) => l.fingerprint | HOLDS,
        None => l.fingerprint & !HOLDS,
    }
}

/// Whether a share entry counts another client's streams, live: not to be
/// taken over (see the module's doc).
fn holds_others(l: &FallbackLimit, entry: Option<[u64; 3]>, now: Instant) -> bool {
    let now_ms = now.ms();
    matches!(entry, Some([fp, until, c]) if fp & HOLDS != 0 && fp != stored(l) && until > now_ms && c > 0)
}

/// What a share entry holds now: its count, if it is this limit's, in this
/// window (or, for concurrency, not yet expired).
fn held(l: &FallbackLimit, entry: Option<[u64; 3]>, now: Instant) -> u64 {
    let now_ms = now.ms();
    match (entry, l.hold_ms) {
        (Some([fp, until, c]), Some(_)) if fp == stored(l) && until > now_ms => c,
        (Some([fp, i, c]), None) if fp == stored(l) && i == now_ms / l.window_ms.max(1) => c,
        _ => 0,
    }
}

fn slot_key(fp: u64, slots: NonZeroU32) -> String {
    format!("ratelimit.fallback.{}", fp % u64::from(slots.get()))
}

/// Decides one rule's limits locally, all or nothing; returns one outcome
/// per limit. Charges each limit its cost if all allow.
pub fn admit<S: SharedData + ?Sized>(
    shared: &S,
    slots: NonZeroU32,
    limits: &[FallbackLimit],
    now: Instant,
) -> Vec<LimitOutcome> {
    let now_ms = now.ms();
    // Several keys at once: each write guarded by its own read's CAS.
    for _ in 0..CAS_ATTEMPTS {
        let mut reads = Vec::with_capacity(limits.len());
        let mut outcomes = Vec::with_capacity(limits.len());
        for l in limits {
            let key = slot_key(l.fingerprint, slots);
            let window = l.window_ms.max(1);
            let got = shared.get(&key);
            let entry = got.as_ref().and_then(|(b, _)| read_u64s::<3>(b));
            let count = held(l, entry, now);
            let cost = l.cost;
            let allowed = count.saturating_add(cost) <= l.share && !holds_others(l, entry, now);
            let remaining = if allowed { l.share - count - cost } else { l.share.saturating_sub(count) };
            // The entry's second field: a window's index, or until when the
            // streams held count. A stream's end is unknown: a denied one
            // retries in a second.
            let ends_in = window - now_ms % window;
            let (reset_ms, wait, stamp) = match l.hold_ms {
                Some(hold) => (0, CC_RETRY_MS, now_ms.saturating_add(hold)),
                None => (ends_in, ends_in, now_ms / window),
            };
            outcomes.push(LimitOutcome {
                allowed,
                remaining,
                reset_ms,
                retry_after_ms: if allowed { Some(0) } else { Some(wait) },
                overridden: None,
            });
            reads.push((key, got.map(|(_, cas)| cas), [stored(l), stamp, count.saturating_add(cost)]));
        }
        if outcomes.iter().any(|d| !d.allowed) {
            return outcomes;
        }
        // Each CAS guards one slot; if another worker moved any of them,
        // decide again from fresh counts.
        if reads.iter().all(|(key, cas, next)| shared.set(key, &write_u64s(*next), *cas)) {
            return outcomes;
        }
    }
    // Persistent contention: refuse rather than admit uncounted.
    limits
        .iter()
        .map(|l| LimitOutcome {
            allowed: false,
            remaining: 0,
            reset_ms: l.window_ms,
            retry_after_ms: Some(1),
            overridden: None,
        })
        .collect()
}

/// Adds each limit's cost unconditionally: a charge the store could not
/// take (after the response, nothing can be refused any more), so the
/// proxy's own fallback share still feels it.
pub fn charge<S: SharedData + ?Sized>(shared: &S, slots: NonZeroU32, limits: &[FallbackLimit], now: Instant) {
    let now_ms = now.ms();
    for l in limits {
        let index = now_ms / l.window_ms.max(1);
        let _ = shared::update(shared, &slot_key(l.fingerprint, slots), |bytes| {
            let entry = bytes.and_then(read_u64s::<3>);
            if holds_others(l, entry, now) {
                return Change::Leave(());
            }
            Change::Put(write_u64s([stored(l), index, held(l, entry, now).saturating_add(l.cost)]), ())
        });
    }
}

/// Streams held in the local share of concurrency limit `l` now.
pub fn streams_held<S: SharedData + ?Sized>(shared: &S, slots: NonZeroU32, l: &FallbackLimit, now: Instant) -> u64 {
    let entry = shared.get(&slot_key(l.fingerprint, slots));
    held(l, entry.as_ref().and_then(|(b, _)| read_u64s::<3>(b)), now)
}

/// A stream holding a permit of the local share of concurrency limit `l`
/// ended: one stream fewer (nothing if the entry expired or was taken
/// over meanwhile).
pub fn release_permit<S: SharedData + ?Sized>(shared: &S, slots: NonZeroU32, l: &FallbackLimit, now: Instant) {
    update_permits(shared, slots, l, now, |until, count| Some([until, count.checked_sub(1)?]));
}

/// A stream holding a permit of the local share lives on: the entry lives
/// `hold_ms` more (counting the stream again if the entry had expired).
pub fn renew_permit<S: SharedData + ?Sized>(shared: &S, slots: NonZeroU32, l: &FallbackLimit, now: Instant) {
    let now_ms = now.ms();
    let until = now_ms.saturating_add(l.hold_ms.unwrap_or(0));
    update_permits(shared, slots, l, now, |_, count| Some([until, count.max(1)]));
}

fn update_permits<S, F>(shared: &S, slots: NonZeroU32, l: &FallbackLimit, now: Instant, change: F)
where
    S: SharedData + ?Sized,
    F: Fn(u64, u64) -> Option<[u64; 2]>,
{
    let _ = shared::update(shared, &slot_key(l.fingerprint, slots), |bytes| {
        let entry = bytes.and_then(read_u64s::<3>);
        if holds_others(l, entry, now) {
            return Change::Leave(());
        }
        let until = entry.map_or(0, |[_, until, _]| until);
        match change(until, held(l, entry, now)) {
            Some([until, count]) => Change::Put(write_u64s([stored(l), until, count]), ()),
            None => Change::Leave(()),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::fake::FakeShared;
    use wasm_bindgen_test::wasm_bindgen_test;

    const SLOTS: NonZeroU32 = NonZeroU32::MIN.saturating_add(63);

    fn limit(fp: u64, share: u64) -> FallbackLimit {
        FallbackLimit { fingerprint: fp, share, window_ms: 1000, cost: 1, hold_ms: None }
    }

    #[test]
    #[wasm_bindgen_test]
    fn admits_exactly_the_share_per_window() {
        let shared = FakeShared::default();
        let admitted =
            (0..10).filter(|_| admit(&shared, SLOTS, &[limit(1, 3)], Instant::from_ms(5_500))[0].allowed).count();
        assert_eq!(admitted, 3);
        let d = admit(&shared, SLOTS, &[limit(1, 3)], Instant::from_ms(5_999));
        assert_eq!((d[0].allowed, d[0].retry_after_ms), (false, Some(1)));
        assert!(
            admit(&shared, SLOTS, &[limit(1, 3)], Instant::from_ms(6_000))[0].allowed,
            "the next window starts afresh"
        );
    }

    #[test]
    #[wasm_bindgen_test]
    fn all_or_nothing_across_a_rules_limits() {
        let shared = FakeShared::default();
        assert!(admit(&shared, SLOTS, &[limit(1, 5), limit(2, 1)], Instant::from_ms(0)).iter().all(|d| d.allowed));
        let d = admit(&shared, SLOTS, &[limit(1, 5), limit(2, 1)], Instant::from_ms(1));
        assert!(d[0].allowed && !d[1].allowed);
        assert_eq!(
            admit(&shared, SLOTS, &[limit(1, 5)], Instant::from_ms(2))[0].remaining,
            3,
            "the denied request spent nothing"
        );
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_charge_that_failed_at_the_store_spends_the_local_share() {
        let shared = FakeShared::default();
        charge(&shared, SLOTS, &[FallbackLimit { cost: 2, ..limit(1, 3) }], Instant::from_ms(5_000));
        assert_eq!(
            admit(&shared, SLOTS, &[limit(1, 3)], Instant::from_ms(5_001))[0].remaining,
            0,
            "3 - 2 charged - 1 now"
        );
        charge(&shared, SLOTS, &[FallbackLimit { cost: 5, ..limit(1, 3) }], Instant::from_ms(5_002));
        assert!(
            !admit(&shared, SLOTS, &[limit(1, 3)], Instant::from_ms(5_003))[0].allowed,
            "in debt until the window ends"
        );
        assert!(admit(&shared, SLOTS, &[limit(1, 3)], Instant::from_ms(6_000))[0].allowed);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_concurrency_share_counts_streams_until_released_or_unrenewed_for_max_hold() {
        let shared = FakeShared::default();
        let cc = FallbackLimit { hold_ms: Some(3_000), ..limit(9, 2) };
        assert!(admit(&shared, SLOTS, &[cc], Instant::from_ms(0))[0].allowed);
        assert!(admit(&shared, SLOTS, &[cc], Instant::from_ms(1))[0].allowed);
        let full = admit(&shared, SLOTS, &[cc], Instant::from_ms(2))[0];
        assert_eq!((full.allowed, full.remaining, full.reset_ms, full.retry_after_ms), (false, 0, 0, Some(1000)));
        release_permit(&shared, SLOTS, &cc, Instant::from_ms(3));
        assert!(admit(&shared, SLOTS, &[cc], Instant::from_ms(4))[0].allowed, "a stream ended: its slot is free");
        // Renewed at 2 s, the entry holds until 5 s; then nobody renews it.
        renew_permit(&shared, SLOTS, &cc, Instant::from_ms(2_000));
        assert!(!admit(&shared, SLOTS, &[cc], Instant::from_ms(4_999))[0].allowed);
        assert_eq!(admit(&shared, SLOTS, &[cc], Instant::from_ms(5_000))[0].remaining, 1, "forgotten after max_hold");
        release_permit(&shared, SLOTS, &cc, Instant::from_ms(5_001));
        release_permit(&shared, SLOTS, &cc, Instant::from_ms(5_002));
        assert_eq!(admit(&shared, SLOTS, &[cc], Instant::from_ms(5_003))[0].remaining, 1, "never below zero");
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_concurrency_share_holding_streams_is_never_taken_over_by_a_client_sharing_its_slot() {
        let shared = FakeShared::default();
        // Fingerprints 9 and 73 share an entry of 64.
        let (mine, other) = (
            FallbackLimit { hold_ms: Some(3_000), ..limit(9, 2) },
            FallbackLimit { hold_ms: Some(3_000), ..limit(73, 2) },
        );
        assert!(admit(&shared, SLOTS, &[mine], Instant::from_ms(0))[0].allowed);
        // The other client is refused while my stream is held, and neither
        // its renewal nor its release touches my count.
        let refused = admit(&shared, SLOTS, &[other], Instant::from_ms(1))[0];
        assert_eq!((refused.allowed, refused.retry_after_ms), (false, Some(1000)));
        renew_permit(&shared, SLOTS, &other, Instant::from_ms(2));
        release_permit(&shared, SLOTS, &other, Instant::from_ms(3));
        assert_eq!(streams_held(&shared, SLOTS, &mine, Instant::from_ms(4)), 1, "my stream still counts");
        // Released (or forgotten after max_hold), the entry is free for it.
        release_permit(&shared, SLOTS, &mine, Instant::from_ms(5));
        assert!(admit(&shared, SLOTS, &[other], Instant::from_ms(6))[0].allowed);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_rate_limit_sharing_the_slot_of_held_streams_neither_takes_it_over_nor_is_charged_there() {
        let shared = FakeShared::default();
        let cc = FallbackLimit { hold_ms: Some(3_000), ..limit(9, 2) };
        assert!(admit(&shared, SLOTS, &[cc], Instant::from_ms(0))[0].allowed);
        // A rate limit of another client in the same slot (73 = 9 + 64).
        charge(&shared, SLOTS, &[FallbackLimit { cost: 5, ..limit(73, 3) }], Instant::from_ms(1));
        assert!(!admit(&shared, SLOTS, &[limit(73, 3)], Instant::from_ms(2))[0].allowed);
        assert_eq!(streams_held(&shared, SLOTS, &cc, Instant::from_ms(3)), 1);
    }
}
