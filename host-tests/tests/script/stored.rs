//! What the script finds in Redis: counts it wrote itself are raised in
//! place (INCRBY, keeping the key's real TTL), and anything else under a
//! counter's name (not an integer as the script writes it, another type)
//! never makes a call fail: it reads as the number Lua makes of it, or 0,
//! and is replaced by a count. Every key the script creates or replaces
//! has a TTL; a count someone else wrote without one gets one once the
//! script's raises carry it past a multiple of 8 (TTL_CHECK in driver.lua).

use host_tests::bench::redis_info::command_stat;
use ratelimit::algorithm::Algorithm::{FixedWindow, Gcra, SlidingLog, SlidingWindow, TokenBucket};
use ratelimit::spec::{DecisionCall, Op};
use ratelimit::store::script_call::ScriptCall;

use crate::fixture::{limit, max_ttl, spec, Fixture, T0};
use ratelimit::time::Instant;

/// One decision of `identity` using `spec` once, on the plain test build
/// (real TTLs): the first key of the call, and whether it was allowed or
/// the error the call ended with.
fn try_decide(f: &mut Fixture, identity: &str, spec: ratelimit::spec::LimitSpec) -> (String, Result<bool, String>) {
    let limits = [limit(spec, Op::Use(1))];
    let call = ScriptCall::new("t", Instant::from_ms(T0), &[DecisionCall { identity, limits: &limits }]);
    let sha = f.plain_sha.clone();
    let got = host_tests::script::evalsha(&mut f.conn, &sha, &call, Some(T0));
    (call.keys[0].clone(), got.map(|d| d[0][0].allowed))
}

/// As `try_decide`, for a call that must succeed: (allowed, first key).
fn decide(f: &mut Fixture, identity: &str, spec: ratelimit::spec::LimitSpec) -> (bool, String) {
    let (key, allowed) = try_decide(f, identity, spec);
    (allowed.unwrap(), key)
}

fn value_and_ttl(f: &mut Fixture, key: &str) -> (Option<String>, i64) {
    let value: Option<String> = redis::cmd("GET").arg(key).query(&mut f.conn).unwrap();
    let ttl: i64 = redis::cmd("PTTL").arg(key).query(&mut f.conn).unwrap();
    (value, ttl)
}

#[test]
fn a_count_raised_again_keeps_the_ttl_it_was_created_with() {
    let mut f = Fixture::new();
    for algorithm in [SlidingWindow, FixedWindow] {
        let s = spec(algorithm, 5, 60_000, 5);
        let identity = algorithm.name();
        let (_, key) = decide(&mut f, identity, s);
        let (value, created) = value_and_ttl(&mut f, &key);
        assert_eq!(value.as_deref(), Some("1"), "{key}");
        assert!(created > 0 && created <= max_ttl(&s), "{key}: PTTL {created}");
        for n in 2..=5 {
            assert!(decide(&mut f, identity, s).0, "{key}: use {n} of 5");
        }
        let (value, kept) = value_and_ttl(&mut f, &key);
        assert_eq!(value.as_deref(), Some("5"), "{key}");
        assert!(kept > 0 && kept <= created, "{key}: PTTL {kept} after {created}");
        assert!(!decide(&mut f, identity, s).0, "{key}: the sixth use");
        assert_eq!(value_and_ttl(&mut f, &key).0.as_deref(), Some("5"), "{key}: a denial wrote");
    }
}

#[test]
fn a_counter_key_holding_something_else_is_read_as_lua_reads_it_and_replaced() {
    let s = spec(SlidingWindow, 1000, 60_000, 1000);
    // (stored, the count after one use)
    // ("47": its raise passes 48, a multiple of 8, so its TTL is checked.)
    let cases = [("47", "48"), ("5.5", "6"), ("007", "8"), (" 3", "4"), ("1e2", "101"), ("abc", "1"), ("", "1")];
    for (stored, after) in cases {
        // Written by someone else, with a TTL or without one.
        for px in [Some(600_000), None] {
            let mut f = Fixture::new();
            let key = decide(&mut f, "probe", s).1;
            let mut set = redis::cmd("SET");
            set.arg(&key).arg(stored);
            if let Some(px) = px {
                set.arg("PX").arg(px);
            }
            let _: () = set.query(&mut f.conn).unwrap();
            assert!(decide(&mut f, "probe", s).0, "stored {stored:?}");
            let (value, ttl) = value_and_ttl(&mut f, &key);
            assert_eq!(value.as_deref(), Some(after), "stored {stored:?}");
            let most = px.unwrap_or(max_ttl(&s));
            assert!(ttl > 0 && ttl <= most, "stored {stored:?} with PX {px:?}: PTTL {ttl}");
        }
    }
    // A negative count would report more than the limit remaining: the
    // filter refuses such a reply as a store failure (its rule's policy).
    let mut f = Fixture::new();
    let key = decide(&mut f, "probe", s).1;
    let _: () = redis::cmd("SET").arg(&key).arg("-7").arg("PX").arg(600_000).query(&mut f.conn).unwrap();
    let err = try_decide(&mut f, "probe", s).1.unwrap_err();
    assert_eq!(err, "malformed store reply: impossible decision values");
    // Another type under the name: read as absent, replaced by a new count.
    let mut f = Fixture::new();
    let key = decide(&mut f, "probe", s).1;
    let _: () = redis::cmd("DEL").arg(&key).query(&mut f.conn).unwrap();
    let _: i64 = redis::cmd("ZADD").arg(&key).arg(1).arg("m").query(&mut f.conn).unwrap();
    assert!(decide(&mut f, "probe", s).0);
    let (value, ttl) = value_and_ttl(&mut f, &key);
    assert_eq!(value.as_deref(), Some("1"));
    assert!(ttl > 0 && ttl <= max_ttl(&s), "PTTL {ttl}");
}

