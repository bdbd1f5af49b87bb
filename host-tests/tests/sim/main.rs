//! A deterministic simulation of the real module (`dist/*.wasm` in the
//! wasmtime host, a real Redis running the real script on a clock the
//! simulation moves): one seed decides a schedule of requests on several
//! worker VMs of one or two proxies, streams that end at any point
//! (completed with a usage header or body, or the client gone before the
//! answer or mid-body), store replies delayed past the timeout and so
//! reordered, lost, failed or refused, the clock moving past window ends
//! and refills, the proxies' and the store's clocks stepping back, VM
//! reloads and flushes. After every step it checks the invariants
//! README's Guarantees name (see `checks`), and compares every decision
//! the store's reply gave with the reference model fed the same calls at
//! the same instants. A failing seed prints its schedule shrunk to the
//! steps that still violate the same invariant.
//!
//! `make test` replays the saved regressions, fixed seeds and two fresh
//! ones (printed); `make sim` runs fresh seeds for `SIM_SECONDS` (default
//! 1800). `SIM_SEED=<n>` replaces the fresh seeds of either by that one;
//! `SIM_SEED=<n> cargo test -p host-tests --test sim -- --ignored replay`
//! replays it alone.

// A test crate: a failed step in a helper is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod bodies;
mod bounds;
mod checks;
mod ledger;
mod regressions;
mod rules;
mod schedule;
mod slots;
mod streams;
mod world;

use std::time::{Duration, Instant};

use world::{Found, Heed, Kind, Servers, Stats};

/// Seeds every `make test` runs besides fresh ones. (Schedules that once
/// violated an invariant are kept whole under `regressions/`.)
const FIXED_SEEDS: [u64; 4] = [1, 2, 3, 0x5EED_0032];
/// Steps of one schedule.
const STEPS: usize = 400;

/// Runs `seed` on both transports (`servers`), with one proxy and with a
/// fleet of two sharing the store; panics with the reproduction on a
/// violation, or (`found`: `SIM_KEEP_GOING`) notes the first of each
/// invariant and goes on, past the invariants found before too.
/// `SIM_HUNT=<text>`: only violations saying it count; `SIM_SKIP=<text>`:
/// not those saying this.
fn run_seed(servers: &[Servers], seed: u64, mut found: Option<&mut Vec<Found>>, started: Instant) -> Stats {
    let mut total = Stats::default();
    for store in servers {
        for proxies in [1, 2] {
            let known: Vec<String> = found.iter().flat_map(|f| f.iter().map(|f| f.invariant.clone())).collect();
            let env = |name: &str| std::env::var(name).unwrap_or_default();
            let heed = Heed { known: known.clone(), hunt: env("SIM_HUNT"), skip: env("SIM_SKIP") };
            match (world::run(store, seed, proxies, STEPS, &heed), found.as_deref_mut()) {
                (Ok(stats), _) => total.add(&stats),
                (Err(f), None) => panic!("{}", f.report),
                (Err(f), Some(found)) => {
                    eprintln!("{}", f.report);
                    let at = started.elapsed().saturating_sub(f.shrinking);
                    eprintln!("sim: {} violated, found at {:.0} s of the run", f.invariant, at.as_secs_f64());
                    if !known.contains(&f.invariant) {
                        found.push(f);
                    }
                }
            }
        }
    }
    total
}

/// A seed from the clock, printed so a failure can be replayed.
fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    (nanos as u64) ^ u64::from(std::process::id()).rotate_left(32)
}

/// `SIM_SEED`, if set.
fn sim_seed() -> Option<u64> {
    std::env::var("SIM_SEED").ok().map(|s| s.parse().expect("SIM_SEED is a number"))
}

fn servers() -> [Servers; 2] {
    [Servers::start(Kind::Webdis), Servers::start(Kind::Redis)]
}

/// Prints what a run covered: per second, and each invariant's checks.
fn report(total: &Stats, started: Instant) {
    let secs = started.elapsed().as_secs_f64().max(0.001);
    eprintln!(
        "sim: {} schedules, {} requests ({} admitted), {} invariant checks in {secs:.1} s: {:.2} schedules/s, {:.0} requests/s, {:.0} checks/s",
        total.schedules,
        total.requests,
        total.admitted,
        total.checks.total(),
        total.schedules as f64 / secs,
        total.requests as f64 / secs,
        total.checks.total() as f64 / secs
    );
    for name in checks::NAMES {
        eprintln!("sim:   {name:<28} {:>10}", total.checks.of(name));
    }
    for (_, name) in checks::AGREES_ROLLED {
        eprintln!("sim:   {name:<48} {:>10}", total.checks.of(name));
    }
}

