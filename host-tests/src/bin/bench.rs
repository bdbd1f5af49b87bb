//! `make bench`: measures what the filter costs the proxy and the store, what
//! batching saves them, what token streams cost, how much the deny cache
//! spares the store under abuse, and how accurate the sliding window is;
//! prints every figure as it goes, writes the figures' data to
//! `<dir>/figures.json` for `host-tests/bench-plot.py`, and rewrites
//! docs/BENCHMARKS.md (keeping its `## Soak` and `## Single sittings`
//! sections).
//!
//! `bench <dir>`. BENCH_QUICK=1: seconds instead of minutes (development).
//! BENCH_ONLY=proxy,nginx,module,tokens,reservation,store,batches,instructions,memory,abuse,accuracy:
//! only those parts, and the report goes to `<dir>/BENCHMARKS.md` instead of
//! the repository's. BENCH_CASES=<parts of case labels> (with BENCH_ONLY=proxy):
//! only those cases of the proxy sitting, BENCH_ROUNDS of them (default 5),
//! their medians printed and nothing written (A/B runs while developing).
//! BENCH_SCRIPT=<file> (with BENCH_ONLY=batches or instructions): that
//! decision script in place of the built one (A/B runs of a change to lua/;
//! instructions, counted by callgrind, repeat to within 1%). BENCH_ONLY=module:
//! the module's wasm instructions and hostcalls per request (wasmtime host),
//! exact from run to run. BENCH_ACCESS_LOG=1 (with BENCH_ONLY=proxy): the
//! proxy sitting keeps envoy.yaml's JSON access log, formatted to
//! /dev/null (left out otherwise: the figures measure the filter).

// A driver: any failure (a server that does not start, a tool that is
// missing) ends the run with its message, which is the right outcome.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use host_tests::bench::machine::{compilers, Machine};
use host_tests::bench::report::{document, kept_sections, table, targets_table, Section, Target};
use host_tests::bench::{
    abuse, accuracy, batching, module_work, nginx_cost, proxy_cost, proxy_sitting, reservation_cost,
    script_instructions, store_batches, store_cost, store_memory, token_streams,
};
use host_tests::paths::{root, BENCHMARKS};
use host_tests::redis_server::RedisServer;

/// The largest module the targets allow.
const MODULE_CAP: u64 = 512 * 1024;