/// One MGET reads the batch; a key is written once, when a decision first
/// writes it, and once more at the end if later decisions of the call
/// wrote it again (one INCRBY for all of them).
#[test]
fn a_call_reads_every_counter_once_and_writes_a_key_used_again_once_more() {
    let mut f = Fixture::new();
    let s = spec(SlidingWindow, 100, 60_000, 100);
    let limits = [limit(s, Op::Use(1))];
    // Six requests of one client and two of others, twice.
    let ids = ["hot", "hot", "a", "hot", "hot", "b", "hot", "hot"];
    let batch: Vec<DecisionCall> = ids.iter().map(|identity| DecisionCall { identity, limits: &limits }).collect();
    let call = ScriptCall::new("t", Instant::from_ms(T0), &batch);
    let sha = f.plain_sha.clone();
    // New keys: SET each, then hot's five more uses in one INCRBY. Held:
    // INCRBY each, then hot's five more; one PTTL, for hot's raise from 6
    // to 12 past 8 (a's and b's, 1 to 2, pass no multiple of 8).
    for (round, counts) in [[1, 3, 1, 0], [1, 0, 4, 1]].into_iter().enumerate() {
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut f.conn).unwrap();
        let got = host_tests::script::evalsha(&mut f.conn, &sha, &call, Some(T0)).unwrap();
        assert!(got.iter().all(|d| d[0].allowed));
        let seen = ["mget", "set", "incrby", "pttl"].map(|c| command_stat(&mut f.conn, c).calls);
        assert_eq!(seen, counts, "round {round}: MGET, SET, INCRBY, PTTL");
    }
    let hot: String = redis::cmd("GET").arg(&call.keys[0]).query(&mut f.conn).unwrap();
    assert_eq!(hot, "12");
    let (a, b): (String, String) =
        redis::pipe().cmd("GET").arg(&call.keys[4]).cmd("GET").arg(&call.keys[10]).query(&mut f.conn).unwrap();
    assert_eq!((a.as_str(), b.as_str()), ("2", "2"));
}

/// Every algorithm's key written by someone else without a TTL (a count,
/// a bucket state, a log entry): after the script wrote it, it has one,
/// no longer than the script gives its own keys (a count's raise from 7 to
/// 8 passes a multiple of 8: see the next test).
#[test]
fn a_key_someone_else_wrote_without_a_ttl_leaves_with_one() {
    let mut f = Fixture::new();
    for algorithm in [SlidingWindow, FixedWindow, TokenBucket, Gcra, SlidingLog] {
        let s = spec(algorithm, 10, 60_000, 10);
        let identity = format!("foreign-{}", algorithm.name());
        let key = ScriptCall::new(
            "t",
            Instant::from_ms(T0),
            &[DecisionCall { identity: &identity, limits: &[limit(s, Op::Use(1))] }],
        )
        .keys[0]
            .clone();
        // What the script itself would have written there, without a TTL.
        let _: () = match algorithm {
            SlidingLog => redis::cmd("ZADD").arg(&key).arg(T0 - 1_000).arg("m").query(&mut f.conn).unwrap(),
            TokenBucket | Gcra => redis::cmd("SET").arg(&key).arg(format!("{T0}:0:0")).query(&mut f.conn).unwrap(),
            _ => redis::cmd("SET").arg(&key).arg("7").query(&mut f.conn).unwrap(),
        };
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut f.conn).unwrap();
        assert_eq!(ttl, -1, "{key}");
        assert!(decide(&mut f, &identity, s).0, "{key}");
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut f.conn).unwrap();
        assert!(ttl > 0 && ttl <= max_ttl(&s), "{key}: PTTL {ttl}");
        if matches!(algorithm, SlidingWindow | FixedWindow) {
            let value: String = redis::cmd("GET").arg(&key).query(&mut f.conn).unwrap();
            assert_eq!(value, "8", "{key}: raised in place");
        }
    }
}

