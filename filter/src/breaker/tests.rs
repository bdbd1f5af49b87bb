use std::num::NonZeroU32;

use super::*;
use crate::shared::fake::FakeShared;
use wasm_bindgen_test::wasm_bindgen_test;

/// The default: 4,096 slot records (`deny_cache.slots`), 4 hash slots each.
const RECORDS: NonZeroU32 = NonZeroU32::MIN.saturating_add(4095);
const CFG: Breaker = Breaker { failures: 3, open: crate::time::Millis::of(30_000), slot_records: RECORDS };
const DOWN: Health = Health::StoreDown;

fn gate_at(s: &FakeShared, slot: u16, now: u64) -> Gate {
    gate(s, &CFG, HashSlot(slot), Instant::from_ms(now), 100)
}

#[test]
#[wasm_bindgen_test]
fn opens_after_three_transport_failures_then_lets_one_probe_through_after_a_second() {
    let s = FakeShared::default();
    for t in 0..2 {
        record(&s, &CFG, HashSlot(1), Instant::from_ms(t), DOWN);
        assert_eq!(gate_at(&s, 1, t), Gate::Call, "{} failures keep it closed", t + 1);
    }
    record(&s, &CFG, HashSlot(1), Instant::from_ms(10), DOWN);
    assert_eq!(gate_at(&s, 1, 10), Gate::Open);
    assert_eq!(gate_at(&s, 2, 10), Gate::Open, "a store-wide failure stops every slot");
    assert_eq!(gate_at(&s, 1, 1_009), Gate::Open, "open for 1 s");
    assert_eq!(gate_at(&s, 1, 1_010), Gate::Probe);
    assert_eq!(gate_at(&s, 2, 1_011), Gate::Open, "only one probe at a time");
    record(&s, &CFG, HashSlot(1), Instant::from_ms(1_020), Health::Answered);
    assert_eq!(gate_at(&s, 2, 1_021), Gate::Call);
}

#[test]
#[wasm_bindgen_test]
fn a_wall_clock_stepped_back_never_holds_the_breaker_open_past_its_wait() {
    let s = FakeShared::default();
    for t in [10_000, 10_001, 10_002] {
        record(&s, &CFG, HashSlot(1), Instant::from_ms(t), DOWN);
    }
    // Open until 11,002 (a wait of 1 s). The clock steps back 6 s: the wait
    // cannot be 7 s long, so it is over.
    assert_eq!(gate_at(&s, 1, 10_500), Gate::Open);
    assert_eq!(gate_at(&s, 1, 4_002), Gate::Probe);
    // The probe claimed at 4,002 holds 100 ms, then another may go.
    assert_eq!(gate_at(&s, 1, 4_050), Gate::Open);
    record(&s, &CFG, HashSlot(1), Instant::from_ms(4_060), Health::Answered);
    assert_eq!(gate_at(&s, 1, 4_061), Gate::Call);
}

/// Opens the breaker at `t` (three failures), then fails every probe the
/// moment it is let through; the instants of the probes, from `t`, until
/// `until`.
fn probe_instants(s: &FakeShared, config: &Breaker, t: u64, until: u64) -> Vec<u64> {
    for _ in 0..3 {
        record(s, config, HashSlot(1), Instant::from_ms(t), DOWN);
    }
    let mut probes = Vec::new();
    for now in t..=until {
        match gate(s, config, HashSlot(1), Instant::from_ms(now), 100) {
            Gate::Probe => {
                probes.push(now - t);
                record(s, config, HashSlot(1), Instant::from_ms(now), DOWN);
            }
            Gate::Open => {}
            Gate::Call => panic!("closed at {now} with every probe failing"),
        }
    }
    probes
}

