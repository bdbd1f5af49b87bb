//! Section 2b: Redis memory per identity: `used_memory` before and after
//! many identities' state (so the key dictionaries and expiry entries are
//! counted), and `MEMORY USAGE` of one identity's keys. Names are as long as
//! the filter makes them: memory per key depends on them.

use ratelimit::algorithm::Algorithm;
use ratelimit::spec::LimitSpec;
use serde_json::json;

use super::redis_info::{reset, used_memory};
use super::report::{table, Section, Target};
use super::stats::Summary;
use super::store_calls::{identity, now_ms, script_call, script_command};
use crate::redis_server::RedisServer;

/// One state to measure.
struct Case {
    name: String,
    limits: Vec<LimitSpec>,
    /// Calls per identity (a full sliding log takes L).
    calls: u64,
    /// Identities filled.
    identities: u64,
    /// Target in bytes, if any.
    target: Option<u64>,
}

/// What one case costs.
#[derive(Clone, Debug)]
pub struct MemRow {
    /// The case.
    pub name: String,
    /// Identities filled.
    pub identities: u64,
    /// used_memory delta ÷ identities.
    pub per_identity: f64,
    /// MEMORY USAGE of identity 0's keys, summed.
    pub memory_usage: u64,
    /// Keys one identity holds.
    pub keys: usize,
}

fn spec(algorithm: Algorithm, limit: u64, window_ms: u64) -> LimitSpec {
    LimitSpec { algorithm, limit, window_ms, burst: algorithm.default_burst(limit) }
}

fn cases(quick: bool) -> Vec<Case> {
    let n = if quick { 2000 } else { 20_000 };
    let logs = if quick { 200 } else { 2000 };
    let one = |a: Algorithm, target| Case {
        name: format!("{} (limit 100/min)", a.name()),
        limits: vec![spec(a, 100, 60_000)],
        calls: 1,
        identities: n,
        target,
    };
    let mut v = vec![
        one(Algorithm::SlidingWindow, Some(200)),
        one(Algorithm::FixedWindow, None),
        one(Algorithm::TokenBucket, Some(150)),
        one(Algorithm::Gcra, Some(150)),
        Case {
            name: "two limits (sw 100/min + fw 10000/day)".into(),
            limits: vec![spec(Algorithm::SlidingWindow, 100, 60_000), spec(Algorithm::FixedWindow, 10_000, 86_400_000)],
            calls: 1,
            identities: n,
            target: None,
        },
    ];
    for l in [5, 20, 100] {
        v.push(Case {
            name: format!("sliding_log, full log of {l} (limit {l}/min)"),
            limits: vec![spec(Algorithm::SlidingLog, l, 60_000)],
            calls: l,
            identities: logs,
            target: None,
        });
    }
    v
}

/// Fills one case and reads the memory.
fn measure(redis: &RedisServer, sha: &str, case: &Case) -> MemRow {
    let mut conn = redis.connect();
    reset(&mut conn);
    let before = used_memory(&mut conn);
    let now = now_ms();
    // A windowed limit in steady use holds the previous window's counter
    // too: write one call a window earlier so both exist.
    let windowed = case.limits.iter().any(|l| l.algorithm == Algorithm::SlidingWindow);
    let mut pipe = redis::pipe();
    let mut queued = 0;
    for i in 0..case.identities {
        let id = identity(i);
        let mut times = vec![now; case.calls as usize];
        if windowed {
            times.insert(0, now - 60_000);
        }
        for t in times {
            pipe.add_command(script_command(sha, &case.limits, &id, t)).ignore();
            queued += 1;
            if queued == 256 {
                let _: () = pipe.query(&mut conn).unwrap();
                pipe = redis::pipe();
                queued = 0;
            }
        }
    }
    let _: () = pipe.query(&mut conn).unwrap();
    let after = used_memory(&mut conn);
    let mut keys = script_call(&case.limits, &identity(0), now).keys;
    keys.sort();
    keys.dedup();
    let usage: Vec<Option<u64>> = keys
        .iter()
        .map(|k| redis::cmd("MEMORY").arg("USAGE").arg(k).arg("SAMPLES").arg(0).query(&mut conn).unwrap())
        .collect();
    MemRow {
        name: case.name.clone(),
        identities: case.identities,
        per_identity: (after.saturating_sub(before)) as f64 / case.identities as f64,
        memory_usage: usage.iter().flatten().sum(),
        keys: usage.iter().flatten().count(),
    }
}