/// A count someone else wrote without a TTL is checked, and given the
/// script's TTL, only when a raise carries it past a multiple of 8 (a
/// call's first raise of it, or its raises together when the call raises
/// it again at the end): within 8 units the script adds. A raise that
/// passes none leaves the key as its writer did, and costs no PTTL.
#[test]
fn a_count_someone_else_wrote_without_a_ttl_gets_one_within_8_units() {
    let mut f = Fixture::new();
    // (uses per decision, decisions in the one call, what the key held
    // before, whether the call gives it a TTL); one call per case.
    let cases: [(u64, usize, u64, bool); 7] = [
        (1, 1, 5, false), // 5 -> 6
        (1, 1, 6, false), // 6 -> 7
        (1, 1, 7, true),  // 7 -> 8
        (1, 1, 8, false), // 8 -> 9: past 8 is only the raise that reaches it
        (8, 1, 1, true),  // 1 -> 9: a use of 8 passes one whatever it starts from
        (1, 3, 6, true),  // 6 -> 7 first, 7 -> 9 at the end: together past 8
        (1, 2, 4, false), // 4 -> 5, 5 -> 6 at the end
    ];
    for algorithm in [SlidingWindow, FixedWindow] {
        let s = spec(algorithm, 100, 60_000, 100);
        for (n, (uses, decisions, held, ttl_given)) in cases.into_iter().enumerate() {
            let identity = format!("foreign-{}-{n}", algorithm.name());
            let limits = [limit(s, Op::Use(uses))];
            let batch: Vec<DecisionCall> =
                (0..decisions).map(|_| DecisionCall { identity: &identity, limits: &limits }).collect();
            let call = ScriptCall::new("t", Instant::from_ms(T0), &batch);
            let key = &call.keys[0];
            let _: () = redis::cmd("SET").arg(key).arg(held).query(&mut f.conn).unwrap();
            let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut f.conn).unwrap();
            let sha = f.plain_sha.clone();
            let got = host_tests::script::evalsha(&mut f.conn, &sha, &call, Some(T0)).unwrap();
            assert!(got.iter().all(|d| d[0].allowed), "{key}");
            let checked = command_stat(&mut f.conn, "pttl").calls;
            let (value, ttl) = value_and_ttl(&mut f, key);
            let after = held + uses * decisions as u64;
            assert_eq!(value, Some(after.to_string()), "{key}");
            assert_eq!(checked, u64::from(ttl_given), "{key}: PTTL calls, {held} -> {after}");
            if ttl_given {
                assert!(ttl > 0 && ttl <= max_ttl(&s), "{key}: PTTL {ttl}, {held} -> {after}");
            } else {
                assert_eq!(ttl, -1, "{key}: {held} -> {after}");
            }
        }
    }
}

/// sliding_log's key lives until its newest entry leaves the window: when
/// the store's clock went back, the entries are logged at the newest one's
/// time, so the key's TTL counts from there, not from the clock.
#[test]
fn a_sliding_log_key_lives_until_its_newest_entry_leaves_the_window() {
    let mut f = Fixture::new();
    let s = spec(SlidingLog, 5, 60_000, 5);
    let sha = f.plain_sha.clone();
    let at = |f: &mut Fixture, now: u64| {
        let call = Fixture::call("back", now, &[s], 1);
        host_tests::script::evalsha(&mut f.conn, &sha, &call, Some(now)).unwrap();
        call.keys[0].clone()
    };
    // (Real TTLs: the bounds leave 30 s for a slow machine between the
    // call and the PTTL.)
    let key = at(&mut f, T0 + 30_000);
    let first: i64 = redis::cmd("PTTL").arg(&key).query(&mut f.conn).unwrap();
    assert!(first > 30_000 && first <= 60_000, "PTTL {first}");
    // The clock 30 s behind the newest entry: logged at the newest's time.
    at(&mut f, T0);
    let scores: Vec<(String, u64)> =
        redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1).arg("WITHSCORES").query(&mut f.conn).unwrap();
    assert_eq!(scores.iter().map(|(_, t)| *t).collect::<Vec<_>>(), [T0 + 30_000, T0 + 30_000]);
    let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut f.conn).unwrap();
    assert!(ttl > 60_000 && ttl <= 90_000, "PTTL {ttl}: the newest entry counts until 90 s from this clock");
}
