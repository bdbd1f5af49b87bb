//! Concurrency limits in the script: slots taken, refused, released,
//! renewed and expired on the store's clock, all or nothing with the
//! decision's rate limits, and a TTL on every key.

use ratelimit::algorithm::Algorithm;
use ratelimit::outcome::LimitOutcome;
use ratelimit::spec::{DecisionCall, LimitCall, Op, PermitId};

use crate::fixture::{limit, row, spec, Fixture, T0};

const HOLD: u64 = 3_000;

fn cc(c: u64) -> ratelimit::spec::LimitSpec {
    spec(Algorithm::Concurrency, c, HOLD, 1)
}

fn one(f: &mut Fixture, now: u64, limits: &[LimitCall]) -> Vec<LimitOutcome> {
    f.one("c1", now, limits)
}

fn held(f: &mut Fixture) -> Vec<(String, u64)> {
    let members: Vec<(String, u64)> =
        redis::cmd("ZRANGE").arg("t:{c1}:r:cc").arg(0).arg(-1).arg("WITHSCORES").query(&mut f.conn).unwrap();
    members
}

#[test]
fn the_limit_counts_streams_until_each_is_released() {
    let mut f = Fixture::new();
    let c = cc(2);
    assert_eq!(row(&one(&mut f, T0, &[limit(c, Op::Take(PermitId(11), 0))])[0]), (true, 1, 0, 0));
    assert_eq!(row(&one(&mut f, T0 + 1, &[limit(c, Op::Take(PermitId(12), 0))])[0]), (true, 0, 0, 0));
    // Full: refused with the fixed retry, nothing written.
    let before = f.snapshot();
    assert_eq!(row(&one(&mut f, T0 + 2, &[limit(c, Op::Take(PermitId(13), 0))])[0]), (false, 0, 0, 1000));
    assert_eq!(f.snapshot(), before);
    assert_eq!(held(&mut f), [("11".to_string(), T0 + HOLD), ("12".to_string(), T0 + 1 + HOLD)]);
    // A stream ends: its slot is free at once.
    assert_eq!(row(&one(&mut f, T0 + 3, &[limit(c, Op::Release(PermitId(11)))])[0]), (true, 1, 0, 0));
    assert_eq!(row(&one(&mut f, T0 + 4, &[limit(c, Op::Take(PermitId(13), 0))])[0]), (true, 0, 0, 0));
    // The key lives as long as its latest slot.
    assert_eq!(f.written, [("t:{c1}:r:cc".to_string(), HOLD as i64)]);
    // Released twice: the second finds nothing (allowed 0, retry 0).
    assert_eq!(row(&one(&mut f, T0 + 5, &[limit(c, Op::Release(PermitId(11)))])[0]), (false, 0, 0, 0));
}

#[test]
fn a_take_counts_the_streams_a_proxy_holds_outside_the_store_and_writes_only_its_own() {
    let mut f = Fixture::new();
    let c = cc(3);
    // The reference model says the same at every step.
    let mut model = ratelimit::model::Model::new();
    let steps = [
        (T0, Op::Take(PermitId(1), 0)),
        (T0 + 1, Op::Take(PermitId(2), 1)),
        (T0 + 2, Op::Take(PermitId(3), 2)),
        (T0 + 3, Op::Take(PermitId(3), 0)),
    ];
    let mut g = Fixture::new();
    for (at, op) in steps {
        let limits = [limit(c, op)];
        let decision = DecisionCall { identity: "c1", limits: &limits };
        assert_eq!(g.one("c1", at, &limits), model.decide(at, at, &decision), "{op:?}");
    }
    assert_eq!(row(&one(&mut f, T0, &[limit(c, Op::Take(PermitId(1), 0))])[0]), (true, 2, 0, 0));
    // One in the store, one more held by the proxy, and this one: 3 of 3.
    assert_eq!(row(&one(&mut f, T0 + 1, &[limit(c, Op::Take(PermitId(2), 1))])[0]), (true, 0, 0, 0));
    assert_eq!(held(&mut f), [("1".to_string(), T0 + HOLD), ("2".to_string(), T0 + 1 + HOLD)]);
    // Two in the store, two held by the proxy: refused, nothing written
    // (what remains is the store's: 1).
    let before = f.snapshot();
    assert_eq!(row(&one(&mut f, T0 + 2, &[limit(c, Op::Take(PermitId(3), 2))])[0]), (false, 1, 0, 1000));
    assert_eq!(f.snapshot(), before);
    assert_eq!(row(&one(&mut f, T0 + 3, &[limit(c, Op::Take(PermitId(3), 0))])[0]), (true, 0, 0, 0));
}

