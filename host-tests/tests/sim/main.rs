//! A deterministic simulation of the real module (`dist/*.wasm` in the
//! wasmtime host, a real Redis running the real script): one seed decides
//! a schedule of requests on several worker VMs, streams that end at any
//! point (completed, or the client gone before the answer), store replies
//! delayed past the timeout and so reordered, lost, failed or refused,
//! clock steps, and VM reloads. After every step it checks the invariants
//! README's Guarantees name (see `invariants`). A failing seed prints its
//! schedule shrunk to the steps that still violate the same invariant;
//! `SIM_SEED=<n>` replays one seed.
//!
//! `make test` runs fixed seeds and a few fresh ones (printed); `make sim`
//! runs fresh seeds for `SIM_SECONDS` (default 600).

// A test crate: a failed step in a helper is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod invariants;
mod regressions;
mod schedule;
mod world;

use std::time::{Duration, Instant};

use world::Kind;

/// Seeds every `make test` runs besides fresh ones. (Schedules that once
/// violated an invariant are kept whole under `regressions/`.)
const FIXED_SEEDS: [u64; 4] = [1, 2, 3, 0x5EED_0032];
/// Steps of one schedule.
const STEPS: usize = 400;

/// Runs `seed` on both transports (`servers`), with one proxy and with a
/// fleet of two sharing the store; panics with the reproduction on a
/// violation.
fn run_seed(servers: &[world::Servers], seed: u64) -> world::Stats {
    let mut total = world::Stats::default();
    for store in servers {
        for proxies in [1, 2] {
            total.add(&world::run(store, seed, proxies, STEPS));
        }
    }
    total
}

/// A seed from the clock, printed so a failure can be replayed.
fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    (nanos as u64) ^ u64::from(std::process::id()).rotate_left(32)
}

#[test]
fn fixed_and_fresh_seeds_keep_every_invariant() {
    let servers = [world::Servers::start(Kind::Webdis), world::Servers::start(Kind::Redis)];
    if let Ok(seed) = std::env::var("SIM_SEED") {
        let seed = seed.parse().expect("SIM_SEED is a number");
        eprintln!("sim: replaying seed {seed}");
        run_seed(&servers, seed);
        return;
    }
    let started = Instant::now();
    let mut total = world::Stats::default();
    for r in regressions::all() {
        let store = servers.iter().find(|s| s.kind == r.kind).unwrap();
        match world::replay(store, r.seed, r.proxies, &r.steps) {
            Ok(stats) => total.add(&stats),
            Err(v) => panic!("sim: regression {} ({} steps) violated {v}", r.name, r.steps.len()),
        }
    }
    let budget = std::env::var("SIM_SECONDS").ok().and_then(|s| s.parse().ok()).map(Duration::from_secs);
    for seed in FIXED_SEEDS {
        total.add(&run_seed(&servers, seed));
    }
    let fresh = if budget.is_some() { usize::MAX } else { 2 };
    for _ in 0..fresh {
        if budget.is_some_and(|b| started.elapsed() >= b) {
            break;
        }
        let seed = fresh_seed();
        eprintln!("sim: seed {seed}");
        total.add(&run_seed(&servers, seed));
        if budget.is_some() {
            let secs = started.elapsed().as_secs_f64().max(0.001);
            eprintln!(
                "sim: {} schedules, {:.0} requests/s, {:.0} invariant checks/s",
                total.schedules,
                total.requests as f64 / secs,
                total.checks as f64 / secs
            );
        }
    }
    eprintln!(
        "sim: {} schedules, {} requests ({} admitted), {} invariant checks in {:.1} s",
        total.schedules,
        total.requests,
        total.admitted,
        total.checks,
        started.elapsed().as_secs_f64()
    );
}
