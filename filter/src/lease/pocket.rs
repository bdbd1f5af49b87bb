//! A worker's pockets: a few requests of a live lease drawn from the
//! proxy's lease table with one compare-and-swap, then admitted by this
//! worker alone with no shared-data read or write. A shared-data get and
//! set per request (each a hostcall, the get with a copy into the module)
//! were most of what a leased request cost beyond one no rule matches.
//!
//! A pocket holds units the store counted already and ends when its lease
//! would: never more is admitted than the lease held. What a pocket holds
//! when it ends is admitted by nobody, so a draw is small: `draw_size`,
//! at most 16 requests and an eighth of `max_units` (none for leases of
//! fewer than 16 requests), which bounds what a worker's pocket can strand
//! (docs/leases.md). A pocket is kept only where it pushes out no other
//! pocket that still holds requests; where it would, the worker draws one
//! request at a time, as without pockets.

use super::record::{LeaseRecord, LeasedLimit};

/// Requests one draw takes at most.
pub const MOST_DRAWN: u64 = 16;

/// Pockets per worker (a hot client takes one; clients beyond that spend
/// from the table one request at a time).
const SLOTS: usize = 1024;

/// Slots a fingerprint may take.
const CHOICES: usize = 2;

/// Requests a draw from a lease of rules allowing `max_units` takes: an
/// eighth of it, from 1 to `MOST_DRAWN`.
pub fn draw_size(max_units: u64) -> u64 {
    (max_units / 8).clamp(1, MOST_DRAWN)
}

/// One pocket: the lease as the table held it right after the draw, and
/// the requests of the draw not admitted yet.
#[derive(Clone, Debug)]
struct Pocket {
    lease: LeaseRecord,
    left: u64,
}

impl Pocket {
    fn live(&self, now_ms: u64) -> bool {
        self.left > 0 && self.lease.expires_at_ms > now_ms
    }
}

/// A request admitted from a lease, as its rate-limit fields show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeasedRequest<'a> {
    /// Requests the lease holds after this one, as far as this worker
    /// knows: what the table held at the last draw plus what the pocket
    /// still holds (other workers may have spent from the table since:
    /// never more than the store could have granted).
    pub requests_left: u64,
    /// The lease's limits, as the store said them at the grant.
    pub limits: &'a [LeasedLimit],
}

/// The pockets of one worker.
#[derive(Debug)]
pub struct Pockets {
    slots: Box<[Option<Pocket>]>,
}

impl Default for Pockets {
    fn default() -> Pockets {
        Pockets { slots: vec![None; SLOTS].into_boxed_slice() }
    }
}

fn candidates(fingerprint: u64) -> [usize; CHOICES] {
    [0, 1].map(|i| ((fingerprint >> (32 * i)) & 0xffff_ffff) as usize % SLOTS)
}