#[test]
#[wasm_bindgen_test]
fn the_wait_before_each_probe_doubles_from_one_second_up_to_the_open_period() {
    let s = FakeShared::default();
    assert_eq!(
        probe_instants(&s, &CFG, 5_000, 5_000 + 200_000),
        // Waits of 1, 2, 4, 8, 16, then 30 s: one probe per open period.
        [1_000, 3_000, 7_000, 15_000, 31_000, 61_000, 91_000, 121_000, 151_000, 181_000]
    );
    let waits: Vec<u64> = (0..8).map(|k| wait_ms(&CFG, k)).collect();
    assert_eq!(waits, [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]);
    assert_eq!(wait_ms(&CFG, u64::MAX), 30_000, "no overflow after any number of probes");
}

#[test]
#[wasm_bindgen_test]
fn an_open_period_under_two_seconds_caps_the_doubling_early() {
    let short = Breaker { open: crate::time::Millis::of(2_500), ..CFG };
    assert_eq!(probe_instants(&FakeShared::default(), &short, 0, 12_000), [1_000, 3_000, 5_500, 8_000, 10_500]);
    let tiny = Breaker { open: crate::time::Millis::of(250), ..CFG };
    assert_eq!(probe_instants(&FakeShared::default(), &tiny, 0, 1_000), [250, 500, 750, 1_000], "always `open`");
}

#[test]
#[wasm_bindgen_test]
fn a_successful_probe_closes_it_and_the_next_opening_starts_again_at_one_second() {
    let s = FakeShared::default();
    assert_eq!(probe_instants(&s, &CFG, 0, 20_000), [1_000, 3_000, 7_000, 15_000]);
    // The next probe, at 31 000, finds the store back.
    assert_eq!(gate_at(&s, 1, 31_000), Gate::Probe);
    record(&s, &CFG, HashSlot(1), Instant::from_ms(31_004), Health::Answered);
    assert_eq!(gate_at(&s, 1, 31_005), Gate::Call);
    assert_eq!(probe_instants(&s, &CFG, 40_000, 48_000), [1_000, 3_000, 7_000], "the doubling starts over");
}

#[test]
#[wasm_bindgen_test]
fn a_late_failure_of_a_call_sent_before_it_opened_does_not_stretch_the_wait() {
    let s = FakeShared::default();
    for t in 0..3 {
        record(&s, &CFG, HashSlot(1), Instant::from_ms(t), DOWN);
    }
    // Calls in flight when it opened fail afterwards, with no probe out.
    for t in [20, 400, 999] {
        record(&s, &CFG, HashSlot(1), Instant::from_ms(t), DOWN);
    }
    assert_eq!(gate_at(&s, 1, 1_001), Gate::Open);
    assert_eq!(gate_at(&s, 1, 1_002), Gate::Probe, "still 1 s after it opened");
    record(&s, &CFG, HashSlot(1), Instant::from_ms(1_010), DOWN);
    // The probe's failure doubles the wait once, and a second late failure
    // (no probe out any more) changes nothing.
    record(&s, &CFG, HashSlot(1), Instant::from_ms(1_500), DOWN);
    assert_eq!(gate_at(&s, 1, 3_009), Gate::Open);
    assert_eq!(gate_at(&s, 1, 3_010), Gate::Probe);
}

#[test]
#[wasm_bindgen_test]
fn a_failed_probe_reopens_and_a_lost_probe_is_replaced() {
    let s = FakeShared::default();
    for t in 0..3 {
        record(&s, &CFG, HashSlot(1), Instant::from_ms(t), DOWN);
    }
    assert_eq!(gate_at(&s, 1, 1_002), Gate::Probe);
    record(&s, &CFG, HashSlot(1), Instant::from_ms(1_050), DOWN);
    assert_eq!(gate_at(&s, 1, 3_049), Gate::Open);
    assert_eq!(gate_at(&s, 1, 3_050), Gate::Probe);
    // That probe never reports back: after its deadline another goes.
    assert_eq!(gate_at(&s, 1, 3_149), Gate::Open);
    assert_eq!(gate_at(&s, 1, 3_150), Gate::Probe);
}

