//! The deny cache: clients known to be blocked are answered without a
//! store call. Only denials are stored, each until the retry_after instant
//! the store returned, so it can never admit what the store would refuse.
//!
//! A fixed number of slots in shared data, keyed by the fingerprint of
//! (rule, limit with its parameters, identity); the full fingerprint is kept
//! in the entry so a client never inherits another's denial from a shared
//! slot, and a changed limit never matches entries made under the old one.
//! With operators' overrides on, an entry is also trusted no longer than
//! `overrides.within` after the store decided it: an override written
//! since then applies on this proxy by that time.

use std::num::NonZeroU32;

use crate::outcome::LimitOutcome;
use crate::shared::{read_u64s, write_u64s, SharedData};
use crate::time::{Instant, Millis};

/// A cached denial.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DenyEntry {
    /// Until when the client is denied.
    pub deny_until: Instant,
    /// When the limit is fully available again.
    pub reset_at: Instant,
    /// What the store reported as remaining.
    pub remaining: u64,
    /// The limit an override had the store decide with (0: blocked);
    /// `None`: the configuration's.
    pub limit: Option<u64>,
    /// Until when this proxy trusts it (at most `deny_until`).
    pub trusted_until: Instant,
}

impl DenyEntry {
    /// The denial `o` says (a retry of `retry_ms`), decided by the store on
    /// or after `at`; trusted until its retry instant, and with overrides
    /// on (`within`) no longer than `within` after `at`.
    pub fn of(at: Instant, o: &LimitOutcome, retry_ms: u64, within: Option<Millis>) -> DenyEntry {
        let deny_until = at.after(retry_ms);
        DenyEntry {
            deny_until,
            reset_at: at.after(o.reset_ms),
            remaining: o.remaining,
            limit: o.overridden.map(|v| v.limit),
            trusted_until: within.map_or(deny_until, |w| deny_until.min(at.after(w.ms()))),
        }
    }
}

/// The deny cache over `slots` shared-data entries.
pub struct DenyCache<'a, S: SharedData + ?Sized> {
    shared: &'a S,
    slots: NonZeroU32,
}

fn slot_key(fp: u64, slots: NonZeroU32) -> String {
    format!("ratelimit.deny.{}", fp % u64::from(slots.get()))
}

