//! Circuit breakers in front of the store, shared by the proxy's workers.
//! After N consecutive failures a breaker opens and no store call is made
//! for a wait; then exactly one probe goes through. The probe's success
//! closes it; its failure opens it again for twice the wait. The first wait
//! is 1 s and the longest is the configured open period ([`wait_ms`]): a
//! store that comes back after a short outage is used again within about
//! the outage's length, and a long outage costs one probe per open period.
//!
//! Two levels, because failures say different things:
//! - the **store** breaker counts transport failures (HTTP status, timeout,
//!   network, dispatch): the gateway or a single Redis is down or slow, and
//!   every client would wait for nothing;
//! - a **slot** breaker per range of Redis Cluster hash slots counts
//!   failures that came back as a Redis error (or an undecodable reply):
//!   with a cluster behind a proxy that is one shard failing, fast, and
//!   only its clients should fall back. Such a reply also proves the
//!   transport works, so it resets the store breaker's count.
//!
//! The slot records are `deny_cache.slots` at most (one per hash slot
//! from 16,384 on), each for a contiguous range of hash slots: shared
//! data holds a fixed number of keys, whatever the clients. A cluster
//! gives each shard contiguous ranges of hash slots, so a dead shard
//! opens the records of its own ranges, and fails another shard's
//! clients only in a record that straddles the boundary between them
//! (with the default 4,096 records, ranges of 4 hash slots: at most 3
//! foreign hash slots at each end of each of its ranges).
//!
//! The slot records are read only while one could be open (the store record
//! keeps the time of the last slot failure): the allow path pays one read.

use crate::config::Breaker;
use crate::keys::HashSlot;
use crate::shared::{self, read_u64s, write_u64s, Change, SharedData};
use crate::store::StoreError;
use crate::time::Instant;

const STORE_KEY: &str = "ratelimit.breaker";
/// The wait before the first probe after a breaker opens.
pub const FIRST_WAIT_MS: u64 = 1000;

/// Whether to call the store now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Closed: call.
    Call,
    /// Half-open: this call is the one probe.
    Probe,
    /// Open: don't call; apply the failure policy.
    Open,
}

/// What a store call's result says about the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// It answered.
    Answered,
    /// The transport failed: the whole store may be down.
    StoreDown,
    /// It answered with an error for this key: its shard may be down.
    KeyFailed,
}

impl Health {
    /// Classifies a call's result.
    pub fn of<T>(result: &Result<T, StoreError>) -> Health {
        match result {
            Ok(_) => Health::Answered,
            Err(
                StoreError::Status(_)
                | StoreError::Dispatch
                | StoreError::Network
                | StoreError::BreakerOpen
                | StoreError::Unanswered
                | StoreError::Overloaded
                | StoreError::RequestUnreadable,
            ) => Health::StoreDown,
            Err(StoreError::Redis(_) | StoreError::Malformed(_) | StoreError::ScriptMissing) => Health::KeyFailed,
        }
    }
}

/// A breaker record: consecutive failures, open until (ms), probe deadline
/// (ms), and the time of the last failure (the store record: of the last
/// slot failure). While open, the failures past the threshold are the
/// probes that failed in a row: they set the wait.
type Record = [u64; 4];

/// How long a breaker stays open after `failed_probes` probes failed in a
/// row, counted from the failure that opened it: 1 s, doubling with each
/// failed probe, at most the open period (an open period under 1 s: always
/// the open period). With the default 30 s: 1, 2, 4, 8, 16, 30, 30 … s.
pub fn wait_ms(config: &Breaker, failed_probes: u64) -> u64 {
    // 2^40 s is far past any open period the configuration accepts.
    let doubled = FIRST_WAIT_MS.saturating_mul(1 << failed_probes.min(40));
    doubled.min(config.open.ms())
}

fn read<S: SharedData + ?Sized>(shared: &S, key: &str) -> Record {
    shared.get(key).and_then(|(bytes, _)| read_u64s::<4>(&bytes)).unwrap_or([0; 4])
}

/// A record as stored (none, or unreadable: all zeros, a closed breaker).
fn decode(bytes: Option<&[u8]>) -> Record {
    bytes.and_then(read_u64s::<4>).unwrap_or([0; 4])
}

/// Hash slots in a Redis Cluster.
const HASH_SLOTS: u32 = 16_384;

/// The key of the record of hash slot `slot`'s range: `slot_records`
/// contiguous ranges (one per hash slot when there are as many).
pub(crate) fn slot_key(config: &Breaker, slot: HashSlot) -> String {
    let records = config.slot_records.get().min(HASH_SLOTS);
    let range = u32::from(slot.0).min(HASH_SLOTS - 1) * records / HASH_SLOTS;
    format!("ratelimit.breaker.{range}")
}