#[test]
fn an_unrenewed_slot_expires_and_a_renewed_one_holds() {
    let mut f = Fixture::new();
    let c = cc(2);
    one(&mut f, T0, &[limit(c, Op::Take(PermitId(1), 0))]);
    one(&mut f, T0, &[limit(c, Op::Take(PermitId(2), 0))]);
    // Slot 1's stream lives on: renewed at 2 s, it holds until 5 s.
    assert_eq!(row(&one(&mut f, T0 + 2_000, &[limit(c, Op::Renew(PermitId(1)))])[0]), (true, 0, 0, 0));
    assert_eq!(f.written, [("t:{c1}:r:cc".to_string(), HOLD as i64)]);
    // At 3 s slot 2 (its proxy died) is gone: one more stream fits, not two.
    assert_eq!(row(&one(&mut f, T0 + HOLD, &[limit(c, Op::Take(PermitId(3), 0))])[0]), (true, 0, 0, 0));
    assert_eq!(row(&one(&mut f, T0 + HOLD, &[limit(c, Op::Take(PermitId(4), 0))])[0]), (false, 0, 0, 1000));
    // Renewing a slot that expired takes it again (its stream still runs),
    // and says it had expired.
    assert_eq!(row(&one(&mut f, T0 + 6_000, &[limit(c, Op::Renew(PermitId(1)))])[0]), (false, 1, 0, 0));
    assert_eq!(held(&mut f), [("1".to_string(), T0 + 6_000 + HOLD)]);
    // Nothing renewed: the key itself is gone with its last slot.
    assert_eq!(f.snapshot_at(T0 + 6_000 + HOLD - 1).len(), 1);
    assert_eq!(f.snapshot_at(T0 + 6_000 + HOLD + 1), vec![]);
}

/// A renewal re-adds a slot that expired even when the limit is full: its
/// stream runs whatever the store says, so the store counting it is what
/// keeps the streams in flight from growing further. Refused instead, the
/// stream would run uncounted and every slot freed would admit one more:
/// limit + 1 in flight for as long as it runs.
#[test]
fn a_renewal_counts_its_running_stream_again_even_over_a_full_limit() {
    let mut f = Fixture::new();
    let c = cc(2);
    one(&mut f, T0, &[limit(c, Op::Take(PermitId(1), 0))]);
    // Slot 1 expired (its proxy's renewals failed for max_hold); two more
    // streams took the limit meanwhile.
    assert_eq!(row(&one(&mut f, T0 + HOLD, &[limit(c, Op::Take(PermitId(3), 0))])[0]), (true, 1, 0, 0));
    assert_eq!(row(&one(&mut f, T0 + HOLD, &[limit(c, Op::Take(PermitId(4), 0))])[0]), (true, 0, 0, 0));
    // Stream 1 still runs: its renewal counts it again (3 of 2), and says
    // it had expired.
    assert_eq!(row(&one(&mut f, T0 + HOLD + 1, &[limit(c, Op::Renew(PermitId(1)))])[0]), (false, 0, 0, 0));
    assert_eq!(row(&one(&mut f, T0 + HOLD + 2, &[limit(c, Op::Take(PermitId(5), 0))])[0]), (false, 0, 0, 1000));
    // One stream ends: still 2 in flight, so still no room.
    one(&mut f, T0 + HOLD + 3, &[limit(c, Op::Release(PermitId(3)))]);
    assert_eq!(row(&one(&mut f, T0 + HOLD + 4, &[limit(c, Op::Take(PermitId(5), 0))])[0]), (false, 0, 0, 1000));
    one(&mut f, T0 + HOLD + 5, &[limit(c, Op::Release(PermitId(4)))]);
    assert_eq!(row(&one(&mut f, T0 + HOLD + 6, &[limit(c, Op::Take(PermitId(5), 0))])[0]), (true, 0, 0, 0));
}

#[test]
fn a_slot_is_taken_with_the_rate_limits_all_or_nothing() {
    let mut f = Fixture::new();
    let (c, minute) = (cc(5), spec(Algorithm::FixedWindow, 1, 60_000, 1));
    let d = one(&mut f, T0, &[limit(minute, Op::Use(1)), limit(c, Op::Take(PermitId(1), 0))]);
    assert!(d.iter().all(|o| o.allowed));
    // Refused by the rate: no slot taken (remaining says what the request
    // would have left, as every limit's does).
    let d = one(&mut f, T0 + 1, &[limit(minute, Op::Use(1)), limit(c, Op::Take(PermitId(2), 0))]);
    assert_eq!((d[0].allowed, row(&d[1])), (false, (true, 3, 0, 0)));
    assert_eq!(held(&mut f).len(), 1);
    // Refused by concurrency: no rate consumed.
    let (one_stream, hour) = (cc(1), spec(Algorithm::FixedWindow, 10, 3_600_000, 10));
    let mut g = Fixture::new();
    one(&mut g, T0, &[limit(hour, Op::Use(1)), limit(one_stream, Op::Take(PermitId(1), 0))]);
    let d = one(&mut g, T0 + 1, &[limit(hour, Op::Use(1)), limit(one_stream, Op::Take(PermitId(2), 0))]);
    assert_eq!((row(&d[0]), d[1].allowed), ((true, 8, 3_600_000 - (T0 + 1) % 3_600_000, 0), false));
    assert_eq!(row(&one(&mut g, T0 + 2, &[limit(hour, Op::Check(1))])[0]).1, 9, "one request counted, not two");
}

#[test]
fn decisions_of_one_batch_see_the_slots_taken_before_them() {
    let mut f = Fixture::new();
    let c = cc(2);
    let (a, b, d) = (
        [limit(c, Op::Take(PermitId(1), 0))],
        [limit(c, Op::Take(PermitId(2), 0))],
        [limit(c, Op::Take(PermitId(3), 0))],
    );
    let batch = [
        DecisionCall { identity: "c1", limits: &a },
        DecisionCall { identity: "c1", limits: &b },
        DecisionCall { identity: "c1", limits: &d },
    ];
    let out = f.run(T0, &batch).unwrap();
    let allowed: Vec<bool> = out.iter().map(|d| d[0].allowed).collect();
    assert_eq!(allowed, [true, true, false]);
}
