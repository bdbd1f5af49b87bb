//! The proxy sitting: one Envoy (`--concurrency 1`) per variant side by
//! side, in front of one upstream and one store, and the cases loaded on
//! them by wrk in a fixed order, round after round. Each run reads Envoy's
//! CPU time from /proc (the store, the upstream and wrk share this
//! machine's cores, so requests per second say as much about them as about
//! the proxy) and the module's own counters of store calls and decisions.

use std::path::PathBuf;
use std::time::Duration;

use super::envoy_variants::{authz_server_config, Batching, Variant};
use super::proc_cpu::cpu_seconds;
use super::stats::Summary;
use super::wrk::{self, api_key_script, zipf_script, WrkRun};
use crate::backend::Backend;
use crate::envoy::{Envoy, EnvoyTemplate};
use crate::paths::dist;
use crate::process::{free_port, TempDir};
use crate::redis_server::RedisServer;
use crate::stack::command_calls;
use crate::webdis::Webdis;

/// wrk connections of the throughput cases.
pub const CONNECTIONS: u32 = 32;
/// Identities of the many-identity cases.
pub const MANY: u32 = 1000;
/// The skewed case: `x-api-key` drawn from a Zipf(1.1) distribution over
/// 10,000 identities (this value stands for it in `Case::identities`).
pub const ZIPF: u32 = 10_001;

/// One case: a variant's Envoy loaded with `x-api-key` over `identities`
/// on `connections` connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Case {
    /// Whose Envoy.
    pub variant: Variant,
    /// Distinct `x-api-key` values, round robin.
    pub identities: u32,
    /// wrk connections.
    pub connections: u32,
}

impl Case {
    /// The name in tables.
    pub fn name(&self) -> String {
        match self.variant {
            Variant::Allowed(_) | Variant::Leased | Variant::Overrides => {
                let who = if self.identities == 1 {
                    "1 identity".to_string()
                } else if self.identities == ZIPF {
                    "Zipf(1.1) over 10,000 identities".to_string()
                } else {
                    format!("{} identities", self.identities)
                };
                format!("{}, {who}", self.variant.name())
            }
            v => v.name(),
        }
    }
}

/// Every case in the order of each round: the throughput cases at
/// `CONNECTIONS`, then the latency cases at 1 connection.
pub fn cases() -> Vec<Case> {
    let at = |variant, identities, connections| Case { variant, identities, connections };
    let mut v: Vec<Case> = [Variant::NoFilter, Variant::LocalRateLimit, Variant::ExtAuthz, Variant::NoRuleMatched]
        .map(|variant| at(variant, 1, CONNECTIONS))
        .to_vec();
    // Overrides read right after the same case without: the pair compared.
    v.push(at(Variant::Allowed(Batching::On), 1, CONNECTIONS));
    v.push(at(Variant::Overrides, 1, CONNECTIONS));
    for b in [Batching::Small, Batching::Off] {
        v.push(at(Variant::Allowed(b), 1, CONNECTIONS));
    }
    for b in [Batching::On, Batching::Off] {
        v.push(at(Variant::Allowed(b), MANY, CONNECTIONS));
    }
    v.push(at(Variant::Leased, 1, CONNECTIONS));
    v.push(at(Variant::Leased, MANY, CONNECTIONS));
    v.push(at(Variant::Allowed(Batching::On), ZIPF, CONNECTIONS));
    v.push(at(Variant::Leased, ZIPF, CONNECTIONS));
    v.push(at(Variant::DenyCacheHit, 1, CONNECTIONS));
    v.push(at(Variant::Fallback, 1, CONNECTIONS));
    // Each pair a target compares runs back to back (leases against no
    // rule matched, batching on against off): the machine drifts between
    // runs more than the ratios differ.
    for variant in [
        Variant::NoFilter,
        Variant::NoRuleMatched,
        Variant::Leased,
        Variant::Allowed(Batching::On),
        Variant::Allowed(Batching::Off),
    ] {
        v.push(at(variant, 1, 1));
    }
    v
}

/// The cases whose label (`name (N conn)`) contains one of BENCH_CASES's
/// `;`-separated parts; all without it. A development aid for A/B runs
/// of a few cases: the report needs every case.
pub fn selected(all: Vec<Case>) -> Vec<Case> {
    let Ok(wanted) = std::env::var("BENCH_CASES") else { return all };
    all.into_iter().filter(|c| wanted.split(';').any(|w| label(c).contains(w.trim()))).collect()
}

/// A case's label in progress lines.
pub fn label(case: &Case) -> String {
    format!("{} ({} conn)", case.name(), case.connections)
}