impl Pockets {
    /// Admits one request of `fingerprint` from its pocket at `now_ms`, if
    /// it holds one.
    pub fn spend(&mut self, fingerprint: u64, now_ms: u64) -> Option<LeasedRequest<'_>> {
        let held =
            |p: &Option<Pocket>| p.as_ref().is_some_and(|p| p.lease.fingerprint == fingerprint && p.live(now_ms));
        let at = candidates(fingerprint).into_iter().find(|&i| self.slots.get(i).is_some_and(held))?;
        let pocket = self.slots.get_mut(at)?.as_mut()?;
        pocket.left -= 1;
        Some(LeasedRequest {
            requests_left: pocket.lease.requests_left.saturating_add(pocket.left),
            limits: &pocket.lease.limits,
        })
    }

    /// Where a pocket of `fingerprint` would go at `now_ms`: a slot with no
    /// pocket or one that ended (its own first); `None` when both hold
    /// other clients' live pockets.
    fn place(&self, fingerprint: u64, now_ms: u64) -> Option<usize> {
        let slots = candidates(fingerprint);
        let free = |i: &usize| self.slots.get(*i).is_some_and(|s| s.as_ref().is_none_or(|p| !p.live(now_ms)));
        let own = |i: &usize| {
            self.slots.get(*i).is_some_and(|s| s.as_ref().is_some_and(|p| p.lease.fingerprint == fingerprint))
        };
        slots.iter().copied().find(|i| own(i) && free(i)).or_else(|| slots.iter().copied().find(free))
    }

    /// Whether a draw of `fingerprint` at `now_ms` may take more than the
    /// request it is for (its rest would find a slot).
    pub fn room(&self, fingerprint: u64, now_ms: u64) -> bool {
        self.place(fingerprint, now_ms).is_some()
    }

    /// Keeps `left` requests drawn from `lease` (as the table holds it
    /// after the draw); false when there was no room, and nothing kept.
    pub fn keep(&mut self, lease: LeaseRecord, left: u64, now_ms: u64) -> bool {
        let Some(slot) = self.place(lease.fingerprint, now_ms).and_then(|i| self.slots.get_mut(i)) else {
            return false;
        };
        *slot = Some(Pocket { lease, left });
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    const NOW: u64 = 1_700_000_000_000;

    fn lease(fingerprint: u64, requests_left: u64, expires_at_ms: u64) -> LeaseRecord {
        LeaseRecord {
            fingerprint,
            expires_at_ms,
            requests_left,
            granted: 100,
            granted_at_ms: NOW,
            limits: vec![LeasedLimit { remaining_at_grant: 50, reset_at_ms: NOW + 60_000, per_request: 1 }],
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_draw_is_an_eighth_of_max_units_from_1_to_16() {
        let sizes: Vec<u64> = [1, 8, 15, 16, 17, 100, 128, 1_000, 1_000_000].map(draw_size).into();
        assert_eq!(sizes, [1, 1, 1, 2, 2, 12, 16, 16, 16]);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_pocket_admits_exactly_what_it_holds_until_its_lease_ends() {
        let mut p = Pockets::default();
        assert_eq!(p.spend(7, NOW), None);
        assert!(p.keep(lease(7, 80, NOW + 1_000), 3, NOW));
        // The table held 80 after the draw; the pocket 3, then 2, 1, 0.
        let left: Vec<u64> = (0..3).filter_map(|_| p.spend(7, NOW).map(|f| f.requests_left)).collect();
        assert_eq!(left, [82, 81, 80]);
        assert_eq!(p.spend(7, NOW), None, "spent");
        assert!(p.keep(lease(7, 60, NOW + 1_000), 2, NOW), "its own slot again");
        assert_eq!(p.spend(7, NOW + 1_000), None, "ended with its lease");
        assert_eq!(p.spend(8, NOW), None, "another client's");
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_pocket_never_pushes_out_another_that_still_holds_requests() {
        let mut p = Pockets::default();
        let s = SLOTS as u64;
        // 5, 5 + SLOTS and 5 + 2 x SLOTS share both candidate slots (5, 0).
        assert_eq!(candidates(5), [5, 0]);
        assert_eq!(candidates(5 + 2 * s), candidates(5));
        assert!(p.keep(lease(5, 10, NOW + 1_000), 4, NOW));
        assert!(p.keep(lease(5 + s, 10, NOW + 1_000), 4, NOW));
        assert!(!p.room(5 + 2 * s, NOW));
        assert!(!p.keep(lease(5 + 2 * s, 10, NOW + 1_000), 4, NOW));
        assert_eq!(p.spend(5 + 2 * s, NOW), None);
        assert_eq!(p.spend(5, NOW).map(|f| f.requests_left), Some(13));
        // Once one ends (expired here), its slot is free.
        assert!(p.room(5 + 2 * s, NOW + 1_000));
        for fp in 0..100_000u64 {
            p.keep(lease(fp.wrapping_mul(0x9e37_79b9_7f4a_7c15), 1, NOW + 1), 1, NOW);
        }
        assert_eq!(p.slots.len(), SLOTS);
    }
}