/// Shared data where a rival worker runs its own gate between this
/// worker's read and its compare-and-swap write: the race the CAS decides.
struct Racing<'a> {
    shared: &'a FakeShared,
    /// The rival's slot and instant, taken by the first write.
    rival: std::cell::Cell<Option<(u16, u64)>>,
    rival_gate: std::cell::Cell<Option<Gate>>,
}

impl SharedData for Racing<'_> {
    fn get(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        self.shared.get(key)
    }
    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        if let Some((slot, now)) = self.rival.take() {
            self.rival_gate.set(Some(gate(self.shared, &CFG, HashSlot(slot), Instant::from_ms(now), 100)));
        }
        self.shared.set(key, value, cas)
    }
}

#[test]
#[wasm_bindgen_test]
fn two_workers_racing_for_the_probe_claim_it_once() {
    for (breaker_slot, slots) in [(None, (1, 2)), (Some(7), (7, 7))] {
        let s = FakeShared::default();
        for t in 0..3 {
            match breaker_slot {
                None => record(&s, &CFG, HashSlot(1), Instant::from_ms(t), DOWN),
                Some(slot) => record(&s, &CFG, HashSlot(slot), Instant::from_ms(t), Health::KeyFailed),
            }
        }
        let racing = Racing { shared: &s, rival: Some((slots.1, 1_002)).into(), rival_gate: None.into() };
        // Both read the half-open record; the rival writes its claim first.
        let mine = gate(&racing, &CFG, HashSlot(slots.0), Instant::from_ms(1_002), 100);
        assert_eq!(racing.rival_gate.get(), Some(Gate::Probe), "{breaker_slot:?}: the rival won the claim");
        assert_eq!(mine, Gate::Open, "{breaker_slot:?}: the loser's write is refused and it reads the claim");
        // Until the probe reports or its deadline passes, nobody else probes.
        assert_eq!(gate_at(&s, slots.0, 1_101), Gate::Open);
        assert_eq!(gate_at(&s, slots.0, 1_102), Gate::Probe, "the lost probe is replaced once");
    }
}

#[test]
#[wasm_bindgen_test]
fn an_answer_resets_the_count_of_consecutive_failures() {
    let s = FakeShared::default();
    record(&s, &CFG, HashSlot(1), Instant::from_ms(0), DOWN);
    record(&s, &CFG, HashSlot(1), Instant::from_ms(1), DOWN);
    record(&s, &CFG, HashSlot(1), Instant::from_ms(2), Health::Answered);
    record(&s, &CFG, HashSlot(1), Instant::from_ms(3), DOWN);
    record(&s, &CFG, HashSlot(1), Instant::from_ms(4), DOWN);
    assert_eq!(gate_at(&s, 1, 5), Gate::Call);
}

#[test]
#[wasm_bindgen_test]
fn a_failing_shard_opens_only_its_slot_while_other_slots_keep_calling() {
    let s = FakeShared::default();
    // Errors for slot 7, interleaved with answers for slot 9000.
    for t in 0..3 {
        record(&s, &CFG, HashSlot(7), Instant::from_ms(t * 10), Health::KeyFailed);
        record(&s, &CFG, HashSlot(9000), Instant::from_ms(t * 10 + 5), Health::Answered);
    }
    assert_eq!(gate_at(&s, 7, 30), Gate::Open);
    assert_eq!(gate_at(&s, 9000, 30), Gate::Call, "another shard is untouched");
    assert_eq!(gate_at(&s, 7, 1_019), Gate::Open);
    assert_eq!(gate_at(&s, 7, 1_020), Gate::Probe, "the slot probes 1 s after it opened");
    record(&s, &CFG, HashSlot(7), Instant::from_ms(1_030), Health::Answered);
    assert_eq!(gate_at(&s, 7, 1_031), Gate::Call);
}

