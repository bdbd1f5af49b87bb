use super::*;
use crate::spec::{LimitCall, Mark, PermitId};
use wasm_bindgen_test::wasm_bindgen_test;

const MINUTE: LimitSpec = LimitSpec { algorithm: Algorithm::SlidingWindow, limit: 100, window_ms: 60_000, burst: 100 };
const DAY: LimitSpec =
    LimitSpec { algorithm: Algorithm::FixedWindow, limit: 10_000, window_ms: 86_400_000, burst: 10_000 };
const BUCKET: LimitSpec = LimitSpec { algorithm: Algorithm::TokenBucket, limit: 3, window_ms: 1000, burst: 5 };

fn limit(spec: LimitSpec, op: Op) -> LimitCall<'static> {
    LimitCall { rule: "api", spec, op, offset_ms: None }
}

#[test]
#[wasm_bindgen_test]
fn one_decision_of_two_limits_makes_one_call_with_all_their_keys() {
    let limits = [limit(MINUTE, Op::Use(1)), limit(DAY, Op::Use(1))];
    let call =
        ScriptCall::new("rl", Instant::from_ms(90_000), &[DecisionCall { identity: "ip=1.2.3.4", limits: &limits }]);
    assert_eq!(
        call.keys,
        ["rl:{ip=1.2.3.4}:api:sw:60000:1", "rl:{ip=1.2.3.4}:api:sw:60000:0", "rl:{ip=1.2.3.4}:api:fw:86400000:0"]
    );
    assert_eq!(
        call.args,
        [
            "90000", "2", "sw", "100", "60000", "100", "fw", "10000", "86400000", "10000", // now, the specs
            "1", "2", "1", "u", "1", "0", "2", "u", "1", "0", // one shape of two limits
            "1", "1", // one decision, of shape 1
        ]
    );
    assert_eq!(call.decisions(), 1);
}

#[test]
#[wasm_bindgen_test]
fn a_batch_shares_equal_specs_and_keeps_each_decision_in_order() {
    let a = [limit(MINUTE, Op::Check(5)), limit(BUCKET, Op::Use(2))];
    let b = [limit(BUCKET, Op::Charge(7))];
    let call = ScriptCall::new(
        "rl",
        Instant::from_ms(60_000),
        &[DecisionCall { identity: "a", limits: &a }, DecisionCall { identity: "b", limits: &b }],
    );
    assert_eq!(
        call.keys,
        ["rl:{a}:api:sw:60000:1", "rl:{a}:api:sw:60000:0", "rl:{a}:api:tb:1000", "rl:{b}:api:tb:1000"]
    );
    assert_eq!(
        call.args,
        [
            "60000", "2", "sw", "100", "60000", "100", "tb", "3", "1000", "5", // two specs, the bucket once
            "2", // two shapes
            "2", "1", "k", "5", "0", "2", "u", "2", "0", // check the minute, use the bucket
            "1", "2", "g", "7", "0", // charge the bucket
            "2", "1", "2", // two decisions: a of shape 1, b of shape 2
        ]
    );
    assert_eq!(call.decisions(), 2);
}

#[test]
#[wasm_bindgen_test]
fn decisions_doing_the_same_send_it_once_as_one_shape() {
    let one = [limit(MINUTE, Op::Use(1))];
    let three = [limit(MINUTE, Op::Use(3))];
    let ids = ["a", "b", "a", "c"];
    let limits = [&one, &one, &three, &one];
    let decisions: Vec<DecisionCall> =
        ids.iter().zip(limits).map(|(identity, limits)| DecisionCall { identity, limits }).collect();
    let call = ScriptCall::new("rl", Instant::from_ms(60_000), &decisions);
    assert_eq!(
        call.args[6..],
        [
            "2", // two shapes
            "1", "1", "u", "1", "0", // use 1
            "1", "1", "u", "3", "0", // use 3
            "4", "1", "1", "2", "1", // four decisions
        ]
    );
    assert_eq!(call.keys.len(), 8, "keys stay per decision");
    assert_eq!(call.reply_len(), 16);
}

#[test]
#[wasm_bindgen_test]
fn a_shifted_fixed_window_has_its_own_key_and_sends_its_offset() {
    let limits = [LimitCall { rule: "api", spec: DAY, op: Op::Use(1), offset_ms: Some(3_600_000) }];
    // 82_800_000 + 3_600_000 = one day: the shifted window 1 has begun.
    let call = ScriptCall::new("rl", Instant::from_ms(82_800_000), &[DecisionCall { identity: "k", limits: &limits }]);
    assert_eq!(call.keys, ["rl:{k}:api:fo:86400000:1"]);
    assert_eq!(call.args[2..6], ["fw", "10000", "86400000", "10000"]);
    assert_eq!(call.args[6..], ["1", "1", "1", "u", "1", "3600000", "1", "1"]);
}

