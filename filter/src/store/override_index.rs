//! The index of overrides: a Redis set, `<domain>:overrides`, whose members
//! are the override keys an operator wrote (`SADD` beside the `SET`,
//! docs/operations.md). Each worker polls it (`SMEMBERS`) and a decision
//! reads its client's override keys only when one of them is a member, so
//! a client without an override costs the script nothing. A member whose
//! override expired or was deleted costs its client the read of an absent
//! key, as before the index.
//!
//! Never less safe than reading every override: an index not yet
//! answered, whose poll failed, too large, or older than its bound, marks
//! every decision to read its overrides.

use super::StoreError;
use crate::time::{Instant, Millis};

/// The most members an index holds: past them, every decision reads its
/// overrides (a poll reply is refused before it is read).
pub const MAX_MEMBERS: usize = 10_000;

/// The largest poll reply read: `MAX_MEMBERS` override keys of 100 bytes
/// (a domain of 32, an identity of 64 at most as keys carry it, a rule
/// name of a few letters); a larger one is a failed poll (every decision
/// reads its overrides).
pub const MAX_INDEX_BYTES: usize = MAX_MEMBERS * 100;

/// What a worker knows of the index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OverrideIndex {
    /// The members of the last poll, sorted, and when that poll was sent;
    /// `None`: not known (not answered yet, or failed).
    known: Option<(Vec<String>, Instant)>,
}

impl OverrideIndex {
    /// Takes the result of a poll sent at `sent`: its members, or why it
    /// gave none (every decision reads its overrides until one answers).
    pub fn take(&mut self, members: Result<Vec<String>, StoreError>, sent: Instant) {
        self.known = match members {
            Ok(mut m) if m.len() <= MAX_MEMBERS => {
                m.sort_unstable();
                Some((m, sent))
            }
            _ => None,
        };
    }

    /// Whether a decision at `now` must read `key` (an override key): the
    /// index names it, or the index is unknown or was polled more than
    /// `bound` before `now` (a change written since may not be in it).
    pub fn must_read(&self, now: Instant, bound: Millis, key: &str) -> bool {
        match &self.known {
            Some((members, sent)) if now.since(*sent) <= bound.ms() => {
                members.binary_search_by(|m| m.as_str().cmp(key)).is_ok()
            }
            _ => true,
        }
    }

    /// Whether the index is known, fresh at `now`, and empty: no decision
    /// reads overrides (nothing to look up).
    pub fn none_at(&self, now: Instant, bound: Millis) -> bool {
        matches!(&self.known, Some((m, sent)) if m.is_empty() && now.since(*sent) <= bound.ms())
    }
}

/// The members of a set from its items: a member that is not UTF-8 can be
/// no override key the filter reads (they are ASCII), so it is left out.
pub fn members_of(items: Vec<Vec<u8>>) -> Vec<String> {
    items.into_iter().filter_map(|m| String::from_utf8(m).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    const WITHIN: Millis = Millis::of(1_000);

    fn at(ms: u64) -> Instant {
        Instant::from_ms(ms)
    }

    #[test]
    #[wasm_bindgen_test]
    fn an_unknown_or_failed_index_reads_every_override() {
        let mut index = OverrideIndex::default();
        assert!(index.must_read(at(0), WITHIN, "d:{a}:r:override"), "never polled");
        assert!(!index.none_at(at(0), WITHIN));
        index.take(Ok(vec![]), at(10));
        assert!(!index.must_read(at(10), WITHIN, "d:{a}:r:override"), "known, empty");
        assert!(index.none_at(at(1_010), WITHIN));
        index.take(Err(StoreError::Status(403)), at(20));
        assert!(index.must_read(at(20), WITHIN, "d:{a}:r:override"), "a failed poll forgets the last");
        assert!(!index.none_at(at(20), WITHIN));
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_member_is_read_and_others_are_not_while_the_index_is_fresh() {
        let mut index = OverrideIndex::default();
        let members = ["d:{b}:r:override", "d:{a}:r:override", "d:{a}:s:override", "junk"];
        index.take(Ok(members.iter().map(|m| m.to_string()).collect()), at(1_000));
        for m in members {
            assert!(index.must_read(at(1_500), WITHIN, m), "{m}");
        }
        for other in ["d:{c}:r:override", "d:{a}:t:override", "d:{a}:r:overrid", "", "D:{a}:r:override"] {
            assert!(!index.must_read(at(1_500), WITHIN, other), "{other}");
        }
        assert!(!index.none_at(at(1_500), WITHIN), "not empty");
        // Polled more than the bound ago: a change since may be missing.
        assert!(!index.must_read(at(2_000), WITHIN, "d:{c}:r:override"), "at the bound");
        assert!(index.must_read(at(2_001), WITHIN, "d:{c}:r:override"), "past it");
        // An earlier clock (a step back) is no older than the poll.
        assert!(!index.must_read(at(500), WITHIN, "d:{c}:r:override"));
    }

    #[test]
    #[wasm_bindgen_test]
    fn an_index_past_its_bound_of_members_reads_every_override() {
        let mut index = OverrideIndex::default();
        let many: Vec<String> = (0..=MAX_MEMBERS).map(|i| format!("d:{{{i}}}:r:override")).collect();
        index.take(Ok(many[..MAX_MEMBERS].to_vec()), at(0));
        assert!(!index.must_read(at(0), WITHIN, "d:{x}:r:override"), "{MAX_MEMBERS} members: kept");
        assert!(index.must_read(at(0), WITHIN, &many[MAX_MEMBERS - 1]));
        index.take(Ok(many), at(0));
        assert!(index.must_read(at(0), WITHIN, "d:{x}:r:override"), "one more: every decision reads");
    }

    #[test]
    #[wasm_bindgen_test]
    fn members_that_are_not_utf8_are_left_out() {
        let items = vec![b"d:{a}:r:override".to_vec(), vec![0xff, 0xfe, b'x'], b"d:{\xc3\xa9}:r:override".to_vec()];
        assert_eq!(members_of(items), ["d:{a}:r:override", "d:{é}:r:override"]);
    }
}