/// Every case, `rounds` rounds (case after case within a round).
pub fn run(redis: &RedisServer, sha: &str, quick: bool, rounds: usize) -> Section {
    let cases = cases(quick);
    let mut runs: Vec<Vec<MemRow>> = vec![Vec::new(); cases.len()];
    for round in 0..rounds {
        for (c, case) in cases.iter().enumerate() {
            let r = measure(redis, sha, case);
            eprintln!("  memory round {round} {}: {r:?}", case.name);
            runs[c].push(r);
        }
    }
    let mut rows = Vec::new();
    let mut counters = Vec::new();
    let mut targets = Vec::new();
    let mut figures = Vec::new();
    for (case, rs) in cases.iter().zip(&runs) {
        let per = Summary::of(&rs.iter().map(|r| r.per_identity).collect::<Vec<_>>());
        let usage = Summary::of(&rs.iter().map(|r| r.memory_usage as f64).collect::<Vec<_>>());
        let keys = script_call(&case.limits, &identity(0), now_ms()).keys;
        let key_bytes = keys.iter().map(String::len).max().unwrap_or(0);
        if let Some(cap) = case.target {
            targets.push(Target::new(
                &format!("memory per identity, {}", case.limits[0].algorithm.name()),
                &format!("≤ {cap} B"),
                format!("{:.0} B", per.median),
                per.median <= cap as f64,
                format!(
                    "{} key(s) with names of up to {key_bytes} B (`{}`); MEMORY USAGE of the keys alone {:.0} B, the \
                     rest is the key dictionary and the expiry entries",
                    rs[0].keys, keys[0], usage.median
                ),
            ));
        }
        if case.calls == 1 {
            counters.push(per.median);
        }
        figures.push(json!({"name": case.name, "per_identity": per.median, "memory_usage": usage.median}));
        rows.push(vec![
            case.name.clone(),
            case.identities.to_string(),
            rs[0].keys.to_string(),
            per.show(0),
            usage.show(0),
        ]);
    }
    let full = |l: u64| {
        let at = cases.iter().position(|c| c.calls == l && c.calls > 1);
        at.map_or(0.0, |i| Summary::of(&runs[i].iter().map(|r| r.per_identity).collect::<Vec<_>>()).median)
    };
    let body = format!(
        "One state per identity written through the script (sliding_window: both windows' counters, as in steady \
         use; key names as the filter builds them, identity `client-NNNNNN`, domain `bench`, rule `api`), on an \
         empty Redis; \"per identity\" is the `used_memory` delta ÷ identities (includes the key dictionaries and \
         expiry entries), \"MEMORY USAGE\" the sum over one identity's keys (`SAMPLES 0`). {rounds} rounds, case \
         after case. Median (min–max).\n\n{}\n\
         Reading: the counter-based states cost {:.0}–{:.0} B per identity; a sliding log grows with every \
         admitted request ({:.0} B at 5, {:.0} B at 20, {:.0} B at 100 per identity).\nThat is why sliding_log is \
         for small limits, and why it logs admitted requests only.\n\n![memory](BENCHMARKS-memory.png)\n",
        table(&["state", "identities", "keys each", "bytes per identity (used_memory)", "MEMORY USAGE (B)"], &rows),
        counters.iter().copied().fold(f64::MAX, f64::min),
        counters.iter().copied().fold(0.0, f64::max),
        full(5),
        full(20),
        full(100),
    );
    Section { title: "Store memory".into(), body, figures: json!(figures), targets }
}
