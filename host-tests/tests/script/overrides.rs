//! Operators' overrides (`lua/override.lua`): one client's limit changed,
//! blocked or reset in Redis, read with the counts in the same call. Each
//! case against the model, and random batches mixing overrides with every
//! op against it.

use proptest::prelude::*;
use ratelimit::algorithm::Algorithm;
use ratelimit::model::Model;
use ratelimit::outcome::{LimitOutcome, Overridden};
use ratelimit::spec::{DecisionCall, LimitCall, Mark, Op};

use crate::fixture::{spec, Fixture, T0};
use crate::properties::{plan, scenario, Marks, RULES};

/// An override's expiry in these tests: far longer than any test runs.
const HOUR: u64 = 3_600_000;

/// A block's outcomes say its time left, which runs in real time in Redis:
/// each is checked to be at most `HOUR` and within ten minutes of it, then
/// taken as the model's (which says `HOUR`).
fn with_blocks_as_the_model(mut got: Vec<Vec<LimitOutcome>>) -> Vec<Vec<LimitOutcome>> {
    for o in got.iter_mut().flatten() {
        if o.overridden.is_some_and(Overridden::blocked) {
            assert!(o.reset_ms <= HOUR && o.reset_ms > HOUR - 600_000, "{o:?}");
            (o.reset_ms, o.retry_after_ms) = (HOUR, Some(HOUR));
        }
    }
    got
}

