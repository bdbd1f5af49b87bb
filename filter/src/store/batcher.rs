//! Decisions waiting for a store call, per worker. A decision that
//! arrives while fewer than the configured calls are in flight goes out at
//! once, alone; those that arrive while the worker waits on all its calls
//! queue here and leave together in the next call, in arrival order.

use crate::keys::HashSlot;
use crate::time::Instant;
use std::collections::VecDeque;

/// What the batcher needs to know of a queued decision.
pub trait Batchable {
    /// The Redis Cluster hash slot of its keys.
    fn slot(&self) -> HashSlot;
    /// An upper bound of the bytes it adds to a call.
    fn size(&self) -> usize;
    /// When it was queued (ms).
    fn since(&self) -> Instant;
}

/// How one call is filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fill {
    /// Decisions per call at most.
    pub max_decisions: usize,
    /// Only decisions of one hash slot (a Redis Cluster: one EVALSHA may
    /// touch one hash slot).
    pub one_hash_slot: bool,
    /// Bytes per call at most (webdis's body bound), if any.
    pub max_bytes: Option<usize>,
}

/// The queue.
#[derive(Debug)]
pub struct Batcher<T> {
    queue: VecDeque<T>,
    max_queued: usize,
}

impl<T: Batchable> Batcher<T> {
    /// An empty queue holding at most `max_queued` decisions.
    pub fn new(max_queued: usize) -> Batcher<T> {
        Batcher { queue: VecDeque::new(), max_queued }
    }

    /// Queues a decision; gives it back when the queue is full.
    pub fn push(&mut self, item: T) -> Result<(), T> {
        if self.queue.len() >= self.max_queued {
            return Err(item);
        }
        self.queue.push_back(item);
        Ok(())
    }

    /// Queues a decision ahead of every other (one that was sent already
    /// and comes back); gives it back when the queue is full.
    pub fn push_front(&mut self, item: T) -> Result<(), T> {
        if self.queue.len() >= self.max_queued {
            return Err(item);
        }
        self.queue.push_front(item);
        Ok(())
    }

    /// Decisions waiting.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// When the oldest waiting decision was queued.
    pub fn oldest_since(&self) -> Option<Instant> {
        self.queue.front().map(Batchable::since)
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The next call's decisions: the oldest, then every later one that
    /// fits `fill`, in arrival order. Empty when nothing waits.
    pub fn take(&mut self, fill: Fill) -> Vec<T> {
        self.take_matching(fill, |_| true)
    }

    /// `take`, of the decisions `wanted` says only (the others keep their
    /// place).
    pub fn take_matching(&mut self, fill: Fill, wanted: impl Fn(&T) -> bool) -> Vec<T> {
        let Some(at) = self.queue.iter().position(&wanted) else { return Vec::new() };
        let Some(first) = self.queue.remove(at) else { return Vec::new() };
        let slot = first.slot();
        let mut bytes = first.size();
        let mut batch = vec![first];
        let mut i = at;
        while i < self.queue.len() && batch.len() < fill.max_decisions {
            let item = &self.queue[i];
            if !wanted(item) {
                i += 1;
                continue;
            }
            let same_hash_slot = !fill.one_hash_slot || item.slot() == slot;
            let fits_bytes = fill.max_bytes.is_none_or(|max| bytes + item.size() <= max);
            if same_hash_slot && fits_bytes {
                bytes += item.size();
                if let Some(item) = self.queue.remove(i) {
                    batch.push(item);
                }
            } else if same_hash_slot {
                // Full by bytes: later decisions wait for the next call.
                break;
            } else {
                i += 1;
            }
        }
        batch
    }

    /// Takes out every waiting decision `gone` says is no longer wanted.
    pub fn remove_where(&mut self, mut gone: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut removed = Vec::new();
        let mut kept = VecDeque::with_capacity(self.queue.len());
        for item in self.queue.drain(..) {
            if gone(&item) {
                removed.push(item);
            } else {
                kept.push_back(item);
            }
        }
        self.queue = kept;
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[derive(Debug, PartialEq)]
    struct D(u32, u16, usize);

    impl Batchable for D {
        fn slot(&self) -> HashSlot {
            HashSlot(self.1)
        }
        fn size(&self) -> usize {
            self.2
        }
        fn since(&self) -> Instant {
            Instant::from_ms(u64::from(self.0))
        }
    }

    fn ids(b: &[D]) -> Vec<u32> {
        b.iter().map(|d| d.0).collect()
    }

    const ANY: Fill = Fill { max_decisions: 3, one_hash_slot: false, max_bytes: None };

    #[test]
    #[wasm_bindgen_test]
    fn calls_take_the_oldest_decisions_in_arrival_order_up_to_the_maximum() {
        let mut b = Batcher::new(100);
        for i in 0..5 {
            b.push(D(i, i as u16, 10)).unwrap();
        }
        assert_eq!(ids(&b.take(ANY)), [0, 1, 2]);
        assert_eq!(ids(&b.take(ANY)), [3, 4]);
        assert!(b.take(ANY).is_empty());
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_cluster_call_holds_one_slot_and_the_others_keep_their_turn() {
        let mut b = Batcher::new(100);
        for (i, slot) in [7u16, 9, 7, 9, 7].into_iter().enumerate() {
            b.push(D(i as u32, slot, 10)).unwrap();
        }
        let fill = Fill { one_hash_slot: true, ..ANY };
        assert_eq!(ids(&b.take(fill)), [0, 2, 4]);
        assert_eq!(ids(&b.take(fill)), [1, 3]);
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_byte_bound_splits_a_call() {
        let mut b = Batcher::new(100);
        for (i, size) in [40usize, 40, 30, 5].into_iter().enumerate() {
            b.push(D(i as u32, 0, size)).unwrap();
        }
        let fill = Fill { max_decisions: 10, one_hash_slot: false, max_bytes: Some(100) };
        assert_eq!(ids(&b.take(fill)), [0, 1], "the third would pass 100 bytes; order is kept");
        assert_eq!(ids(&b.take(fill)), [2, 3]);
    }

    #[test]
    #[wasm_bindgen_test]
    fn decisions_sent_back_go_first_within_the_bound() {
        let mut b = Batcher::new(3);
        b.push(D(3, 0, 1)).unwrap();
        b.push_front(D(2, 0, 1)).unwrap();
        b.push_front(D(1, 0, 1)).unwrap();
        assert_eq!(b.push_front(D(0, 0, 1)), Err(D(0, 0, 1)));
        assert_eq!(ids(&b.take(ANY)), [1, 2, 3]);
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_queue_is_bounded_and_streams_that_went_away_leave_it() {
        let mut b = Batcher::new(2);
        b.push(D(1, 0, 1)).unwrap();
        b.push(D(2, 0, 1)).unwrap();
        assert_eq!(b.push(D(3, 0, 1)), Err(D(3, 0, 1)));
        assert_eq!(ids(&b.remove_where(|d| d.0 == 1)), [1]);
        assert_eq!(b.len(), 1);
    }
}
