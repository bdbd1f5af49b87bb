//! The proxy's leases: a fixed number of shared-data slots (shared data
//! has no delete, so a table keyed by identity would grow forever), each
//! holding at most one lease. A fingerprint may sit in any of its
//! `CHOICES` candidate entries, probed in order; a lease goes to the entry
//! that holds its fingerprint already, else the first never written (a
//! slot once written stays so: nothing of that fingerprint lies beyond
//! one never written), else one whose lease ended. With one slot each, a
//! fifth of 1,000 clients shared theirs with another and their leases
//! kept replacing each other. A lease is drawn from one request at a time
//! with compare-and-swap (two workers never spend one unit twice), and lost,
//! never doubled, when two first writes race or when a grant finds every
//! candidate held by a live lease (`room` says so before the ask): a lost
//! lease admits less, never more.

use crate::time::Instant;
use std::num::NonZeroU32;

use super::record::LeaseRecord;
use crate::shared::{self, Change, SharedData, CAS_ATTEMPTS};

/// Candidate slots of a fingerprint.
const CHOICES: u32 = 4;

/// What drawing requests from a lease came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spend {
    /// The request drawn; the lease as it is after it.
    Drawn(LeaseRecord),
    /// No live lease of this fingerprint here: ask the store.
    NoLease,
    /// Other workers kept winning the entry: ask the store.
    Contended,
}

/// What a fingerprint's candidate entries hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Its lease, live or not (what it says of the client's pace and of
    /// the limits sizes the next one).
    pub previous: Option<LeaseRecord>,
    /// Whether a lease granted now would find an entry without pushing out
    /// another client's live lease.
    pub room: bool,
}

/// The leases over `slots` shared-data entries.
pub struct LeaseTable<'a, S: SharedData + ?Sized> {
    shared: &'a S,
    slots: NonZeroU32,
}

/// The keys of `fingerprint`'s candidate entries, in probe order, distinct
/// (fewer when the table has fewer slots). The fingerprint is already a
/// hash: each rotation of it picks a slot as if at random.
fn entry_keys(fingerprint: u64, slots: NonZeroU32) -> impl Iterator<Item = String> {
    let n = u64::from(slots.get());
    let index = move |i: u32| fingerprint.rotate_left(16 * i) % n;
    (0..CHOICES)
        .filter(move |&i| (0..i).all(|j| index(j) != index(i)))
        .map(move |i| format!("ratelimit.lease.{}", index(i)))
}

/// Whether an entry's lease admits nothing any more at `now_ms`.
fn ended(lease: &LeaseRecord, now: Instant) -> bool {
    let now_ms = now.ms();
    lease.expires_at_ms <= now_ms || lease.requests_left == 0
}

