//! Batches: decisions run in order, each seeing the writes of those before
//! it; all or nothing holds per decision, not per batch.

use ratelimit::algorithm::Algorithm::*;
use ratelimit::spec::DecisionCall;
use ratelimit::spec::Op::{Charge as G, Check as K, Use as U};

use crate::fixture::{limit, row, spec, Fixture, T0};

#[test]
fn a_batch_answers_allowed_and_denied_decisions_each_on_its_own() {
    let mut f = Fixture::new();
    let five = spec(SlidingWindow, 5, 1000, 5);
    let (a, b, c) = ([limit(five, U(2))], [limit(five, U(6))], [limit(five, K(5))]);
    let got = f
        .run(
            T0,
            &[
                DecisionCall { identity: "a", limits: &a },
                DecisionCall { identity: "b", limits: &b },
                DecisionCall { identity: "c", limits: &c },
            ],
        )
        .unwrap();
    let rows: Vec<_> = got.iter().map(|d| row(&d[0])).collect();
    assert_eq!(rows, [(true, 3, 2000, 0), (false, 5, 0, -1), (true, 5, 0, 0)]);
    // Only the admitted decision wrote.
    let written: Vec<&str> = f.written.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(written, ["t:{a}:r:sw:1000:1700000000"]);
}

#[test]
fn a_second_decision_of_one_client_sees_the_first() {
    let mut f = Fixture::new();
    let three = spec(FixedWindow, 3, 1000, 3);
    let (use2, use1) = ([limit(three, U(2))], [limit(three, U(1))]);
    let batch = [
        DecisionCall { identity: "c", limits: &use2 },
        DecisionCall { identity: "c", limits: &use2 }, // only 1 left: denied
        DecisionCall { identity: "c", limits: &use1 },
        DecisionCall { identity: "c", limits: &use1 }, // none left
    ];
    let rows: Vec<_> = f.run(T0 + 250, &batch).unwrap().iter().map(|d| row(&d[0])).collect();
    assert_eq!(rows, [(true, 1, 750, 0), (false, 1, 750, 750), (true, 0, 750, 0), (false, 0, 750, 750)]);
}

#[test]
fn all_or_nothing_holds_per_decision_inside_a_batch() {
    let mut f = Fixture::new();
    let minute = spec(SlidingWindow, 10, 60_000, 10);
    let one = spec(FixedWindow, 1, 60_000, 1);
    let denied = [limit(minute, U(1)), limit(one, U(2))]; // the second can never fit
    let admitted = [limit(minute, U(1))];
    let got = f
        .run(T0, &[DecisionCall { identity: "c", limits: &denied }, DecisionCall { identity: "c", limits: &admitted }])
        .unwrap();
    // T0 is 20 s into its minute.
    assert_eq!(row(&got[0][0]), (true, 9, 100_000, 0), "the minute allowed, reporting as if admitted");
    assert_eq!(row(&got[0][1]), (false, 1, 40_000, -1));
    assert_eq!(row(&got[1][0]), (true, 9, 100_000, 0), "the denied decision consumed nothing");
    let count: u64 = redis::cmd("GET").arg("t:{c}:r:sw:60000:28333333").query(&mut f.conn).unwrap();
    assert_eq!(count, 1);
}

#[test]
fn a_charge_between_checks_of_one_client_is_seen_by_the_next() {
    let mut f = Fixture::new();
    let tokens = spec(TokenBucket, 100, 60_000, 100);
    let (check, charge) = ([limit(tokens, K(30))], [limit(tokens, G(90))]);
    let batch = [
        DecisionCall { identity: "c", limits: &check },
        DecisionCall { identity: "c", limits: &charge },
        DecisionCall { identity: "c", limits: &check },
    ];
    let got = f.run(T0, &batch).unwrap();
    // 100 tokens, 90 charged: 10 left, 20 more needed at 100 per minute.
    assert_eq!(row(&got[0][0]), (true, 100, 0, 0));
    assert_eq!(row(&got[1][0]), (true, 10, 54_000, 0));
    assert_eq!(row(&got[2][0]), (false, 10, 54_000, 12_000));
}

#[test]
fn a_batch_of_more_keys_than_one_mget_reads_agrees_with_the_model() {
    // 256 decisions of 64 clients, each using two sliding windows and a
    // fixed window: 1,280 keys, read in two MGETs; every client's fourth
    // use finds the three-per-second window full.
    let mut f = Fixture::new();
    let limits = [
        limit(spec(SlidingWindow, 3, 1000, 3), U(1)),
        limit(spec(SlidingWindow, 100, 60_000, 100), U(1)),
        limit(spec(FixedWindow, 50, 3_600_000, 50), U(1)),
    ];
    let names: Vec<String> = (0..64).map(|i| format!("c{i}")).collect();
    let batch: Vec<DecisionCall> =
        (0..256).map(|d| DecisionCall { identity: &names[d % 64], limits: &limits }).collect();
    let got = f.run(T0 + 500, &batch).unwrap();
    let want = ratelimit::model::Model::new().decide_all(T0 + 500, T0 + 500, &batch);
    assert_eq!(got, want);
    let admitted = got.iter().filter(|d| d.iter().all(|l| l.allowed)).count();
    assert_eq!(admitted, 3 * 64);
}