impl<'a, S: SharedData + ?Sized> DenyCache<'a, S> {
    /// The cache in `shared`.
    pub fn new(shared: &'a S, slots: NonZeroU32) -> DenyCache<'a, S> {
        DenyCache { shared, slots }
    }

    /// The denial in force for `fp` at `now`, if any.
    pub fn lookup(&self, fp: u64, now: Instant) -> Option<DenyEntry> {
        let (bytes, _) = self.shared.get(&slot_key(fp, self.slots))?;
        let [stored, deny_until, reset_at, remaining, limit, trusted_until] = read_u64s::<6>(&bytes)?;
        let entry = DenyEntry {
            deny_until: Instant::from_ms(deny_until),
            reset_at: Instant::from_ms(reset_at),
            remaining,
            // Written one more than it is, 0 for none.
            limit: limit.checked_sub(1),
            trusted_until: Instant::from_ms(trusted_until),
        };
        (stored == fp && entry.deny_until > now && entry.trusted_until > now).then_some(entry)
    }

    /// Remembers a denial. The newest denial wins an entry; if another worker
    /// writes the entry at the same moment, theirs stands.
    pub fn remember(&self, fp: u64, entry: DenyEntry) {
        let key = slot_key(fp, self.slots);
        let cas = self.shared.get(&key).map(|(_, cas)| cas);
        let limit = entry.limit.map_or(0, |l| l.saturating_add(1));
        let e = entry;
        let bytes = write_u64s([fp, e.deny_until.ms(), e.reset_at.ms(), e.remaining, limit, e.trusted_until.ms()]);
        let _ = self.shared.set(&key, &bytes, cas);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::{entry_fingerprint, IdentityDigest};
    use crate::shared::fake::FakeShared;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn slots(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    const E: DenyEntry = DenyEntry {
        deny_until: Instant::from_ms(2_000),
        reset_at: Instant::from_ms(5_000),
        remaining: 0,
        limit: None,
        trusted_until: Instant::from_ms(2_000),
    };

    #[test]
    #[wasm_bindgen_test]
    fn a_denial_holds_until_its_retry_instant_and_not_a_ms_longer() {
        let shared = FakeShared::default();
        let cache = DenyCache::new(&shared, slots(16));
        let fp = entry_fingerprint(7, &IdentityDigest::of("1.2.3.4"));
        cache.remember(fp, E);
        assert_eq!(cache.lookup(fp, Instant::from_ms(1_999)), Some(E));
        assert_eq!(cache.lookup(fp, Instant::from_ms(2_000)), None);
    }

    #[test]
    #[wasm_bindgen_test]
    fn with_overrides_on_a_denial_is_trusted_no_longer_than_within_after_its_decision() {
        let shared = FakeShared::default();
        let cache = DenyCache::new(&shared, slots(16));
        let fp = entry_fingerprint(7, &IdentityDigest::of("1.2.3.4"));
        let denied = |limit: Option<u64>| LimitOutcome {
            allowed: false,
            remaining: 0,
            reset_ms: 60_000,
            retry_after_ms: Some(30_000),
            overridden: limit.map(|limit| crate::outcome::Overridden { limit, reset: false }),
        };
        let at = Instant::from_ms(10_000);
        let entry = DenyEntry::of(at, &denied(Some(20)), 30_000, Some(Millis::of(1_000)));
        assert_eq!((entry.deny_until, entry.trusted_until, entry.limit), (at.after(30_000), at.after(1_000), Some(20)));
        cache.remember(fp, entry);
        assert_eq!(cache.lookup(fp, at.after(999)), Some(entry), "its Retry-After is still the store's");
        assert_eq!(cache.lookup(fp, at.after(1_000)), None, "past within: the store decides again");
        // Off, it is trusted until its retry; a block keeps its 0.
        let entry = DenyEntry::of(at, &denied(None), 30_000, None);
        assert_eq!((entry.trusted_until, entry.limit), (at.after(30_000), None));
        cache.remember(fp, entry);
        assert_eq!(cache.lookup(fp, at.after(29_999)), Some(entry));
        cache.remember(fp, DenyEntry::of(at, &denied(Some(0)), 5_000, Some(Millis::of(60_000))));
        assert_eq!(cache.lookup(fp, at).map(|e| (e.limit, e.trusted_until)), Some((Some(0), at.after(5_000))));
        // An entry of the former layout (four fields) reads as none.
        shared.set(&slot_key(fp, slots(16)), &write_u64s([fp, u64::MAX, u64::MAX, 0]), None);
        assert_eq!(cache.lookup(fp, at), None);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_client_never_inherits_a_denial_from_a_shared_slot() {
        let shared = FakeShared::default();
        let cache = DenyCache::new(&shared, slots(1)); // every client in one slot
        cache.remember(entry_fingerprint(7, &IdentityDigest::of("alice")), E);
        assert_eq!(cache.lookup(entry_fingerprint(7, &IdentityDigest::of("bob")), Instant::from_ms(0)), None);
        assert_eq!(
            cache.lookup(entry_fingerprint(8, &IdentityDigest::of("alice")), Instant::from_ms(0)),
            None,
            "another limit (or changed parameters)"
        );
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_slot_count_bounds_shared_data() {
        let shared = FakeShared::default();
        let cache = DenyCache::new(&shared, slots(8));
        for i in 0..1000 {
            cache.remember(entry_fingerprint(1, &IdentityDigest::of(&format!("client{i}"))), E);
        }
        assert!(shared.len() <= 8);
    }
}
