//! The proxy's leases: a fixed number of shared-data slots (shared data
//! has no delete, so a table keyed by identity would grow forever), each
//! holding at most one lease. A lease is found by its fingerprint, spent
//! one request at a time with compare-and-swap (two workers never spend
//! one unit twice), and lost, never doubled, when another client's lease
//! takes its slot or two first writes race: a lost lease admits less,
//! never more.

use std::num::NonZeroU32;

use super::record::LeaseRecord;
use crate::shared::SharedData;

/// Compare-and-swap attempts before a spend gives way to the store.
const ATTEMPTS: usize = 8;

/// What spending one request of a lease came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spend {
    /// Admitted from the lease; the lease as it is after this request.
    Admitted(LeaseRecord),
    /// No live lease of this fingerprint here: ask the store.
    NoLease,
    /// Other workers kept winning the slot: ask the store.
    Contended,
}

/// The leases over `slots` shared-data entries.
pub struct LeaseTable<'a, S: SharedData + ?Sized> {
    shared: &'a S,
    slots: NonZeroU32,
}

fn slot_key(fingerprint: u64, slots: NonZeroU32) -> String {
    format!("ratelimit.lease.{}", fingerprint % u64::from(slots.get()))
}

impl<'a, S: SharedData + ?Sized> LeaseTable<'a, S> {
    /// The table in `shared`.
    pub fn new(shared: &'a S, slots: NonZeroU32) -> LeaseTable<'a, S> {
        LeaseTable { shared, slots }
    }

    /// The lease of `fingerprint` in its slot, live or not (what it says of
    /// the client's pace and of the limits sizes the next one).
    pub fn get(&self, fingerprint: u64) -> Option<LeaseRecord> {
        let (bytes, _) = self.shared.get(&slot_key(fingerprint, self.slots))?;
        LeaseRecord::decode(&bytes).filter(|l| l.fingerprint == fingerprint)
    }

    /// Spends one request of the live lease of `fingerprint` at `now_ms`.
    pub fn spend(&self, fingerprint: u64, now_ms: u64) -> Spend {
        let key = slot_key(fingerprint, self.slots);
        for _ in 0..ATTEMPTS {
            let Some((bytes, cas)) = self.shared.get(&key) else { return Spend::NoLease };
            let Some(mut lease) = LeaseRecord::decode(&bytes) else { return Spend::NoLease };
            if lease.fingerprint != fingerprint || lease.expires_at_ms <= now_ms || lease.requests_left == 0 {
                return Spend::NoLease;
            }
            lease.requests_left -= 1;
            if self.shared.set(&key, &lease.encode(), Some(cas)) {
                return Spend::Admitted(lease);
            }
        }
        Spend::Contended
    }

    /// Keeps a lease the store granted at `now_ms`. A live lease of the
    /// same fingerprint (another worker's grant) keeps its requests: both
    /// were counted by the store, and both end within the same windows, so
    /// the later expiry stands; the store's newest view of the limits is
    /// kept. Any other lease in the slot is replaced.
    pub fn grant(&self, lease: LeaseRecord, now_ms: u64) {
        let key = slot_key(lease.fingerprint, self.slots);
        for _ in 0..ATTEMPTS {
            let (merged, cas) = match self.shared.get(&key) {
                None => (lease.clone(), None),
                Some((bytes, cas)) => match LeaseRecord::decode(&bytes) {
                    Some(old) if old.fingerprint == lease.fingerprint && old.expires_at_ms > now_ms => (
                        LeaseRecord {
                            requests_left: old.requests_left.saturating_add(lease.requests_left),
                            expires_at_ms: old.expires_at_ms.max(lease.expires_at_ms),
                            granted: old.granted.saturating_add(lease.granted),
                            granted_at_ms: old.granted_at_ms,
                            ..lease.clone()
                        },
                        Some(cas),
                    ),
                    _ => (lease.clone(), Some(cas)),
                },
            };
            if self.shared.set(&key, &merged.encode(), cas) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::LeasedLimit;
    use crate::shared::fake::FakeShared;
    use wasm_bindgen_test::wasm_bindgen_test;

    const NOW: u64 = 1_700_000_000_000;

    fn slots(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    fn lease(fingerprint: u64, requests: u64, expires_at_ms: u64) -> LeaseRecord {
        LeaseRecord {
            fingerprint,
            expires_at_ms,
            requests_left: requests,
            granted: requests,
            granted_at_ms: NOW,
            limits: vec![LeasedLimit { remaining_at_grant: 50, reset_at_ms: NOW + 60_000, per_request: 1 }],
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_lease_admits_exactly_its_requests_then_nothing() {
        let shared = FakeShared::default();
        let t = LeaseTable::new(&shared, slots(16));
        assert_eq!(t.spend(7, NOW), Spend::NoLease);
        t.grant(lease(7, 3, NOW + 5_000), NOW);
        for left in [2, 1, 0] {
            let Spend::Admitted(l) = t.spend(7, NOW + 1) else { panic!("admitted") };
            assert_eq!(l.requests_left, left);
        }
        assert_eq!(t.spend(7, NOW + 1), Spend::NoLease, "spent");
    }

    #[test]
    #[wasm_bindgen_test]
    fn an_expired_or_anothers_lease_admits_nothing() {
        let shared = FakeShared::default();
        let t = LeaseTable::new(&shared, slots(16));
        t.grant(lease(7, 3, NOW + 5_000), NOW);
        assert_eq!(t.spend(7, NOW + 5_000), Spend::NoLease, "expired at its instant");
        assert_eq!(t.spend(7 + 16, NOW), Spend::NoLease, "same slot, another client");
        // Another client's lease takes the slot: the first one is lost, not doubled.
        t.grant(lease(7 + 16, 2, NOW + 5_000), NOW);
        assert_eq!(t.spend(7, NOW), Spend::NoLease);
        assert!(matches!(t.spend(7 + 16, NOW), Spend::Admitted(l) if l.requests_left == 1));
    }

    #[test]
    #[wasm_bindgen_test]
    fn two_workers_grants_of_one_lease_add_up() {
        let shared = FakeShared::default();
        let t = LeaseTable::new(&shared, slots(16));
        t.grant(lease(7, 3, NOW + 5_000), NOW);
        let mut newer = lease(7, 4, NOW + 6_000);
        newer.limits[0].remaining_at_grant = 40;
        t.grant(newer, NOW + 1_000);
        let Spend::Admitted(l) = t.spend(7, NOW + 5_500) else { panic!() };
        assert_eq!((l.requests_left, l.expires_at_ms, l.limits[0].remaining_at_grant), (6, NOW + 6_000, 40));
        // An expired one is replaced, not added to.
        t.grant(lease(7, 2, NOW + 20_000), NOW + 10_000);
        assert!(matches!(t.spend(7, NOW + 10_000), Spend::Admitted(l) if l.requests_left == 1));
    }

    /// Shared data where another worker always writes first.
    struct AlwaysRaced(FakeShared);

    impl SharedData for AlwaysRaced {
        fn get(&self, key: &str) -> Option<(Vec<u8>, u32)> {
            self.0.get(key)
        }
        fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
            cas.is_none() && self.0.set(key, value, None)
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_spend_that_keeps_losing_the_slot_gives_way_to_the_store_and_spends_nothing() {
        let shared = AlwaysRaced(FakeShared::default());
        let t = LeaseTable::new(&shared, slots(16));
        t.grant(lease(7, 3, NOW + 5_000), NOW);
        assert_eq!(t.spend(7, NOW), Spend::Contended);
        let (bytes, _) = shared.get("ratelimit.lease.7").unwrap();
        assert_eq!(LeaseRecord::decode(&bytes).unwrap().requests_left, 3);
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_table_never_holds_more_keys_than_slots() {
        let shared = FakeShared::default();
        let t = LeaseTable::new(&shared, slots(64));
        for fp in 0..100_000u64 {
            t.grant(lease(fp.wrapping_mul(0x9e37_79b9_7f4a_7c15), 1, NOW + 1), NOW);
        }
        assert!(shared.len() <= 64);
    }
}
