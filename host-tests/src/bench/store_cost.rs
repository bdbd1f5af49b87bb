//! Section 2a: what one decision costs Redis, driven directly (no Envoy),
//! against a plain INCR measured in the same sitting. Runs alternate kind
//! by kind, round by round; each starts from an empty server.

use std::time::{Duration, Instant};

use serde_json::json;

use super::redis_info::{command_stat, main_thread_cpu, reset};
use super::report::{table, Section, Target};
use super::stats::Summary;
use super::store_calls::{allowed, now_ms, Kind};
use crate::redis_server::RedisServer;
use crate::script::load;

/// Client connections, each making calls one after another.
pub const CONNECTIONS: u64 = 4;
/// Commands per pipeline in the pipelined mode.
pub const DEPTH: usize = 16;
/// Identities called round robin: every call stays on the allow path.
pub const IDENTITIES: u64 = 10_000;
/// The limit per minute: far above what one identity gets in a run.
pub const LIMIT: u64 = 1000;

/// One run's readings.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    /// Calls per second.
    pub rate: f64,
    /// Redis main-thread CPU per call, µs.
    pub cpu_us: f64,
    /// Execution time per call inside Redis (INFO commandstats), µs.
    pub usec_per_call: f64,
    /// Calls that were not allowed (should be 0).
    pub denied: u64,
}