/// Per selected case: Envoy's CPU per request and p50 (median, min–max
/// over the rounds), each as a ratio run by run to the first selected case
/// at the same connections (select the baseline first), and store calls.
pub fn print_medians(s: &Sitting) {
    let col = |i: usize, f: fn(&Run) -> f64| s.runs[i].iter().map(f).collect::<Vec<f64>>();
    for (i, case) in s.cases.iter().enumerate() {
        let base = s.cases.iter().position(|c| c.connections == case.connections).unwrap_or(i);
        let (cpu, p50) = (|r: &Run| r.envoy_us, |r: &Run| r.wrk.p50_us);
        println!(
            "{:<60} cpu {} µs ({}×)  p50 {} µs ({}×)  calls/req {}",
            label(case),
            Summary::of(&col(i, cpu)).show(1),
            Summary::ratio(&col(i, cpu), &col(base, cpu)).show(3),
            Summary::of(&col(i, p50)).show(0),
            Summary::ratio(&col(i, p50), &col(base, p50)).show(3),
            Summary::of(&col(i, |r| r.store_calls)).show(4),
        );
    }
}

/// One run's readings.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    /// What wrk saw.
    pub wrk: WrkRun,
    /// Envoy's CPU per request, µs.
    pub envoy_us: f64,
    /// webdis + Redis CPU per request, µs.
    pub store_us: f64,
    /// The authorization server's CPU per request, µs (the callee of ext_authz).
    pub callee_us: f64,
    /// Decision-script calls Redis ran per request.
    pub store_calls: f64,
    /// Decisions per store call, from the module's counters (NaN: no call).
    pub decisions_per_call: f64,
}

/// Envoy's own counters, showing each variant did what its name says.
#[derive(Clone, Copy, Debug, Default)]
pub struct Checks {
    /// Requests the store-down variant admitted through its fallback.
    pub fallback_allowed: u64,
    /// Store errors of the allowed variants.
    pub allowed_errors: u64,
    /// local_ratelimit's admitted and limited requests.
    pub native_ok: u64,
    /// local_ratelimit's limited requests.
    pub native_limited: u64,
    /// ext_authz's admitted requests.
    pub authz_ok: u64,
}

/// Everything the sitting measured.
pub struct Sitting {
    /// The cases, in round order.
    pub cases: Vec<Case>,
    /// `runs[case][round]`.
    pub runs: Vec<Vec<Run>>,
    /// The counters after the last round.
    pub checks: Checks,
    /// Rounds run.
    pub rounds: usize,
    /// Run length at `CONNECTIONS`.
    pub long: Duration,
    /// Run length at 1 connection.
    pub short: Duration,
}

impl Sitting {
    /// The runs of `case`, if it is one.
    pub fn of(&self, variant: Variant, identities: u32, connections: u32) -> Option<&[Run]> {
        let case = Case { variant, identities, connections };
        self.cases.iter().position(|c| *c == case).map(|i| self.runs[i].as_slice())
    }
}

/// The servers every variant shares.
struct Shared {
    redis: RedisServer,
    webdis: Webdis,
    authz: Envoy,
    _backend: Backend,
}

fn start_envoy(variant: Variant, shared: &Shared, backend: u16) -> Envoy {
    let (listener, admin) = (free_port(), free_port());
    // Store down: the fallback variant's webdis port has nobody listening.
    let webdis = if variant == Variant::Fallback { free_port() } else { shared.webdis.port };
    let t = EnvoyTemplate {
        listener,
        admin,
        backend,
        webdis,
        // BENCH_MODULE: another build of the module, for A/B runs of it
        // (host-tests/bench-modules.py).
        module: std::env::var("BENCH_MODULE").unwrap_or_else(|_| dist("ratelimit.wasm").display().to_string()),
        plugin_config: None,
    };
    Envoy::start(&variant.config(&t, shared.authz.port), listener, admin, 1)
        .unwrap_or_else(|e| panic!("{} refused to start:\n{}", variant.name(), e.log))
}

/// The module's counters of store calls and of decisions they carried.
fn batch_counters(envoy: &Envoy) -> (u64, u64) {
    (envoy.stat("wasmcustom.ratelimit.store_calls"), envoy.stat("wasmcustom.ratelimit.store_decisions"))
}

fn measure(envoy: &Envoy, shared: &Shared, case: &Case, script: &std::path::Path, duration: Duration) -> Run {
    let store_cpu = || cpu_seconds(shared.redis.process.pid()) + cpu_seconds(shared.webdis.process.pid());
    let callee_cpu = || cpu_seconds(shared.authz.process.pid());
    // Admin reads first and last: their CPU stays out of the run's.
    let (calls0, decisions0) = batch_counters(envoy);
    let evalsha0 = command_calls(&shared.redis, "evalsha");
    let (e0, s0, a0) = (cpu_seconds(envoy.process.pid()), store_cpu(), callee_cpu());
    let w = wrk::run_script(&format!("http://127.0.0.1:{}/", envoy.port), case.connections, duration, Some(script));
    let (e1, s1, a1) = (cpu_seconds(envoy.process.pid()), store_cpu(), callee_cpu());
    let evalsha1 = command_calls(&shared.redis, "evalsha");
    let (calls1, decisions1) = batch_counters(envoy);
    let n = w.requests as f64;
    let calls = calls1.saturating_sub(calls0);
    Run {
        wrk: w,
        envoy_us: (e1 - e0) * 1e6 / n,
        store_us: (s1 - s0) * 1e6 / n,
        callee_us: (a1 - a0) * 1e6 / n,
        store_calls: evalsha1.saturating_sub(evalsha0) as f64 / n,
        decisions_per_call: if calls == 0 {
            f64::NAN
        } else {
            decisions1.saturating_sub(decisions0) as f64 / calls as f64
        },
    }
}