impl<'a, S: SharedData + ?Sized> LeaseTable<'a, S> {
    /// The table in `shared`.
    pub fn new(shared: &'a S, slots: NonZeroU32) -> LeaseTable<'a, S> {
        LeaseTable { shared, slots }
    }

    /// The lease of `fingerprint`, live or not, and whether a new one
    /// would find room at `now_ms`.
    pub fn probe(&self, fingerprint: u64, now: Instant) -> Probe {
        // Where a grant would go: room unless that is another client's
        // live lease.
        match self.place(fingerprint, now).map(|slot| slot.held) {
            Some(Some((Some(l), _))) if l.fingerprint == fingerprint => Probe { previous: Some(l), room: true },
            Some(Some((Some(l), _))) => Probe { previous: None, room: ended(&l, now) },
            Some(_) => Probe { previous: None, room: true },
            None => Probe { previous: None, room: false },
        }
    }

    /// Draws one request of the live lease of `fingerprint` at `now_ms`,
    /// in one compare-and-swap.
    pub fn draw(&self, fingerprint: u64, now: Instant) -> Spend {
        for key in entry_keys(fingerprint, self.slots) {
            if let Some(drawn) = self.draw_at(&key, fingerprint, now) {
                return drawn;
            }
        }
        Spend::NoLease
    }

    /// `draw` in the entry `key`; `None` when the lease is not there but
    /// may be in the next candidate.
    fn draw_at(&self, key: &str, fingerprint: u64, now: Instant) -> Option<Spend> {
        let drawn = shared::update(self.shared, key, |bytes| {
            let Some(bytes) = bytes else { return Change::Leave(Some(Spend::NoLease)) };
            let Some(mut lease) = LeaseRecord::decode(bytes).filter(|l| l.fingerprint == fingerprint) else {
                return Change::Leave(None);
            };
            if ended(&lease, now) {
                return Change::Leave(Some(Spend::NoLease));
            }
            lease.requests_left -= 1;
            Change::Put(lease.encode(), Some(Spend::Drawn(lease)))
        });
        // Other workers kept winning the entry: the store decides.
        drawn.unwrap_or(Some(Spend::Contended))
    }

    /// Keeps a lease the store granted at `now_ms`. A live lease of the
    /// same fingerprint (another worker's grant) keeps its requests: both
    /// were counted by the store. The earlier expiry stands: each grant's
    /// units hold until their own end (a token lease's end depends on how
    /// many units are out), so all of them hold until the first; the
    /// store's newest view of the limits is kept. It goes where `entry_keys` says; when every candidate holds
    /// another client's live lease, the one ending first is replaced by a
    /// grant, never by a refusal (a record of no requests).
    pub fn grant(&self, lease: LeaseRecord, now: Instant) {
        let now_ms = now.ms();
        // The slot is chosen afresh on each attempt: not one key's update.
        for _ in 0..CAS_ATTEMPTS {
            let Some(TableEntry { key, held }) = self.place(lease.fingerprint, now) else { return };
            let (merged, cas) = match held {
                None => (lease.clone(), None),
                // A refusal only records the store's view: it never pushes
                // out another client's live lease, whose units are paid.
                Some((Some(old), _))
                    if lease.requests_left == 0 && old.fingerprint != lease.fingerprint && !ended(&old, now) =>
                {
                    return
                }
                Some((Some(old), cas)) if old.fingerprint == lease.fingerprint && old.expires_at_ms > now_ms => (
                    LeaseRecord {
                        requests_left: old.requests_left.saturating_add(lease.requests_left),
                        // A record of no requests (a refusal, a view) ends
                        // no live lease: it brings no units to hold.
                        expires_at_ms: if lease.requests_left == 0 {
                            old.expires_at_ms
                        } else {
                            old.expires_at_ms.min(lease.expires_at_ms)
                        },
                        granted: old.granted.saturating_add(lease.granted),
                        granted_at_ms: old.granted_at_ms,
                        ..lease.clone()
                    },
                    Some(cas),
                ),
                Some((_, cas)) => (lease.clone(), Some(cas)),
            };
            if self.shared.set(&key, &merged.encode(), cas) {
                return;
            }
        }
    }

    /// The slot a lease of `fingerprint` goes to.
    fn place(&self, fingerprint: u64, now: Instant) -> Option<TableEntry> {
        // The best slot seen so far and its rank: 0 for one whose lease
        // ended, else the live lease's expiry (the earliest goes).
        let mut best: Option<(u64, TableEntry)> = None;
        for key in entry_keys(fingerprint, self.slots) {
            let Some((bytes, cas)) = self.shared.get(&key) else { return Some(TableEntry { key, held: None }) };
            let lease = LeaseRecord::decode(&bytes);
            let rank = match &lease {
                Some(l) if l.fingerprint == fingerprint => return Some(TableEntry { key, held: Some((lease, cas)) }),
                Some(l) if !ended(l, now) => l.expires_at_ms,
                _ => 0,
            };
            if best.as_ref().is_none_or(|(r, _)| rank < *r) {
                best = Some((rank, TableEntry { key, held: Some((lease, cas)) }));
            }
        }
        best.map(|(_, slot)| slot)
    }
}

/// A slot of the table: its key and, once written, the lease it holds
/// (if readable) and its CAS token.
struct TableEntry {
    key: String,
    held: Option<(Option<LeaseRecord>, u32)>,
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
            limits: vec![LeasedLimit { remaining_at_grant: 50, reset_at_ms: NOW + 60_000, per_request: 1, limit: 0 }],
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_lease_admits_exactly_its_requests_then_nothing() {
        let shared = FakeShared::default();
        let t = LeaseTable::new(&shared, slots(16));
        assert_eq!(t.draw(7, Instant::from_ms(NOW)), Spend::NoLease);
        t.grant(lease(7, 3, NOW + 5_000), Instant::from_ms(NOW));
        for left in [2, 1, 0] {
            let Spend::Drawn(l) = t.draw(7, Instant::from_ms(NOW + 1)) else { panic!("admitted") };
            assert_eq!(l.requests_left, left);
        }
        assert_eq!(t.draw(7, Instant::from_ms(NOW + 1)), Spend::NoLease, "spent");
    }