/// Calls `kind` for `duration` from `CONNECTIONS` clients.
pub fn measure(redis: &RedisServer, sha: &str, kind: &Kind, pipelined: bool, duration: Duration) -> Run {
    let mut admin = redis.connect();
    reset(&mut admin);
    let cpu0 = main_thread_cpu(&mut admin);
    let start = Instant::now();
    let denied: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CONNECTIONS)
            .map(|t| s.spawn(move || client(redis, sha, kind, pipelined, t, start + duration)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = main_thread_cpu(&mut admin) - cpu0;
    let stat = command_stat(&mut admin, kind.command_name());
    Run {
        rate: stat.calls as f64 / elapsed,
        cpu_us: cpu * 1e6 / stat.calls as f64,
        usec_per_call: stat.usec_per_call,
        denied,
    }
}

/// One connection calling until `deadline`; returns its denials.
fn client(redis: &RedisServer, sha: &str, kind: &Kind, pipelined: bool, t: u64, deadline: Instant) -> u64 {
    let mut conn = redis.connect();
    let (mut i, mut denied) = (0u64, 0u64);
    // Consecutive calls of all connections take consecutive identities.
    let n = kind.decisions();
    let mut next = || {
        i += 1;
        kind.command(sha, LIMIT, ((i * CONNECTIONS + t) * n) % IDENTITIES, now_ms())
    };
    while Instant::now() < deadline {
        let replies: Vec<redis::Value> = if pipelined {
            let mut pipe = redis::pipe();
            for _ in 0..DEPTH {
                pipe.add_command(next());
            }
            pipe.query(&mut conn).unwrap()
        } else {
            vec![next().query(&mut conn).unwrap()]
        };
        denied += replies.iter().filter(|r| !allowed(r)).count() as u64;
    }
    denied
}

/// All kinds, both modes, `rounds` alternating rounds.
pub fn run(redis: &RedisServer, rounds: usize, duration: Duration) -> Section {
    let kinds = Kind::all();
    let shas: Vec<String> = kinds
        .iter()
        .map(|k| if k.script().is_empty() { String::new() } else { load(&mut redis.connect(), k.script()) })
        .collect();
    // runs[mode][kind] = one Run per round
    let mut runs = vec![vec![Vec::new(); kinds.len()]; 2];
    for round in 0..rounds {
        for (m, pipelined) in [false, true].into_iter().enumerate() {
            for (k, kind) in kinds.iter().enumerate() {
                let r = measure(redis, &shas[k], kind, pipelined, duration);
                eprintln!("  store round {round} {} pipelined={pipelined}: {r:?}", kind.name());
                runs[m][k].push(r);
            }
        }
    }
    let mut body = format!(
        "Redis {} driven directly (no Envoy): {CONNECTIONS} connections, each calling one after another \
         (\"sequential\") or in pipelines of {DEPTH}, for {:.1} s per run; {rounds} rounds, every kind in turn \
         within a round. Calls are built by the filter's own `ScriptCall` (limit {LIMIT}/min, {IDENTITIES} \
         identities round robin, all allowed), the server emptied before each run. CPU: `used_cpu_user_main_thread + \
         used_cpu_sys_main_thread` delta ÷ calls (includes reading and answering the command); script time: \
         `cmdstat_evalsha usec_per_call`. Ratios are taken to the INCR run of the same round. Median (min–max).\n\n",
        "(one server, loopback)",
        duration.as_secs_f64()
    );
    let mut targets = Vec::new();
    let mut figures = Vec::new();
    for (m, mode) in ["sequential", "pipelined"].into_iter().enumerate() {
        let base: Vec<f64> = runs[m][0].iter().map(|r| r.cpu_us).collect();
        let mut rows = Vec::new();
        for (k, kind) in kinds.iter().enumerate() {
            let rs = &runs[m][k];
            let col = |f: fn(&Run) -> f64| rs.iter().map(f).collect::<Vec<f64>>();
            let (rate, cpu, usec) = (
                Summary::of(&col(|r| r.rate)),
                Summary::of(&col(|r| r.cpu_us)),
                Summary::of(&col(|r| r.usec_per_call)),
            );
            let ratio = Summary::ratio(&col(|r| r.cpu_us), &base);
            let denied: u64 = rs.iter().map(|r| r.denied).sum();
            rows.push(vec![kind.name(), rate.show(0), cpu.show(2), ratio.show(2), usec.show(2), denied.to_string()]);
            figures.push(json!({"mode": mode, "kind": kind.name(), "rate": rate.to_json(), "cpu_us": cpu.to_json(),
                "ratio": ratio.to_json(), "usec_per_call": usec.to_json()}));
            if m == 0 && *kind != Kind::Incr && !kind.breakdown() {
                let (cap, script_cap) = if *kind == Kind::TwoLimits { (1.9, 7.0) } else { (1.6, 5.0) };
                targets.push(Target::new(
                    &format!("Redis CPU per decision, {}", kind.name()),
                    &format!("≤ {cap}× INCR"),
                    format!("{:.2}×", ratio.median),
                    ratio.median <= cap,
                    if ratio.median <= cap {
                        String::new()
                    } else {
                        let incr_cpu = Summary::of(&base).median;
                        let incr_usec = usec_median(&runs[m][0]);
                        format!(
                            "the script runs {:.2} µs inside Redis where INCR runs {incr_usec:.2} µs; outside execution \
                             (reading, answering) {:.2} µs vs {:.2} µs",
                            usec.median,
                            cpu.median - usec.median,
                            incr_cpu - incr_usec
                        )
                    },
                ));
                targets.push(Target::new(
                    &format!("script time, {}", kind.name()),
                    &format!("≤ {script_cap} µs"),
                    format!("{:.2} µs", usec.median),
                    usec.median <= script_cap,
                    String::new(),
                ));
            }
        }
        let cpu_of = |k: usize| Summary::of(&runs[m][k].iter().map(|r| r.cpu_us).collect::<Vec<_>>()).median;
        let usec_of = |k: usize| usec_median(&runs[m][k]);
        let decisions: Vec<usize> = (1..kinds.len()).filter(|&k| !kinds[k].breakdown()).collect();
        let worst = decisions.iter().copied().max_by(|&a, &b| cpu_of(a).total_cmp(&cpu_of(b))).unwrap_or(1);
        let min_of = |f: &dyn Fn(usize) -> f64| decisions.iter().map(|&k| f(k)).fold(f64::MAX, f64::min);
        let max_of = |f: &dyn Fn(usize) -> f64| decisions.iter().map(|&k| f(k)).fold(0.0, f64::max);
        let find = |kind: Kind| kinds.iter().position(|k| *k == kind).unwrap_or(0);
        let sw = find(Kind::One(ratelimit::algorithm::Algorithm::SlidingWindow));
        let (empty, bare) = (find(Kind::EmptyScript), find(Kind::BareWindow));
        body.push_str(&format!(
            "**{mode}**\n\n{}\nReading: {mode}, Redis spends {:.2} µs of main-thread CPU on an INCR and {:.2}–{:.2} µs on a \
             decision ({} the most), of which the script runs {:.1}–{:.1} µs; of an INCR's {:.2} µs only {:.2} µs is \
             execution, the rest is reading the command and writing the answer.\nBreakdown of sliding_window's {:.2} µs \
             script time: {:.2} µs for an EVALSHA that only returns, {:.2} µs for its three Redis commands alone in Lua; the \
             remaining {:.2} µs is the script's own Lua, which Redis runs in full on every call (building the algorithm \
             table and functions, validating every argument, dispatching).\n\n",
            table(&["call", "calls/s", "Redis CPU µs/call", "× INCR", "script µs/call", "denied"], &rows),
            cpu_of(0),
            min_of(&cpu_of),
            cpu_of(worst),
            kinds[worst].name(),
            min_of(&usec_of),
            max_of(&usec_of),
            cpu_of(0),
            usec_of(0),
            usec_of(sw),
            usec_of(empty),
            usec_of(bare),
            usec_of(sw) - usec_of(bare),
        ));
    }
    body.push_str("![store cost](BENCHMARKS-store.png)\n");
    Section { title: "Store cost".into(), body, figures: json!(figures), targets }
}

fn usec_median(rs: &[Run]) -> f64 {
    Summary::of(&rs.iter().map(|r| r.usec_per_call).collect::<Vec<_>>()).median
}
