//! The deny cache: clients known to be blocked are answered without a
//! store call. Only denials are stored, each until the retry_after instant
//! the store returned, so it can never admit what the store would refuse.
//!
//! A fixed number of slots in shared data, keyed by the fingerprint of
//! (rule, limit with its parameters, identity); the full fingerprint is kept
//! in the entry so a client never inherits another's denial from a shared
//! slot, and a changed limit never matches entries made under the old one.

use std::num::NonZeroU32;

use crate::shared::{read_u64s, write_u64s, SharedData};
use crate::time::Instant;

/// A cached denial.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DenyEntry {
    /// Until when the client is denied.
    pub deny_until: Instant,
    /// When the limit is fully available again.
    pub reset_at: Instant,
    /// What the store reported as remaining.
    pub remaining: u64,
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
        let [stored, deny_until, reset_at, remaining] = read_u64s::<4>(&bytes)?;
        let entry =
            DenyEntry { deny_until: Instant::from_ms(deny_until), reset_at: Instant::from_ms(reset_at), remaining };
        (stored == fp && entry.deny_until > now).then_some(entry)
    }

    /// Remembers a denial. The newest denial wins an entry; if another worker
    /// writes the entry at the same moment, theirs stands.
    pub fn remember(&self, fp: u64, entry: DenyEntry) {
        let key = slot_key(fp, self.slots);
        let cas = self.shared.get(&key).map(|(_, cas)| cas);
        let bytes = write_u64s([fp, entry.deny_until.ms(), entry.reset_at.ms(), entry.remaining]);
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

    const E: DenyEntry =
        DenyEntry { deny_until: Instant::from_ms(2_000), reset_at: Instant::from_ms(5_000), remaining: 0 };

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