    #[test]
    #[wasm_bindgen_test]
    fn an_expired_or_anothers_lease_admits_nothing() {
        let shared = FakeShared::default();
        let t = LeaseTable::new(&shared, slots(16));
        t.grant(lease(7, 3, NOW + 5_000), Instant::from_ms(NOW));
        assert_eq!(t.draw(7, Instant::from_ms(NOW + 5_000)), Spend::NoLease, "expired at its instant");
        assert_eq!(t.draw(7 + 16, Instant::from_ms(NOW)), Spend::NoLease, "same slot, another client");
    }

    #[test]
    #[wasm_bindgen_test]
    fn clients_sharing_a_slot_keep_their_leases_side_by_side() {
        let shared = FakeShared::default();
        let t = LeaseTable::new(&shared, slots(16));
        // 7, 23 and 39 have the same candidates in 16 slots: 7, then 0.
        assert_eq!(entry_keys(7, slots(16)).collect::<Vec<_>>(), ["ratelimit.lease.7", "ratelimit.lease.0"]);
        assert!(entry_keys(39, slots(16)).eq(entry_keys(7, slots(16))));
        t.grant(lease(7, 3, NOW + 5_000), Instant::from_ms(NOW));
        assert!(t.probe(23, Instant::from_ms(NOW)).room);
        t.grant(lease(23, 2, NOW + 6_000), Instant::from_ms(NOW));
        assert!(matches!(t.draw(7, Instant::from_ms(NOW)), Spend::Drawn(l) if l.requests_left == 2));
        assert!(matches!(t.draw(23, Instant::from_ms(NOW)), Spend::Drawn(l) if l.requests_left == 1));
        // A third finds no room while both live; its grant (a race) pushes
        // out the lease that ends first: lost, never doubled.
        assert_eq!(t.probe(39, Instant::from_ms(NOW)), Probe { previous: None, room: false });
        t.grant(lease(39, 4, NOW + 5_000), Instant::from_ms(NOW));
        assert_eq!(t.draw(7, Instant::from_ms(NOW)), Spend::NoLease);
        assert!(matches!(t.draw(23, Instant::from_ms(NOW)), Spend::Drawn(l) if l.requests_left == 0));
        assert!(matches!(t.draw(39, Instant::from_ms(NOW)), Spend::Drawn(l) if l.requests_left == 3));
        // Spent or expired, a lease leaves room; its fingerprint's own slot
        // is found first, live or not.
        assert_eq!(t.draw(23, Instant::from_ms(NOW)), Spend::NoLease);
        assert!(t.probe(7, Instant::from_ms(NOW)).room);
        assert!(t.probe(71, Instant::from_ms(NOW + 5_000)).room, "39's expired");
        assert_eq!(t.probe(23, Instant::from_ms(NOW)).previous.map(|l| l.granted), Some(2));
        t.grant(lease(23, 5, NOW + 9_000), Instant::from_ms(NOW + 10));
        assert!(
            matches!(t.draw(23, Instant::from_ms(NOW + 10)), Spend::Drawn(l) if l.requests_left == 4 && l.granted == 7)
        );
        assert_eq!(shared.len(), 2);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_refusal_never_pushes_out_anothers_live_lease() {
        let shared = FakeShared::default();
        let t = LeaseTable::new(&shared, slots(16));
        // 7 and 23 hold both candidates of 39.
        t.grant(lease(7, 3, NOW + 5_000), Instant::from_ms(NOW));
        t.grant(lease(23, 2, NOW + 6_000), Instant::from_ms(NOW));
        let refused = LeaseRecord { requests_left: 0, granted: 0, ..lease(39, 0, NOW + 5_000) };
        t.grant(refused.clone(), Instant::from_ms(NOW));
        assert!(matches!(t.draw(7, Instant::from_ms(NOW)), Spend::Drawn(l) if l.requests_left == 2), "7's lease stays");
        assert!(
            matches!(t.draw(23, Instant::from_ms(NOW)), Spend::Drawn(l) if l.requests_left == 1),
            "23's lease stays"
        );
        assert_eq!(t.probe(39, Instant::from_ms(NOW)).previous, None, "the refusal was not kept");
        // Once 7's lease has ended, the refusal takes its place.
        t.grant(refused, Instant::from_ms(NOW + 5_000));
        assert_eq!(t.probe(39, Instant::from_ms(NOW + 5_000)).previous.map(|l| l.granted), Some(0));
    }

    #[test]
    #[wasm_bindgen_test]
    fn two_workers_grants_of_one_lease_add_up() {
        let shared = FakeShared::default();
        let t = LeaseTable::new(&shared, slots(16));
        t.grant(lease(7, 3, NOW + 5_000), Instant::from_ms(NOW));
        let mut newer = lease(7, 4, NOW + 6_000);
        newer.limits[0].remaining_at_grant = 40;
        t.grant(newer, Instant::from_ms(NOW + 1_000));
        let Spend::Drawn(l) = t.draw(7, Instant::from_ms(NOW + 4_500)) else { panic!() };
        assert_eq!((l.requests_left, l.expires_at_ms, l.limits[0].remaining_at_grant), (6, NOW + 5_000, 40));
        assert_eq!(t.draw(7, Instant::from_ms(NOW + 5_000)), Spend::NoLease, "the earlier end stands");
        // An expired one is replaced, not added to.
        t.grant(lease(7, 2, NOW + 20_000), Instant::from_ms(NOW + 10_000));
        assert!(matches!(t.draw(7, Instant::from_ms(NOW + 10_000)), Spend::Drawn(l) if l.requests_left == 1));
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_record_of_no_requests_keeps_a_live_lease_whole() {
        let shared = FakeShared::default();
        let t = LeaseTable::new(&shared, slots(16));
        t.grant(lease(7, 3, NOW + 5_000), Instant::from_ms(NOW));
        // Another worker's refused ask, or a view, ending at once.
        let mut view = lease(7, 0, NOW + 1_000);
        view.limits[0].remaining_at_grant = 2;
        t.grant(view, Instant::from_ms(NOW + 1_000));
        let Spend::Drawn(l) = t.draw(7, Instant::from_ms(NOW + 4_000)) else { panic!("the lease ended") };
        assert_eq!((l.requests_left, l.expires_at_ms, l.limits[0].remaining_at_grant), (2, NOW + 5_000, 2));
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
        t.grant(lease(7, 3, NOW + 5_000), Instant::from_ms(NOW));
        assert_eq!(t.draw(7, Instant::from_ms(NOW)), Spend::Contended);
        let (bytes, _) = shared.get("ratelimit.lease.7").unwrap();
        assert_eq!(LeaseRecord::decode(&bytes).unwrap().requests_left, 3);
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_table_never_holds_more_keys_than_slots() {
        let shared = FakeShared::default();
        let t = LeaseTable::new(&shared, slots(64));
        for fp in 0..100_000u64 {
            t.grant(lease(fp.wrapping_mul(0x9e37_79b9_7f4a_7c15), 1, NOW + 1), Instant::from_ms(NOW));
        }
        assert!(shared.len() <= 64);
    }
}