/// One record's gate (CAS-claims the probe when half-open), and the
/// record as read. A wait or a probe deadline further ahead than it can
/// ever be set (the record's wait, the probe's bound) was set before the
/// wall clock stepped back: it is over, or the breaker would stay open
/// for the step's length on top of its wait.
fn gate_one<S>(shared: &S, config: &Breaker, key: &str, now: Instant, probe_ms: u64) -> (Gate, Record)
where
    S: SharedData + ?Sized,
{
    let now_ms = now.ms();
    let mut last = [0; 4];
    let gate = shared::update(shared, key, |bytes| {
        let r = decode(bytes);
        last = r;
        let [failures, open_until, probe_deadline, last_failure] = r;
        if open_until == 0 {
            return Change::Leave(Gate::Call);
        }
        let wait = wait_ms(config, failures.saturating_sub(u64::from(config.failures)));
        let waiting = now_ms < open_until && open_until <= now_ms.saturating_add(wait);
        let probing = now_ms < probe_deadline && probe_deadline <= now_ms.saturating_add(probe_ms);
        if waiting || probing {
            Change::Leave(Gate::Open)
        } else {
            Change::Put(write_u64s([failures, open_until, now_ms + probe_ms, last_failure]), Gate::Probe)
        }
    });
    // Other workers kept claiming it: one of them probes.
    (gate.unwrap_or(Gate::Open), last)
}

/// Decides whether a call for a key in hash slot `slot` may go to the store.
/// `probe_ms` bounds how long one probe may hold a half-open breaker.
pub fn gate<S: SharedData + ?Sized>(shared: &S, config: &Breaker, slot: HashSlot, now: Instant, probe_ms: u64) -> Gate {
    let now_ms = now.ms();
    let (store_gate, store) = gate_one(shared, config, STORE_KEY, now, probe_ms);
    if store_gate != Gate::Call {
        return store_gate;
    }
    // No slot failed recently enough for its breaker to be anything but closed.
    let last_slot_failure = store[3];
    if last_slot_failure == 0 || now_ms >= last_slot_failure + config.open.ms() + probe_ms {
        return Gate::Call;
    }
    gate_one(shared, config, &slot_key(config, slot), now, probe_ms).0
}

/// Updates `key`'s record with `next(record)`; `None` leaves it. (Lost to
/// other workers' writes: theirs stand, each a result as telling.)
fn update<S: SharedData + ?Sized>(shared: &S, key: &str, next: impl Fn(Record) -> Option<Record>) {
    let _ = shared::update(shared, key, |bytes| match next(decode(bytes)) {
        Some(new) => Change::Put(write_u64s(new), ()),
        None => Change::Leave(()),
    });
}

/// (failures, open until) after one more failure at `now_ms`, or `None`
/// when it changes nothing:
/// - closed: one more consecutive failure; at the threshold it opens for
///   the first wait. When `stale_since` (its last failure) is given, a
///   count older than the open period starts over, so scattered failures
///   never add up;
/// - open with a probe out: the probe failed; open again, for twice the
///   last wait (at most the open period);
/// - open with no probe out: a call sent before it opened came back late.
///   It says nothing new, and must not stretch the wait.
fn failed(r: Record, stale_since: Option<u64>, config: &Breaker, now: Instant) -> Option<(u64, u64)> {
    let now_ms = now.ms();
    let [failures, open_until, probe_deadline, _] = r;
    let threshold = u64::from(config.failures);
    if open_until != 0 {
        if probe_deadline == 0 {
            return None;
        }
        let failures = failures.saturating_add(1);
        return Some((failures, now_ms.saturating_add(wait_ms(config, failures.saturating_sub(threshold)))));
    }
    let stale = stale_since.is_some_and(|t| t != 0 && now_ms.saturating_sub(t) > config.open.ms());
    let failures = if stale { 1 } else { failures.saturating_add(1) };
    let open_until = if failures >= threshold { now_ms.saturating_add(wait_ms(config, 0)) } else { 0 };
    Some((failures, open_until))
}

fn closed(r: Record) -> Option<Record> {
    (r[0] != 0 || r[1] != 0).then_some([0, 0, 0, r[3]])
}

/// Records the result of a call for hash slot `slot`.
pub fn record<S: SharedData + ?Sized>(shared: &S, config: &Breaker, slot: HashSlot, now: Instant, health: Health) {
    let now_ms = now.ms();
    match health {
        // Consecutive: any answer in between resets the count.
        Health::StoreDown => update(shared, STORE_KEY, |r| {
            let (failures, open_until) = failed(r, None, config, now)?;
            Some([failures, open_until, 0, r[3]])
        }),
        // The transport works: the store breaker closes; the hash slot counts.
        Health::KeyFailed => {
            update(shared, STORE_KEY, |_| Some([0, 0, 0, now_ms]));
            update(shared, &slot_key(config, slot), |r| {
                let (failures, open_until) = failed(r, Some(r[3]), config, now)?;
                Some([failures, open_until, 0, now_ms])
            });
        }
        Health::Answered => {
            let store = read(shared, STORE_KEY);
            if closed(store).is_some() {
                update(shared, STORE_KEY, closed);
            }
            // Only a hash slot that failed lately can have a count to clear.
            if store[3] != 0 && now_ms < store[3] + 2 * config.open.ms() {
                update(shared, &slot_key(config, slot), closed);
            }
        }
    }
}

#[cfg(test)]
mod tests;