#[test]
fn fixed_and_fresh_seeds_keep_every_invariant() {
    let servers = servers();
    let started = Instant::now();
    let mut total = Stats::default();
    // SIM_FRESH_ONLY=1: fresh seeds alone (against an older build, where
    // the regressions and fixed seeds would fail first by design).
    let fresh_only = std::env::var_os("SIM_FRESH_ONLY").is_some();
    for r in regressions::all().into_iter().filter(|_| !fresh_only) {
        let store = servers.iter().find(|s| s.kind == r.schedule.kind).unwrap();
        match world::replay(store, &r.schedule) {
            Ok(stats) => total.add(&stats),
            Err(v) => panic!("sim: regression {} ({} steps) violated {v}", r.name, r.schedule.steps.len()),
        }
    }
    // SIM_KEEP_GOING=1: every invariant violated, the first schedule of
    // each shrunk, instead of stopping at the first.
    let mut found = std::env::var_os("SIM_KEEP_GOING").map(|_| Vec::new());
    for seed in FIXED_SEEDS.into_iter().filter(|_| !fresh_only) {
        total.add(&run_seed(&servers, seed, found.as_mut(), started));
    }
    let budget = std::env::var("SIM_SECONDS").ok().and_then(|s| s.parse().ok()).map(Duration::from_secs);
    if let Some(seed) = sim_seed() {
        eprintln!("sim: seed {seed} (SIM_SEED)");
        total.add(&run_seed(&servers, seed, found.as_mut(), started));
    } else {
        let fresh = if budget.is_some() { usize::MAX } else { 2 };
        let mut reported = Instant::now();
        for _ in 0..fresh {
            if budget.is_some_and(|b| started.elapsed() >= b) {
                break;
            }
            let seed = fresh_seed();
            eprintln!("sim: seed {seed} at {:.0} s", started.elapsed().as_secs_f64());
            total.add(&run_seed(&servers, seed, found.as_mut(), started));
            if budget.is_some() && reported.elapsed() >= Duration::from_secs(60) {
                report(&total, started);
                reported = Instant::now();
            }
        }
    }
    report(&total, started);
    if let Some(found) = found.filter(|f| !f.is_empty()) {
        let names: Vec<&str> = found.iter().map(|f| f.invariant.as_str()).collect();
        panic!("sim: violated {names:?}; each first schedule is above");
    }
    // A run that checked nothing proves nothing: every invariant was checked.
    assert!(total.admitted > 0, "sim: no request was admitted");
    let breakdown = checks::AGREES_ROLLED.into_iter().map(|(_, n)| n);
    let unchecked: Vec<&str> = checks::NAMES.into_iter().chain(breakdown).filter(|n| total.checks.of(n) == 0).collect();
    assert!(unchecked.is_empty(), "sim: never checked: {unchecked:?}");
}

/// `SIM_SEED=<n> cargo test -p host-tests --test sim -- --ignored replay`:
/// that seed alone; `SIM_FILE=<file>` instead: that saved schedule
/// (`SIM_TRACE=1` prints every step).
#[test]
#[ignore = "a tool: replays SIM_SEED or SIM_FILE"]
fn replay() {
    let servers = servers();
    let started = Instant::now();
    if let Some(file) = std::env::var_os("SIM_FILE") {
        let r = regressions::read(std::path::Path::new(&file));
        let store = servers.iter().find(|s| s.kind == r.schedule.kind).unwrap();
        let stats = world::replay(store, &r.schedule).unwrap_or_else(|v| panic!("sim: {} violated {v}", r.name));
        report(&stats, started);
        return;
    }
    let seed = sim_seed().expect("set SIM_SEED or SIM_FILE");
    let mut found = std::env::var_os("SIM_KEEP_GOING").map(|_| Vec::new());
    let total = run_seed(&servers, seed, found.as_mut(), started);
    report(&total, started);
    if let Some(found) = found.filter(|f| !f.is_empty()) {
        let names: Vec<&str> = found.iter().map(|f| f.invariant.as_str()).collect();
        panic!("sim: violated {names:?}; each first schedule is above");
    }
}