fn two_decisions() -> ScriptCall {
    let a = [limit(MINUTE, Op::Use(1)), limit(DAY, Op::Use(1))];
    let b = [limit(BUCKET, Op::Use(9))];
    ScriptCall::new(
        "rl",
        Instant::from_ms(0),
        &[DecisionCall { identity: "a", limits: &a }, DecisionCall { identity: "b", limits: &b }],
    )
}

/// The reply of these integers only.
fn ints(values: &[i64]) -> ScriptReply {
    values.to_vec().into()
}

fn d(allowed: bool, remaining: u64, reset_ms: u64, retry_after_ms: Option<u64>) -> LimitOutcome {
    LimitOutcome { allowed, remaining, reset_ms, retry_after_ms, overridden: None }
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[test]
#[wasm_bindgen_test]
fn the_reply_splits_into_one_vec_per_decision() {
    let reply = [1, 99, 120_000, 0, 0, 0, 86_400_000, 86_400_000, 0, 5, 0, -1];
    let got = two_decisions().decode(&ints(&reply)).unwrap();
    assert_eq!(
        got,
        [
            Ok(vec![d(true, 99, 120_000, Some(0)), d(false, 0, 86_400_000, Some(86_400_000))]),
            Ok(vec![d(false, 5, 0, None)])
        ]
    );
}

#[test]
#[wasm_bindgen_test]
fn replies_of_the_wrong_length_or_with_impossible_values_are_malformed() {
    let call = two_decisions();
    let ok: [i64; 12] = [1, 99, 120_000, 0, 0, 0, 86_400_000, 86_400_000, 0, 5, 0, -1];
    let wrong_length = StoreError::Malformed("wrong number of values for the limits asked");
    // Short (a whole decision missing), long, and empty (no decision at all).
    assert_eq!(call.decode(&ints(&ok[..8])), Err(wrong_length.clone()));
    assert_eq!(call.decode(&ints(&[ok.as_slice(), &[0; 4]].concat())), Err(wrong_length.clone()));
    assert_eq!(call.decode(&ints(&[])), Err(wrong_length));
    let impossible = StoreError::Malformed("impossible decision values");
    // (index, value): each makes the reply impossible for its limit.
    let cases = [
        (1, 101),        // sliding_window: more remaining than its limit
        (2, 120_001),    // sliding_window: reset beyond two windows
        (3, 5),          // allowed with a retry
        (7, 0),          // denied without a retry
        (7, -1),         // -1 for a cost that fits
        (7, 86_400_001), // fixed_window: retry beyond one window
        (9, 6),          // token_bucket: more remaining than its burst
        (10, 3335),      // token_bucket: reset beyond ceil(2 x 5 x 1000 / 3) = 3334
        (11, 0),         // the cost of 9 never fits a burst of 5: retry must be -1
        (8, 1),          // ... and it is never allowed
    ];
    for (at, value) in cases {
        let mut reply = ok;
        reply[at] = value;
        assert_eq!(call.decode(&ints(&reply)), Err(impossible.clone()), "value {value} at {at}");
    }
    let mut longest = ok;
    longest[10] = 3334;
    assert!(call.decode(&ints(&longest)).is_ok(), "the bound itself is possible");
}

#[test]
#[wasm_bindgen_test]
fn a_decision_that_failed_inside_redis_is_its_own_store_error() {
    let call = two_decisions();
    // The first decision (two limits) failed: its text, then seven zeros.
    let mut reply = ScriptReply::default();
    reply.push_text(WRONGTYPE.into());
    [0, 0, 0, 0, 0, 0, 0, 0, 5, 0, -1].iter().for_each(|&v| reply.push_int(v));
    assert_eq!(call.decode(&reply), Ok(vec![Err(StoreError::Redis(WRONGTYPE.into())), Ok(vec![d(false, 5, 0, None)])]));
    // The second failed; the text bounded and made printable for the log.
    let mut reply = ints(&[1, 99, 120_000, 0, 0, 0, 86_400_000, 86_400_000]);
    reply.push_text(format!("WRONGTYPE \u{1}\n{}", "x".repeat(300)));
    [0, 0, 0].iter().for_each(|&v| reply.push_int(v));
    let got = call.decode(&reply).unwrap();
    assert!(got[0].is_ok());
    let Err(StoreError::Redis(text)) = &got[1] else { panic!("{got:?}") };
    assert!(text.starts_with("WRONGTYPE ??xxx") && text.chars().count() == 200, "{text}");
    // Both failed.
    let mut reply = ScriptReply::default();
    reply.push_text("ERR a".into());
    (0..7).for_each(|_| reply.push_int(0));
    reply.push_text("ERR b".into());
    (0..3).for_each(|_| reply.push_int(0));
    assert_eq!(
        call.decode(&reply),
        Ok(vec![Err(StoreError::Redis("ERR a".into())), Err(StoreError::Redis("ERR b".into()))])
    );
}

#[test]
#[wasm_bindgen_test]
fn a_text_anywhere_but_first_in_a_decision_or_a_failed_decision_with_values_is_malformed() {
    let call = two_decisions();
    let ok: [i64; 12] = [1, 99, 120_000, 0, 0, 0, 86_400_000, 86_400_000, 0, 5, 0, -1];
    let misplaced = Err(StoreError::Malformed("non-integer in the decision"));
    // A text in place of any value but a decision's first (0 and 8).
    for at in (0..12).filter(|at| *at != 0 && *at != 8) {
        let mut reply = ScriptReply::default();
        for (i, &v) in ok.iter().enumerate() {
            if i == at {
                reply.push_text(WRONGTYPE.into());
            } else {
                reply.push_int(v);
            }
        }
        assert_eq!(call.decode(&reply), misplaced, "a text at {at}");
    }
    // A failed decision must carry zeros only.
    let mut reply = ScriptReply::default();
    reply.push_text(WRONGTYPE.into());
    [99, 120_000, 0, 0, 0, 0, 0, 0, 5, 0, -1].iter().for_each(|&v| reply.push_int(v));
    assert_eq!(call.decode(&reply), Err(StoreError::Malformed("a failed decision with values")));
    // A text past the values (a reply built by hand: the transports never do).
    let mut reply = ints(&ok);
    reply.texts.push((12, WRONGTYPE.into()));
    assert_eq!(call.decode(&reply), misplaced);
}

#[test]
#[wasm_bindgen_test]
fn a_call_without_decisions_or_limits_has_no_right_reply() {
    let none = ScriptCall::new("rl", Instant::from_ms(0), &[]);
    let refused = Err(StoreError::Malformed("a call without decisions or limits"));
    assert_eq!(none.decode(&ints(&[])), refused, "zero decisions: an empty reply is no verdict");
    let empty = ScriptCall::new("rl", Instant::from_ms(0), &[DecisionCall { identity: "a", limits: &[] }]);
    assert_eq!(empty.decode(&ints(&[])), refused, "a decision of no limits would allow by an empty all()");
}

#[test]
#[wasm_bindgen_test]
fn a_take_counting_more_local_streams_than_the_limit_is_refused_as_any_full_limit() {
    // Two streams of a limit of 2 held by the local share: the take asks 3.
    // The script refuses it with the concurrency wait; the other decision
    // of the call (another client) keeps its answer.
    let cc = LimitSpec { algorithm: Algorithm::Concurrency, limit: 2, window_ms: 12_000, burst: 2 };
    let (a, b) = ([limit(cc, Op::Take(PermitId(7), 0))], [limit(cc, Op::Take(PermitId(8), 2))]);
    let call = ScriptCall::new(
        "rl",
        Instant::from_ms(0),
        &[DecisionCall { identity: "a", limits: &a }, DecisionCall { identity: "b", limits: &b }],
    );
    let reply = [0, 0, 0, CC_RETRY_MS as i64, 0, 0, 0, CC_RETRY_MS as i64];
    let refused = d(false, 0, 0, Some(CC_RETRY_MS));
    assert_eq!(call.decode(&ints(&reply)), Ok(vec![Ok(vec![refused]), Ok(vec![refused])]));
}

#[test]
#[wasm_bindgen_test]
fn bounds_follow_the_debt_caps_and_stop_at_two_to_the_53() {
    let b = |algorithm, limit, window_ms, burst| {
        Bounds::of(&LimitSpec { algorithm, limit, window_ms, burst }, Op::Charge(1))
    };
    assert_eq!(b(Algorithm::SlidingWindow, 10, 1000, 10).longest_ms, 2000);
    assert_eq!(b(Algorithm::FixedWindow, 10, 1000, 10).longest_ms, 1000);
    assert_eq!(b(Algorithm::SlidingLog, 10, 1000, 10).longest_ms, 1000);
    assert_eq!(b(Algorithm::Gcra, 3, 1000, 2).longest_ms, 1334);
    assert_eq!(b(Algorithm::Gcra, 3, 1000, 2).capacity, 2);
    assert_eq!(b(Algorithm::SlidingWindow, 1, TOP, 1).longest_ms, TOP);
    assert_eq!(b(Algorithm::TokenBucket, 1, 1, TOP).longest_ms, TOP);
}

#[test]
#[wasm_bindgen_test]
fn a_reservation_admitted_says_its_lead_and_mark_and_its_refund_sends_the_mark() {
    // BUCKET: 3 per second, 5 at once: a tolerance of 5,000 units.
    let reserve = [limit(BUCKET, Op::Reserve(2))];
    let call = ScriptCall::new("rl", Instant::from_ms(0), &[DecisionCall { identity: "b", limits: &reserve }]);
    assert_eq!(call.args[6..], ["1", "1", "1", "v", "2", "0", "1", "1"]);
    let born = 1_700_000_000_000;
    let reply = |lead: i64, count: i64| ints(&[1, lead, born, count]);
    let raw = d(true, 3_000, born as u64, Some(41));
    assert_eq!(call.decode(&reply(3_000, 41)), Ok(vec![Ok(vec![raw])]));
    // 3,000 units missing: 2 remain, full in 1,000 ms.
    assert_eq!(Mark::of(&BUCKET, &raw), Some((d(true, 2, 1_000, Some(0)), Mark { born_ms: born as u64, count: 41 })));
    let impossible = Err(StoreError::Malformed("impossible decision values"));
    assert_eq!(call.decode(&reply(5_001, 41)), impossible, "a lead past the tolerance");
    assert_eq!(call.decode(&reply(5_000, 1 << 48)), impossible, "a count of 2^48");
    assert_eq!(call.decode(&reply(5_000, -1)), impossible, "no count");
    assert!(call.decode(&reply(5_000, (1 << 48) - 1)).is_ok());
    // Refused, it answers as a use does, and has no mark.
    let denied = d(false, 1, 1_000, Some(334));
    assert_eq!(call.decode(&ints(&[0, 1, 1_000, 334])), Ok(vec![Ok(vec![denied])]));
    assert_eq!(Mark::of(&BUCKET, &denied), None);
    // Its refund sends the mark where an offset goes.
    let mark = Some(Mark { born_ms: born as u64, count: 41 });
    let refund = [limit(BUCKET, Op::Refund { amount: 1, at: Instant::from_ms(0), mark })];
    let call = ScriptCall::new("rl", Instant::from_ms(0), &[DecisionCall { identity: "b", limits: &refund }]);
    assert_eq!(call.args[6..], ["1", "1", "1", "f", "1", "1700000000000:41", "1", "1"]);
}

/// `a` uses two limits of rule "api" and one of rule "llm"; `b` gives a
/// reservation back (a refund reads no override), both reading overrides.
fn with_overrides() -> ScriptCall {
    let a = [
        limit(MINUTE, Op::Use(1)),
        limit(DAY, Op::Use(1)),
        LimitCall { rule: "llm", spec: BUCKET, op: Op::Use(2), offset_ms: None },
    ];
    let b = [limit(DAY, Op::Refund { amount: 3, at: Instant::from_ms(0), mark: None })];
    ScriptCall::with_overrides(
        "rl",
        Instant::from_ms(60_000),
        &[DecisionCall { identity: "a", limits: &a }, DecisionCall { identity: "b", limits: &b }],
        true,
    )
}

#[test]
#[wasm_bindgen_test]
fn a_decision_reading_overrides_names_one_key_per_rule_first_and_starts_each_rule_in_capitals() {
    let call = with_overrides();
    assert_eq!(
        call.keys,
        [
            "rl:{a}:api:override",
            "rl:{a}:llm:override",
            "rl:{a}:api:sw:60000:1",
            "rl:{a}:api:sw:60000:0",
            "rl:{a}:api:fw:86400000:0",
            "rl:{a}:llm:tb:1000",
            "rl:{b}:api:fw:86400000:0",
        ]
    );
    // a's shape: api's first op in capitals, then llm's; b reads none.
    let args: Vec<&str> = call.args.iter().map(String::as_str).collect();
    let shapes = ["3", "1", "U", "1", "0", "2", "u", "1", "0", "3", "U", "2", "0", "1", "2", "f", "3", "0"];
    assert_eq!(args[args.len() - 4 - shapes.len()..], [&["2"][..], &shapes, &["2", "1", "2"]].concat());
    // The most it may say: a's 12 values and 3 limits; b's 4 values.
    assert_eq!(call.reply_len(), 12 + 3 + 4);
    // Off, the same decisions read nothing.
    let a = [limit(MINUTE, Op::Use(1))];
    let off =
        ScriptCall::with_overrides("rl", Instant::from_ms(0), &[DecisionCall { identity: "a", limits: &a }], false);
    assert_eq!(off, ScriptCall::new("rl", Instant::from_ms(0), &[DecisionCall { identity: "a", limits: &a }]));
}

#[test]
#[wasm_bindgen_test]
fn an_override_state_in_the_first_allowed_brings_each_limits_limit_after_the_values() {
    let call = with_overrides();
    let a = [1, 99, 120_000, 0, 1, 9_999, 86_400_000, 0, 1, 3, 334, 0];
    let b = [1, 0, 0, 0];
    // No override of a: its values as any decision's.
    let got = call.decode(&ints(&[&a[..], &b].concat())).unwrap();
    assert!(got[0].as_ref().unwrap().iter().all(|o| o.overridden.is_none()), "{got:?}");
    // api's minute raised to 150 (149 remaining is possible for it), llm
    // blocked, a reset applied: state 3, the first allowed 1 + 6.
    let mut a_raised = a;
    a_raised[0] = 7;
    a_raised[1] = 149;
    a_raised[8..12].copy_from_slice(&[0, 0, 5_000, 5_000]);
    let got = call.decode(&ints(&[&a_raised[..], &[150, 10_000, 0], &b].concat())).unwrap();
    let a_got = got[0].as_ref().unwrap();
    let over = |limit| Some(Overridden { limit, reset: true });
    assert_eq!(a_got.iter().map(|o| o.overridden).collect::<Vec<_>>(), [over(150), over(10_000), over(0)]);
    assert_eq!((a_got[0].allowed, a_got[0].remaining), (true, 149));
    assert_eq!((a_got[2].allowed, a_got[2].retry_after_ms), (false, Some(5_000)));
    assert_eq!(got[1], Ok(vec![d(true, 0, 0, Some(0))]), "the refund reads no override");
    // State 1 (allowed 1 + 2): no reset.
    let mut one = a_raised;
    one[0] = 3;
    let got = call.decode(&ints(&[&one[..], &[150, 10_000, 0], &b].concat())).unwrap();
    assert_eq!(got[0].as_ref().unwrap()[0].overridden, Some(Overridden { limit: 150, reset: false }));
    let malformed = |what| Err(StoreError::Malformed(what));
    let impossible = malformed("impossible decision values");
    // 149 remaining under the configured 100; a limit where none can be.
    assert_eq!(call.decode(&ints(&[&one[..], &[100, 10_000, 3], &b].concat())), impossible);
    assert_eq!(call.decode(&ints(&[&one[..], &[150, 10_000, -5], &b].concat())), impossible);
    // A block that admits, or with a retry that is not its reset.
    let mut admits = one;
    admits[8] = 1;
    assert_eq!(call.decode(&ints(&[&admits[..], &[150, 10_000, 0], &b].concat())), impossible);
    let mut uneven = one;
    uneven[10] = 4_000;
    assert_eq!(call.decode(&ints(&[&uneven[..], &[150, 10_000, 0], &b].concat())), impossible);
    // An allowed of 4 or 8 says no state (an impossible allowed either way).
    for v in [4, 5, 8] {
        let mut bad = a;
        bad[0] = v;
        assert_eq!(call.decode(&ints(&[&bad[..], &[150, 10_000, 0], &b].concat())), impossible, "{v}");
    }
    // A state without the limits after; a decision reading none with one.
    let short = call.decode(&ints(&[&one[..], &b].concat()));
    assert!(matches!(short, Err(StoreError::Malformed(_))), "{short:?}");
    let wrong = malformed("wrong number of values for the limits asked");
    assert_eq!(call.decode(&ints(&[&one[..], &[150, 10_000, 2]].concat())), wrong, "b's values missing");
    assert_eq!(call.decode(&ints(&[&a[..], &[3, 0, 0, 0]].concat())), impossible, "b reads no override");
    // A decision that failed in Redis says no override.
    let mut failed = ScriptReply::default();
    failed.push_text(WRONGTYPE.into());
    (0..11).for_each(|_| failed.push_int(0));
    b.iter().for_each(|&v| failed.push_int(v));
    assert_eq!(
        call.decode(&failed),
        Ok(vec![Err(StoreError::Redis(WRONGTYPE.into())), Ok(vec![d(true, 0, 0, Some(0))])])
    );
}