#[test]
#[wasm_bindgen_test]
fn key_failures_never_open_the_store_breaker() {
    let s = FakeShared::default();
    record(&s, &CFG, HashSlot(1), Instant::from_ms(0), DOWN);
    record(&s, &CFG, HashSlot(1), Instant::from_ms(1), DOWN);
    record(&s, &CFG, HashSlot(1), Instant::from_ms(2), Health::KeyFailed); // the transport answered
    record(&s, &CFG, HashSlot(2), Instant::from_ms(3), DOWN);
    assert_eq!(gate_at(&s, 2, 4), Gate::Call);
}

#[test]
#[wasm_bindgen_test]
fn scattered_failures_long_apart_never_add_up() {
    let s = FakeShared::default();
    for t in [0, 40_000, 80_000] {
        record(&s, &CFG, HashSlot(7), Instant::from_ms(t), Health::KeyFailed);
    }
    assert_eq!(gate_at(&s, 7, 80_001), Gate::Call);
}

#[test]
#[wasm_bindgen_test]
fn failures_are_classified_by_what_they_say_about_the_store() {
    assert_eq!(Health::of::<()>(&Ok(())), Health::Answered);
    assert_eq!(Health::of::<()>(&Err(StoreError::Status(504))), Health::StoreDown);
    assert_eq!(Health::of::<()>(&Err(StoreError::Network)), Health::StoreDown);
    assert_eq!(Health::of::<()>(&Err(StoreError::Redis("ERR upstream failure".into()))), Health::KeyFailed);
    assert_eq!(Health::of::<()>(&Err(StoreError::Malformed("x"))), Health::KeyFailed);
}

/// Hash slot `slot` failed inside Redis three times at `t`: its record opens.
fn fail_three_times(s: &FakeShared, config: &Breaker, slot: u16, t: u64) {
    for _ in 0..3 {
        record(s, config, HashSlot(slot), Instant::from_ms(t), Health::KeyFailed);
    }
}

#[test]
#[wasm_bindgen_test]
fn every_hash_slot_failing_keeps_the_slot_records_within_the_deny_caches_slots() {
    for records in [1, 16, 4096, 16384, 1 << 20] {
        let config = Breaker { slot_records: NonZeroU32::new(records).unwrap(), ..CFG };
        let s = FakeShared::default();
        for slot in 0..16384 {
            record(&s, &config, HashSlot(slot), Instant::from_ms(10), Health::KeyFailed);
        }
        // The store's record, and one per range: never one per hash slot
        // past `slot_records`.
        assert_eq!(s.len() as u32, 1 + records.min(16384), "{records} records");
    }
}

#[test]
#[wasm_bindgen_test]
fn a_dead_shard_opens_its_own_hash_slots_and_only_those_sharing_a_range_at_its_edges() {
    // Three shards, as `redis-cli --cluster create` deals the slots; the
    // middle one dies.
    let dead = 5461..=10922;
    // Ranges of 4 hash slots: one straddles each edge; of 16: 5456..=5471
    // and 10912..=10927; one per hash slot: none.
    let cases = [
        (4096, vec![5460, 10923]),
        (1024, vec![5456, 5457, 5458, 5459, 5460, 10923, 10924, 10925, 10926, 10927]),
        (16384, vec![]),
    ];
    for (records, foreign) in cases {
        let config = Breaker { slot_records: NonZeroU32::new(records).unwrap(), ..CFG };
        let s = FakeShared::default();
        for slot in dead.clone() {
            fail_three_times(&s, &config, slot, 10);
        }
        let open: Vec<u16> = (0..16384)
            .filter(|&slot| gate(&s, &config, HashSlot(slot), Instant::from_ms(20), 100) == Gate::Open)
            .collect();
        assert!(dead.clone().all(|slot| open.contains(&slot)), "{records}: every hash slot of the dead shard is open");
        let others: Vec<u16> = open.into_iter().filter(|slot| !dead.contains(slot)).collect();
        assert_eq!(others, foreign, "{records} records: the other shards' hash slots it fails");
    }
}
