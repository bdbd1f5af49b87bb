//! A Redis error inside one decision (a key of another type under a
//! sliding_log's name: WRONGTYPE) fails that decision alone: it writes
//! nothing, and the other decisions of the batch are decided and written
//! exactly as in a batch without it.

use ratelimit::algorithm::Algorithm::{FixedWindow, SlidingLog, SlidingWindow, TokenBucket};
use ratelimit::spec::{DecisionCall, LimitCall, Op};
use ratelimit::store::script_call::ScriptCall;
use ratelimit::store::StoreError;

use crate::fixture::{limit, row, spec, Fixture, Row, T0};
use ratelimit::time::Instant;

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// Every algorithm's keys in one decision, sliding_log third: the
/// decision's counters are decided (and their writes queued) before it fails.
fn limits() -> Vec<LimitCall<'static>> {
    [SlidingWindow, FixedWindow, SlidingLog, TokenBucket].map(|a| limit(spec(a, 5, 60_000, 5), Op::Use(1))).to_vec()
}

/// The batch of `identities`, each deciding `limits`.
fn batch<'a>(identities: &[&'a str], limits: &'a [LimitCall<'a>]) -> Vec<DecisionCall<'a>> {
    identities.iter().map(|identity| DecisionCall { identity, limits }).collect()
}

#[test]
fn a_decision_that_meets_wrongtype_fails_alone_and_writes_nothing() {
    let limits = limits();
    // The failing client first, in the middle, last.
    for position in 0..3 {
        let others = ["c1", "c3"];
        let mut ids = others.to_vec();
        ids.insert(position, "bad");
        let mut f = Fixture::new();
        let mut control = Fixture::new();
        // One earlier request of each good client, so its keys are held.
        f.run(T0, &batch(&others, &limits)).unwrap();
        control.run(T0, &batch(&others, &limits)).unwrap();
        // A string under the failing client's sliding_log key, without a TTL.
        let call = ScriptCall::new("t", Instant::from_ms(T0 + 1_000), &batch(&ids, &limits));
        let bad_keys: Vec<String> = call.keys.iter().filter(|k| k.contains("{bad}")).cloned().collect();
        let log_key = bad_keys.iter().find(|k| k.contains(":sl:")).unwrap();
        let _: () = redis::cmd("SET").arg(log_key).arg("x").query(&mut f.conn).unwrap();
        let before = f.snapshot();

        let got = f.run_each(&call, T0 + 1_000).unwrap();
        assert_eq!(got.len(), 3, "position {position}");
        assert_eq!(got[position], Err(StoreError::Redis(WRONGTYPE.into())), "position {position}");
        // The others: decided exactly as in a batch without the failing one.
        let expected = control.run(T0 + 1_000, &batch(&others, &limits)).unwrap();
        let decided: Vec<Vec<Row>> = got
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != position)
            .map(|(_, r)| r.as_ref().unwrap().iter().map(row).collect())
            .collect();
        let want: Vec<Vec<Row>> = expected.iter().map(|d| d.iter().map(row).collect()).collect();
        assert_eq!(decided, want, "position {position}");
        // T0 + 1 s is 21 s into its minute; one earlier use of each limit.
        assert_eq!(
            want[0],
            [(true, 3, 99_000, 0), (true, 3, 39_000, 0), (true, 3, 60_000, 0), (true, 3, 23_000, 0)],
            "sw, fw, sl, tb"
        );
        // Nothing of the failed decision was written: its keys are as they were.
        let after = f.snapshot();
        let of_bad =
            |s: &[(String, Vec<u8>)]| s.iter().filter(|(k, _)| k.contains("{bad}")).cloned().collect::<Vec<_>>();
        assert_eq!(of_bad(&after), of_bad(&before), "position {position}");
        assert_eq!(of_bad(&after).len(), 1, "only the foreign string");
        let pttl: i64 = redis::cmd("PTTL").arg(log_key).query(&mut f.conn).unwrap();
        assert_eq!(pttl, -1, "the foreign key is left as it was");
        // ...and every key of the others holds what the control's holds,
        // each written with a TTL.
        let good = |s: Vec<(String, Vec<u8>)>| s.into_iter().filter(|(k, _)| !k.contains("{bad}")).collect::<Vec<_>>();
        assert_eq!(good(after), good(control.snapshot()), "position {position}");
        let mut written: Vec<&str> = f.written.iter().map(|(k, _)| k.as_str()).collect();
        written.sort();
        let mut want_written: Vec<&str> = control.written.iter().map(|(k, _)| k.as_str()).collect();
        want_written.sort();
        assert_eq!(written, want_written, "position {position}");
        assert_eq!(written.len(), 2 * 4, "four keys written per good client");
        assert!(f.written.iter().all(|(_, ttl)| *ttl > 0), "{:?}", f.written);
    }
}

#[test]
fn every_decision_of_a_batch_can_fail_alone_and_the_call_still_answers() {
    let mut f = Fixture::new();
    let log = [limit(spec(SlidingLog, 5, 60_000, 5), Op::Use(1))];
    let ids = ["a", "b"];
    let call = ScriptCall::new("t", Instant::from_ms(T0), &batch(&ids, &log));
    for key in &call.keys {
        let _: i64 = redis::cmd("RPUSH").arg(key).arg("x").query(&mut f.conn).unwrap();
    }
    let before = f.snapshot();
    let got = f.run_each(&call, T0).unwrap();
    assert_eq!(got, [Err(StoreError::Redis(WRONGTYPE.into())), Err(StoreError::Redis(WRONGTYPE.into()))]);
    assert_eq!(f.snapshot(), before);
    // A charge too: a decision of charges fails the same way, alone.
    let charge = [limit(spec(FixedWindow, 5, 60_000, 5), Op::Charge(3))];
    let call = ScriptCall::new(
        "t",
        Instant::from_ms(T0),
        &[DecisionCall { identity: "a", limits: &log }, DecisionCall { identity: "c", limits: &charge }],
    );
    let got = f.run_each(&call, T0).unwrap();
    assert_eq!(got[0], Err(StoreError::Redis(WRONGTYPE.into())));
    assert_eq!(got[1].as_ref().map(|d| row(&d[0])), Ok((true, 2, 40_000, 0)));
}