fn uses(rule: &'static str, specs: &[ratelimit::spec::LimitSpec], cost: u64) -> Vec<LimitCall<'static>> {
    specs.iter().map(|&spec| LimitCall { rule, spec, op: Op::Use(cost), offset_ms: None }).collect()
}

#[test]
fn an_override_raises_one_clients_limit_and_no_one_elses() {
    let sw = spec(Algorithm::SlidingWindow, 10, 60_000, 10);
    let mut f = Fixture::new();
    f.set_override("a", "r", "sw:60000=20", Some(HOUR));
    let limits = uses("r", &[sw], 1);
    let admitted = |f: &mut Fixture, who: &str| {
        (0..30)
            .filter(|_| f.run_overrides(T0, &[DecisionCall { identity: who, limits: &limits }]).unwrap()[0][0].allowed)
            .count()
    };
    assert_eq!(admitted(&mut f, "a"), 20);
    assert_eq!(admitted(&mut f, "b"), 10);
    let a = f.run_overrides(T0, &[DecisionCall { identity: "a", limits: &limits }]).unwrap();
    assert_eq!(a[0][0].overridden, Some(Overridden { limit: 20, reset: false }));
    let b = f.run_overrides(T0, &[DecisionCall { identity: "b", limits: &limits }]).unwrap();
    assert_eq!(b[0][0].overridden, None, "b has none: its reply says nothing more");
    // The same call without reading overrides: a is at its configured 10.
    assert!(!f.run(T0, &[DecisionCall { identity: "a", limits: &limits }]).unwrap()[0][0].allowed);
}

#[test]
fn every_algorithm_is_decided_with_the_overridden_limit_as_the_model_decides() {
    let specs = [
        spec(Algorithm::SlidingWindow, 4, 1000, 4),
        spec(Algorithm::FixedWindow, 4, 1000, 4),
        spec(Algorithm::TokenBucket, 4, 1000, 4),
        spec(Algorithm::TokenBucket, 4, 1000, 2),
        spec(Algorithm::Gcra, 4, 1000, 2),
        spec(Algorithm::SlidingLog, 4, 1000, 4),
        spec(Algorithm::Concurrency, 4, 1000, 1),
    ];
    for s in specs {
        let mut f = Fixture::new();
        let mut model = Model::new();
        let text = match s.algorithm {
            Algorithm::Concurrency => "cc=7".to_string(),
            a => format!("{}:1000=7", a.code()),
        };
        f.set_override("a", "r", &text, Some(HOUR));
        model.set_override("a", "r", &text, HOUR);
        let mut now = T0;
        for step in 0..40u64 {
            now += [0, 90, 300][step as usize % 3];
            let op = match (s.algorithm, step % 4) {
                (Algorithm::Concurrency, _) => Op::Take(ratelimit::spec::PermitId(step + 1), 0),
                (_, 3) if s.algorithm != Algorithm::SlidingLog => Op::Charge(2),
                (_, 2) => Op::Check(1),
                _ => Op::Use(1),
            };
            let limits = [LimitCall { rule: "r", spec: s, op, offset_ms: None }];
            let batch = [DecisionCall { identity: "a", limits: &limits }];
            let got = f.run_overrides(now, &batch).unwrap();
            assert_eq!(got, model.decide_all(now, now, &batch), "{s:?} step {step}");
            assert_eq!(got[0][0].overridden.map(|o| o.limit), Some(7), "{s:?}");
        }
    }
}

#[test]
fn a_token_bucket_whose_burst_is_its_limit_takes_the_override_as_both() {
    let tb = spec(Algorithm::TokenBucket, 4, 60_000, 4);
    let mut f = Fixture::new();
    f.set_override("a", "r", "tb:60000=9", Some(HOUR));
    let limits = uses("r", &[tb], 1);
    let got: Vec<bool> = (0..12)
        .map(|_| f.run_overrides(T0, &[DecisionCall { identity: "a", limits: &limits }]).unwrap()[0][0].allowed)
        .collect();
    assert_eq!(got.iter().filter(|a| **a).count(), 9, "a bucket of 9: {got:?}");
}

#[test]
fn a_block_refuses_every_request_and_writes_nothing_and_a_charge_still_counts() {
    let sw = spec(Algorithm::SlidingWindow, 10, 60_000, 10);
    let fw = spec(Algorithm::FixedWindow, 100, 60_000, 100);
    let mut f = Fixture::new();
    let mut model = Model::new();
    f.set_override("a", "r", "block", Some(HOUR));
    model.set_override("a", "r", "block", HOUR);
    let limits = uses("r", &[sw, fw], 1);
    let before = f.snapshot();
    for _ in 0..3 {
        let batch = [DecisionCall { identity: "a", limits: &limits }];
        let got = with_blocks_as_the_model(f.run_overrides(T0, &batch).unwrap());
        assert_eq!(got, model.decide_all(T0, T0, &batch));
        for o in &got[0] {
            assert_eq!((o.allowed, o.remaining, o.overridden.map(|o| o.limit)), (false, 0, Some(0)));
        }
    }
    assert_eq!(f.snapshot(), before, "a blocked request writes nothing");
    // A charge (a response admitted before the block) is still counted.
    let charge: Vec<LimitCall> =
        [sw, fw].map(|spec| LimitCall { rule: "r", spec, op: Op::Charge(3), offset_ms: None }).into();
    let batch = [DecisionCall { identity: "a", limits: &charge }];
    let got = f.run_overrides(T0, &batch).unwrap();
    assert_eq!(got, model.decide_all(T0, T0, &batch));
    assert_eq!(got[0][1].remaining, 97, "charged 3");
    // Another rule of the same client, and another client, are not blocked.
    let other = uses("s", &[sw], 1);
    assert!(f.run_overrides(T0, &[DecisionCall { identity: "a", limits: &other }]).unwrap()[0][0].allowed);
    assert!(f.run_overrides(T0, &[DecisionCall { identity: "b", limits: &limits }]).unwrap()[0][0].allowed);
}

#[test]
fn a_reset_gives_a_client_at_its_limit_a_fresh_window_once() {
    let sw = spec(Algorithm::SlidingWindow, 5, 60_000, 5);
    let tb = spec(Algorithm::TokenBucket, 5, 60_000, 5);
    let cc = spec(Algorithm::Concurrency, 3, 60_000, 1);
    let mut f = Fixture::new();
    let mut model = Model::new();
    model.read_overrides();
    let take = |i: u64| {
        vec![
            LimitCall { rule: "r", spec: sw, op: Op::Use(1), offset_ms: None },
            LimitCall { rule: "r", spec: tb, op: Op::Use(1), offset_ms: None },
            LimitCall { rule: "r", spec: cc, op: Op::Take(ratelimit::spec::PermitId(i), 0), offset_ms: None },
        ]
    };
    let mut now = T0;
    let mut admitted = 0;
    for i in 1..=3 {
        let limits = take(i);
        let batch = [DecisionCall { identity: "a", limits: &limits }];
        let got = f.run_overrides(now, &batch).unwrap();
        assert_eq!(got, model.decide_all(now, now, &batch));
        admitted += usize::from(got[0].iter().all(|o| o.allowed));
        now += 1000;
    }
    // Two more uses of sw and tb (no slot): at their limit of 5.
    for _ in 0..2 {
        let limits = uses("r", &[sw, tb], 1);
        let batch = [DecisionCall { identity: "a", limits: &limits }];
        assert_eq!(f.run_overrides(now, &batch).unwrap(), model.decide_all(now, now, &batch));
    }
    assert_eq!(admitted, 3);
    let limits = uses("r", &[sw, tb], 1);
    let denied = f.run_overrides(now, &[DecisionCall { identity: "a", limits: &limits }]).unwrap();
    assert!(!denied[0][0].allowed && !denied[0][1].allowed, "at the limit: {denied:?}");
    model.decide_all(now, now, &[DecisionCall { identity: "a", limits: &limits }]);
    // The reset, with a raised limit kept after it.
    f.set_override("a", "r", "reset sw:60000=6", Some(HOUR));
    model.set_override("a", "r", "reset sw:60000=6", HOUR);
    let batch = [DecisionCall { identity: "a", limits: &limits }, DecisionCall { identity: "a", limits: &limits }];
    let got = f.run_overrides(now, &batch).unwrap();
    assert_eq!(got, model.decide_all(now, now, &batch));
    assert_eq!(got[0][0].overridden, Some(Overridden { limit: 6, reset: true }), "the first applied it");
    assert_eq!(got[1][0].overridden, Some(Overridden { limit: 6, reset: false }), "once");
    assert_eq!((got[1][0].remaining, got[1][1].remaining), (4, 3), "a fresh window: 2 of 6, 2 of 5");
    let (text, ttl) = f.override_of("a", "r");
    assert_eq!(text.as_deref(), Some("sw:60000=6"), "written back without the word");
    assert!(ttl > 0 && ttl as u64 <= HOUR, "its expiry kept: {ttl}");
    // The streams in flight still hold their slots: the fourth is refused.
    let limits = take(4);
    let batch = [DecisionCall { identity: "a", limits: &limits }];
    let got = f.run_overrides(now, &batch).unwrap();
    assert_eq!(got, model.decide_all(now, now, &batch));
    assert!(!got[0][2].allowed && got[0][2].remaining == 0, "{got:?}");
    // A reset alone is gone once applied.
    f.set_override("b", "r", "reset", Some(HOUR));
    f.run_overrides(now, &[DecisionCall { identity: "b", limits: &uses("r", &[sw], 1) }]).unwrap();
    assert_eq!(f.override_of("b", "r"), (None, -2));
}

#[test]
fn charges_and_refunds_apply_no_reset_and_the_next_request_does() {
    let fw = spec(Algorithm::FixedWindow, 5, 60_000, 5);
    let mut f = Fixture::new();
    let mut model = Model::new();
    model.read_overrides();
    let use5 = uses("r", &[fw], 5);
    let batch = [DecisionCall { identity: "a", limits: &use5 }];
    assert_eq!(f.run_overrides(T0, &batch).unwrap(), model.decide_all(T0, T0, &batch));
    f.set_override("a", "r", "reset", Some(HOUR));
    model.set_override("a", "r", "reset", HOUR);
    let charge = [LimitCall { rule: "r", spec: fw, op: Op::Charge(2), offset_ms: None }];
    let refund = [LimitCall {
        rule: "r",
        spec: fw,
        op: Op::Refund { amount: 1, at: ratelimit::time::Instant::from_ms(T0), mark: None::<Mark> },
        offset_ms: None,
    }];
    let batch = [DecisionCall { identity: "a", limits: &charge }, DecisionCall { identity: "a", limits: &refund }];
    let got = f.run_overrides(T0, &batch).unwrap();
    assert_eq!(got, model.decide_all(T0, T0, &batch));
    assert_eq!(got[0][0].overridden, Some(Overridden { limit: 5, reset: false }));
    assert_eq!(f.override_of("a", "r").0.as_deref(), Some("reset"), "still to apply");
    let one = uses("r", &[fw], 1);
    let batch = [DecisionCall { identity: "a", limits: &one }];
    let got = f.run_overrides(T0, &batch).unwrap();
    assert_eq!(got, model.decide_all(T0, T0, &batch));
    assert_eq!((got[0][0].allowed, got[0][0].remaining), (true, 4));
}

#[test]
fn an_override_without_an_expiry_is_ignored_and_words_it_does_not_know_are_kept() {
    let sw = spec(Algorithm::SlidingWindow, 2, 60_000, 2);
    let mut f = Fixture::new();
    let limits = uses("r", &[sw], 1);
    f.set_override("a", "r", "block", None);
    let got = f.run_overrides(T0, &[DecisionCall { identity: "a", limits: &limits }]).unwrap();
    assert_eq!((got[0][0].allowed, got[0][0].overridden), (true, None), "no expiry: ignored");
    // Unknown words, a limit of another window, a zero: nothing changes but the state.
    f.set_override("b", "r", "reset blok sw:1000=9 sw:60000=0 fw:60000=x", Some(HOUR));
    let got = f.run_overrides(T0, &[DecisionCall { identity: "b", limits: &limits }]).unwrap();
    assert_eq!(got[0][0].overridden, Some(Overridden { limit: 2, reset: true }));
    assert_eq!(f.override_of("b", "r").0.as_deref(), Some("blok sw:1000=9 sw:60000=0 fw:60000=x"));
}

#[test]
fn two_rules_of_one_client_each_read_their_own_override() {
    let sw = spec(Algorithm::SlidingWindow, 3, 60_000, 3);
    let mut f = Fixture::new();
    let mut model = Model::new();
    for (rule, text) in [("r", "sw:60000=5"), ("s", "block")] {
        f.set_override("a", rule, text, Some(HOUR));
        model.set_override("a", rule, text, HOUR);
    }
    let mut limits = uses("r", &[sw], 1);
    limits.extend(uses("s", &[sw], 1));
    let batch = [DecisionCall { identity: "a", limits: &limits }];
    let got = with_blocks_as_the_model(f.run_overrides(T0, &batch).unwrap());
    assert_eq!(got, model.decide_all(T0, T0, &batch));
    assert_eq!(got[0].iter().map(|o| o.overridden.map(|o| o.limit)).collect::<Vec<_>>(), [Some(5), Some(0)]);
    assert!(got[0][0].allowed && !got[0][1].allowed, "s blocks the decision: {got:?}");
}

/// One step's operator write: which client and rule, and what (an index
/// into `texts`, past it: the override deleted).
type RawWrite = (bool, usize, usize);

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Random batches of every op (as `properties`), each step first
    /// writing or deleting now and then an override of a client's rule:
    /// a limit of the scenario changed, a block, a reset, words ignored.
    #[test]
    fn the_script_agrees_with_the_model_whatever_operators_write(
        (limits, steps) in scenario(),
        writes in prop::collection::vec((any::<bool>(), 0..4usize, 0..12usize), 30),
        changed in prop::collection::vec(1..15u64, 4),
    ) {
        let mut f = Fixture::new();
        let mut model = Model::new();
        model.read_overrides();
        let mut marks = Marks::new();
        let mut now = T0;
        for (i, (advance, raw)) in steps.iter().enumerate() {
            now += advance;
            let (b, rule, what): RawWrite = writes[i];
            if rule < limits.len() {
                let identity = if b { "b" } else { "a" };
                let s = limits[rule].spec;
                let name = format!("{}:{}", s.algorithm.code(), s.window_ms);
                let texts = [
                    format!("{name}={}", changed[rule]),
                    "block".to_string(),
                    "reset".to_string(),
                    format!("reset {name}={}", changed[rule]),
                    format!("block {name}={}", changed[rule]),
                    format!("{name}=0 junk"),
                    format!("{name}={} reset junk", changed[rule]),
                ];
                match texts.get(what) {
                    Some(text) => {
                        f.set_override(identity, RULES[rule], text, Some(HOUR));
                        model.set_override(identity, RULES[rule], text, HOUR);
                    }
                    None if what % 2 == 0 => {
                        let key = ratelimit::keys::override_key("t", identity, RULES[rule]);
                        let _: i64 = redis::cmd("DEL").arg(key).query(&mut f.conn).unwrap();
                        model.clear_override(identity, RULES[rule]);
                    }
                    None => {}
                }
            }
            let plans: Vec<Vec<LimitCall>> = raw.iter().map(|r| plan(&limits, r, now, &marks)).collect();
            let batch: Vec<DecisionCall> = raw
                .iter()
                .zip(&plans)
                .map(|(r, limits)| DecisionCall { identity: if r.0 { "b" } else { "a" }, limits })
                .collect();
            let got = f.run_overrides(now, &batch).map(with_blocks_as_the_model);
            let want = model.decide_all(now, now, &batch);
            prop_assert_eq!(&got, &Ok(want), "step {} at +{} ms: {:?}", i, now - T0, plans);
            for ((r, calls), outcomes) in raw.iter().zip(&plans).zip(got.unwrap_or_default()) {
                for (call, o) in calls.iter().zip(&outcomes) {
                    let rule = RULES.iter().position(|&x| x == call.rule).unwrap_or(0);
                    let spec = o.overridden.and_then(|v| call.spec.overridden(v.limit)).unwrap_or(call.spec);
                    if let (Op::Reserve(_), Some((_, mark))) = (call.op, Mark::of(&spec, o)) {
                        marks.entry((r.0, rule)).or_default().push(mark);
                    }
                }
            }
        }
    }
}

#[test]
fn a_reset_deletes_the_previous_windows_count_too_for_the_calls_after_it() {
    let sw = spec(Algorithm::SlidingWindow, 5, 1000, 5);
    let mut f = Fixture::new();
    let mut model = Model::new();
    model.read_overrides();
    let one = uses("r", &[sw], 1);
    let batch = [DecisionCall { identity: "a", limits: &one }];
    for _ in 0..4 {
        assert_eq!(f.run_overrides(T0, &batch).unwrap(), model.decide_all(T0, T0, &batch));
    }
    // 100 ms into the next window the previous 4 weigh 3.6: one left.
    let now = T0 + 1_100;
    f.set_override("a", "r", "reset", Some(HOUR));
    model.set_override("a", "r", "reset", HOUR);
    for remaining in [4, 3] {
        let got = f.run_overrides(now, &batch).unwrap();
        assert_eq!(got, model.decide_all(now, now, &batch));
        assert_eq!((got[0][0].allowed, got[0][0].remaining), (true, remaining), "the previous window is gone");
    }
}
