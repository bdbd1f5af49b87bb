use super::*;
use crate::shared::fake::FakeShared;
use wasm_bindgen_test::wasm_bindgen_test;

const CFG: Breaker = Breaker { failures: 3, open: crate::time::Millis::of(30_000) };
const DOWN: Health = Health::StoreDown;

fn gate_at(s: &FakeShared, slot: u16, now: u64) -> Gate {
    gate(s, &CFG, slot, now, 100)
}

#[test]
#[wasm_bindgen_test]
fn opens_after_three_transport_failures_then_lets_one_probe_through() {
    let s = FakeShared::default();
    for t in 0..2 {
        record(&s, &CFG, 1, t, DOWN);
        assert_eq!(gate_at(&s, 1, t), Gate::Call, "{} failures keep it closed", t + 1);
    }
    record(&s, &CFG, 1, 10, DOWN);
    assert_eq!(gate_at(&s, 1, 10), Gate::Open);
    assert_eq!(gate_at(&s, 2, 10), Gate::Open, "a store-wide failure stops every slot");
    assert_eq!(gate_at(&s, 1, 30_009), Gate::Open, "open for 30 s");
    assert_eq!(gate_at(&s, 1, 30_010), Gate::Probe);
    assert_eq!(gate_at(&s, 2, 30_011), Gate::Open, "only one probe at a time");
    record(&s, &CFG, 1, 30_020, Health::Answered);
    assert_eq!(gate_at(&s, 2, 30_021), Gate::Call);
}

#[test]
#[wasm_bindgen_test]
fn a_failed_probe_reopens_and_a_lost_probe_is_replaced() {
    let s = FakeShared::default();
    for t in 0..3 {
        record(&s, &CFG, 1, t, DOWN);
    }
    assert_eq!(gate_at(&s, 1, 30_002), Gate::Probe);
    record(&s, &CFG, 1, 30_050, DOWN);
    assert_eq!(gate_at(&s, 1, 60_049), Gate::Open);
    assert_eq!(gate_at(&s, 1, 60_050), Gate::Probe);
    // That probe never reports back: after its deadline another goes.
    assert_eq!(gate_at(&s, 1, 60_149), Gate::Open);
    assert_eq!(gate_at(&s, 1, 60_150), Gate::Probe);
}

#[test]
#[wasm_bindgen_test]
fn an_answer_resets_the_count_of_consecutive_failures() {
    let s = FakeShared::default();
    record(&s, &CFG, 1, 0, DOWN);
    record(&s, &CFG, 1, 1, DOWN);
    record(&s, &CFG, 1, 2, Health::Answered);
    record(&s, &CFG, 1, 3, DOWN);
    record(&s, &CFG, 1, 4, DOWN);
    assert_eq!(gate_at(&s, 1, 5), Gate::Call);
}

#[test]
#[wasm_bindgen_test]
fn a_failing_shard_opens_only_its_slot_while_other_slots_keep_calling() {
    let s = FakeShared::default();
    // Errors for slot 7, interleaved with answers for slot 9000.
    for t in 0..3 {
        record(&s, &CFG, 7, t * 10, Health::KeyFailed);
        record(&s, &CFG, 9000, t * 10 + 5, Health::Answered);
    }
    assert_eq!(gate_at(&s, 7, 30), Gate::Open);
    assert_eq!(gate_at(&s, 9000, 30), Gate::Call, "another shard is untouched");
    assert_eq!(gate_at(&s, 7, 30_020), Gate::Probe, "the slot probes after its open period");
    record(&s, &CFG, 7, 30_030, Health::Answered);
    assert_eq!(gate_at(&s, 7, 30_031), Gate::Call);
}

#[test]
#[wasm_bindgen_test]
fn key_failures_never_open_the_store_breaker() {
    let s = FakeShared::default();
    record(&s, &CFG, 1, 0, DOWN);
    record(&s, &CFG, 1, 1, DOWN);
    record(&s, &CFG, 1, 2, Health::KeyFailed); // the transport answered
    record(&s, &CFG, 2, 3, DOWN);
    assert_eq!(gate_at(&s, 2, 4), Gate::Call);
}

#[test]
#[wasm_bindgen_test]
fn scattered_failures_long_apart_never_add_up() {
    let s = FakeShared::default();
    for t in [0, 40_000, 80_000] {
        record(&s, &CFG, 7, t, Health::KeyFailed);
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