/// Starts everything, warms each Envoy up once, then `rounds` rounds of
/// every case: `long` runs at `CONNECTIONS`, `short` ones at 1 connection.
pub fn run(rounds: usize, long: Duration, short: Duration, warmup: Duration) -> Sitting {
    let redis = RedisServer::start();
    let webdis = Webdis::start(redis.port);
    let backend = Backend::start();
    let backend_port = backend.port;
    let (authz_port, authz_admin) = (free_port(), free_port());
    let authz = Envoy::start(&authz_server_config(authz_port, authz_admin), authz_port, authz_admin, 1)
        .unwrap_or_else(|e| panic!("the authorization server refused to start:\n{}", e.log));
    let shared = Shared { redis, webdis, authz, _backend: backend };
    let envoys: Vec<(Variant, Envoy)> =
        Variant::ALL.iter().map(|&v| (v, start_envoy(v, &shared, backend_port))).collect();
    let dir = TempDir::new("wrk");
    let script = |identities: u32| -> PathBuf {
        let path = dir.path().join(format!("keys-{identities}.lua"));
        if !path.exists() {
            let text = if identities == ZIPF { zipf_script(10_000, 1.1) } else { api_key_script(identities) };
            std::fs::write(&path, text).unwrap();
        }
        path
    };
    // Warm-up: JIT and connection pools; the deny variant records its first
    // denial, the fallback variant opens its breaker.
    for (_, e) in &envoys {
        let _ = wrk::run_script(&format!("http://127.0.0.1:{}/", e.port), CONNECTIONS, warmup, Some(&script(MANY)));
    }
    let envoy_of = |v: Variant| &envoys.iter().find(|(x, _)| *x == v).expect("every variant has its Envoy").1;
    let cases = selected(cases());
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); cases.len()];
    for round in 0..rounds {
        for (i, case) in cases.iter().enumerate() {
            let duration = if case.connections == 1 { short } else { long };
            let r = measure(envoy_of(case.variant), &shared, case, &script(case.identities), duration);
            eprintln!("  proxy round {round} {}: {r:?}", label(case));
            if case.variant == Variant::Leased {
                let e = envoy_of(case.variant);
                let stat = |n: &str| e.stat(&format!("wasmcustom.ratelimit.api.{n}"));
                eprintln!(
                    "    leases so far: {} granted, {} requests admitted from them of {} allowed",
                    stat("leases"),
                    stat("lease_allowed"),
                    stat("allowed")
                );
            }
            runs[i].push(r);
        }
    }
    let allowed = [Batching::On, Batching::Small, Batching::Off].map(Variant::Allowed);
    let checks = Checks {
        fallback_allowed: envoy_of(Variant::Fallback).stat("wasmcustom.ratelimit.api.fallback_allowed"),
        allowed_errors: allowed.iter().map(|&v| envoy_of(v).stat("wasmcustom.ratelimit.api.store_errors")).sum(),
        native_ok: envoy_of(Variant::LocalRateLimit).stat("local_rate_limiter.http_local_rate_limit.ok"),
        native_limited: envoy_of(Variant::LocalRateLimit).stat("local_rate_limiter.http_local_rate_limit.rate_limited"),
        // Under `cluster.<route's cluster>.` or `http.<prefix>.` by version:
        // the largest, as both may count the same requests.
        authz_ok: envoy_of(Variant::ExtAuthz)
            .stats("ext_authz\\.ok$")
            .lines()
            .filter_map(|l| l.rsplit_once(": ").and_then(|(_, v)| v.trim().parse::<u64>().ok()))
            .max()
            .unwrap_or(0),
    };
    Sitting { cases, runs, checks, rounds, long, short }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_has_its_envoy_and_the_split_has_its_runs() {
        let cases = cases();
        assert_eq!(cases.len(), 21);
        assert!(cases.iter().all(|c| Variant::ALL.contains(&c.variant)));
        let has = |variant, identities, connections| cases.contains(&Case { variant, identities, connections });
        for b in [Batching::On, Batching::Small, Batching::Off] {
            assert!(has(Variant::Allowed(b), 1, CONNECTIONS));
        }
        assert!(has(Variant::Allowed(Batching::Off), MANY, CONNECTIONS) && has(Variant::NoFilter, 1, 1));
        // Throughput cases first, each case once.
        assert!(cases.windows(2).all(|w| w[0].connections >= w[1].connections));
        assert!(cases.iter().enumerate().all(|(i, c)| !cases[..i].contains(c)));
        // The pairs the latency targets compare run back to back.
        let at1 = |variant| cases.iter().position(|c| *c == Case { variant, identities: 1, connections: 1 }).unwrap();
        assert_eq!(at1(Variant::Leased), at1(Variant::NoRuleMatched) + 1);
        assert_eq!(at1(Variant::Allowed(Batching::Off)), at1(Variant::Allowed(Batching::On)) + 1);
    }
}