fn main() {
    let started = Instant::now();
    let dir = PathBuf::from(std::env::args().nth(1).expect("usage: bench <dir for figures.json>"));
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let only = std::env::var("BENCH_ONLY").ok();
    let wanted = |part: &str| only.as_deref().is_none_or(|o| o.split(',').any(|p| p.trim() == part));
    let machine = Machine::read();
    println!("{}", table(&["", ""], &machine.rows.iter().map(|(k, v)| vec![k.clone(), v.clone()]).collect::<Vec<_>>()));

    let secs = |quick_s: f64, full_s: f64| Duration::from_secs_f64(if quick { quick_s } else { full_s });
    let mut sections: Vec<Section> = Vec::new();
    // Other people's builds, checked after each part: the run is quiet only
    // if none ever shows up.
    let mut busy_checks: Vec<usize> = Vec::new();
    let mut done = |s: Section| {
        println!("## {}\n\n{}", s.title, s.body);
        sections.push(s);
        busy_checks.push(compilers());
    };
    // Full length: about 5 min for the proxy sitting, 1.5 for token streams,
    // 2 for the store; wrk runs whole seconds.
    let rounds = std::env::var("BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(if quick { 2 } else { 5 });
    if wanted("proxy") {
        let sitting = proxy_sitting::run(rounds, secs(1.0, 4.0), secs(1.0, 3.0), secs(1.0, 1.0));
        if std::env::var_os("BENCH_CASES").is_some() {
            proxy_sitting::print_medians(&sitting);
            return;
        }
        done(proxy_cost::section(&sitting));
        done(batching::section(&sitting));
    }
    if wanted("nginx") {
        done(nginx_cost::run(rounds, secs(1.0, 4.0)));
    }
    if wanted("module") {
        done(module_work::run());
    }
    if wanted("tokens") {
        let streams = if quick { 200 } else { token_streams::STREAMS };
        done(token_streams::run(rounds, secs(1.0, 4.0), secs(1.0, 1.0), streams));
    }
    if wanted("reservation") {
        done(reservation_cost::run(rounds, secs(1.0, 4.0), secs(1.0, 1.0)));
    }
    if wanted("store") || wanted("batches") || wanted("memory") {
        let redis = RedisServer::start();
        if wanted("store") {
            done(store_cost::run(&redis, 3, secs(0.3, 1.5)));
        }
        if wanted("batches") {
            done(store_batches::run(&redis, 5, secs(0.3, 1.5)));
        }
        if wanted("memory") {
            let sha = host_tests::script::load(&mut redis.connect(), ratelimit::script::SCRIPT);
            done(store_memory::run(&redis, &sha, quick, 3));
        }
    }
    if wanted("instructions") {
        // Its own servers, under callgrind.
        done(script_instructions::run());
    }
    if wanted("abuse") {
        done(abuse::run(3));
    }
    if wanted("accuracy") {
        done(accuracy::run(quick));
    }

    let mut targets: Vec<Target> = sections.iter().flat_map(|s| s.targets.clone()).collect();
    targets.push(Target::new(
        "module size",
        "`dist/ratelimit.wasm` ≤ 512 KiB (524288 B): reported, not budgeted",
        format!("{} B", machine.module_bytes),
        machine.module_bytes <= MODULE_CAP,
        String::new(),
    ));
    let met = targets.iter().filter(|t| t.met).count();
    let targets_text = format!(
        "{met} of {} targets met. Ratios are medians of per-round ratios; \"why\" gives the measured cause where one \
         was measured.\n\n{}",
        targets.len(),
        targets_table(&targets)
    );
    println!("## Targets\n\n{targets_text}");

    let elapsed = std::env::var("BENCH_T0")
        .ok()
        .and_then(|t| t.parse::<u64>().ok())
        .and_then(|t0| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok().map(|n| n.as_secs() - t0)
        })
        .map_or(String::new(), |s| format!(" — {s} s from `make bench` to this report, build included"));
    let mut rows = machine.rows.clone();
    let busy = busy_checks.iter().filter(|&&n| n > 0).count();
    rows.push((
        "during the run".into(),
        if busy == 0 {
            format!("no cargo/rustc process seen at any of the {} checks (after each part)", busy_checks.len())
        } else {
            format!("cargo/rustc processes seen at {busy} of {} checks (after each part): NOT quiet", busy_checks.len())
        },
    ));
    let command = if quick { "BENCH_QUICK=1 make bench" } else { "make bench" };
    rows.push((
        "command".into(),
        format!("`{command}`{elapsed} (the measurements alone: {:.0} s)", started.elapsed().as_secs_f64()),
    ));
    let facts = table(&["", ""], &rows.iter().map(|(k, v)| vec![k.clone(), v.clone()]).collect::<Vec<_>>());
    println!("{facts}");
    let header = format!(
        "# Benchmarks\n\nWritten by `make bench` (`host-tests/src/bin/bench.rs`; plots by `host-tests/bench-plot.py`). \
         Every number here was printed by the run described below; rerun it to replace them. Loopback only, one \
         machine: the proxy, the store, the upstream and the load generator share its cores.\n\n{}\n## Targets\n\n{}",
        facts, targets_text
    );
    std::fs::create_dir_all(&dir).unwrap();
    let figures: serde_json::Map<String, serde_json::Value> =
        sections.iter().map(|s| (s.title.clone(), s.figures.clone())).collect();
    std::fs::write(dir.join("figures.json"), serde_json::Value::Object(figures).to_string()).unwrap();
    let report = if only.is_some() { dir.join("BENCHMARKS.md") } else { root().join(BENCHMARKS) };
    let existing = std::fs::read_to_string(root().join(BENCHMARKS)).unwrap_or_default();
    let kept = kept_sections(&existing);
    std::fs::write(&report, document(&header, &sections, kept.as_deref())).unwrap();
    println!(
        "Wrote {} and {}/figures.json in {:.0} s.",
        report.display(),
        dir.display(),
        started.elapsed().as_secs_f64()
    );
}
