//! Section 1: what the filter costs the proxy. Six Envoys (`--concurrency
//! 1`), one per variant, run side by side against one upstream and one
//! store; wrk loads one at a time, variant after variant, round after round.
//! Envoy's own CPU time per request (from /proc) is the figure that matters
//! here: the store, the upstream and wrk share this machine's cores, so
//! requests per second say as much about them as about the proxy.

use std::time::Duration;

use serde_json::json;

use super::envoy_variants::Variant;
use super::proc_cpu::cpu_seconds;
use super::report::{table, Section, Target};
use super::stats::Summary;
use super::wrk::{self, WrkRun};
use crate::backend::Backend;
use crate::envoy::{Envoy, EnvoyTemplate};
use crate::paths::dist;
use crate::process::free_port;
use crate::redis_server::RedisServer;
use crate::stack::command_calls;
use crate::webdis::Webdis;

/// wrk connections (one thread).
pub const CONNECTIONS: u32 = 32;

/// One run's readings.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    /// What wrk saw.
    pub wrk: WrkRun,
    /// Envoy's CPU per request, µs.
    pub envoy_us: f64,
    /// webdis + Redis CPU per request, µs.
    pub store_us: f64,
    /// Decision-script calls Redis ran per request.
    pub store_calls: f64,
}

/// The servers every variant shares.
struct Shared {
    redis: RedisServer,
    webdis: Webdis,
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
        module: dist("ratelimit.wasm").display().to_string(),
        plugin_config: None,
    };
    Envoy::start(&variant.config(&t), listener, admin, 1)
        .unwrap_or_else(|e| panic!("{} refused to start:\n{}", variant.name(), e.log))
}

fn measure(envoy: &Envoy, shared: &Shared, duration: Duration) -> Run {
    let store_cpu = || cpu_seconds(shared.redis.process.pid()) + cpu_seconds(shared.webdis.process.pid());
    let (e0, s0, c0) = (cpu_seconds(envoy.process.pid()), store_cpu(), command_calls(&shared.redis, "evalsha"));
    let w = wrk::run(&format!("http://127.0.0.1:{}/", envoy.port), CONNECTIONS, duration);
    let (e1, s1, c1) = (cpu_seconds(envoy.process.pid()), store_cpu(), command_calls(&shared.redis, "evalsha"));
    let n = w.requests as f64;
    Run { wrk: w, envoy_us: (e1 - e0) * 1e6 / n, store_us: (s1 - s0) * 1e6 / n, store_calls: (c1 - c0) as f64 / n }
}

/// Starts everything, warms each variant up, then `rounds` rounds.
pub fn run(rounds: usize, duration: Duration, warmup: Duration) -> Section {
    let redis = RedisServer::start();
    let webdis = Webdis::start(redis.port);
    let backend = Backend::start();
    let backend_port = backend.port;
    let shared = Shared { redis, webdis, _backend: backend };
    let envoys: Vec<(Variant, Envoy)> =
        Variant::ALL.iter().map(|&v| (v, start_envoy(v, &shared, backend_port))).collect();
    // Warm-up: JIT and connection pools; the deny variant records its first
    // denial, the fallback variant opens its breaker.
    for (_, e) in &envoys {
        let _ = wrk::run(&format!("http://127.0.0.1:{}/", e.port), CONNECTIONS, warmup);
    }
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); envoys.len()];
    for round in 0..rounds {
        for (i, (v, e)) in envoys.iter().enumerate() {
            let r = measure(e, &shared, duration);
            eprintln!("  proxy round {round} {}: {r:?}", v.name());
            runs[i].push(r);
        }
    }
    let stat =
        |variant: Variant, name: &str| envoys.iter().find(|(v, _)| *v == variant).map_or(0, |(_, e)| e.stat(name));
    let checks = Checks {
        fallback_allowed: stat(Variant::Fallback, "wasmcustom.ratelimit.api.fallback_allowed"),
        allowed_errors: stat(Variant::Allowed, "wasmcustom.ratelimit.api.store_errors"),
        native_ok: stat(Variant::LocalRateLimit, "local_rate_limiter.http_local_rate_limit.ok"),
        native_limited: stat(Variant::LocalRateLimit, "local_rate_limiter.http_local_rate_limit.rate_limited"),
    };
    section(&runs, rounds, duration, &checks)
}

/// Envoy's own counters, showing each variant did what its name says.
struct Checks {
    fallback_allowed: u64,
    allowed_errors: u64,
    native_ok: u64,
    native_limited: u64,
}

fn section(runs: &[Vec<Run>], rounds: usize, duration: Duration, checks: &Checks) -> Section {
    let col = |i: usize, f: &dyn Fn(&Run) -> f64| runs[i].iter().map(f).collect::<Vec<f64>>();
    let base_cpu = col(0, &|r| r.envoy_us);
    let base_rate = col(0, &|r| r.wrk.rate);
    let mut rows = Vec::new();
    let mut figures = Vec::new();
    let mut ratio_of = vec![Summary { median: 1.0, min: 1.0, max: 1.0 }; runs.len()];
    for (i, v) in Variant::ALL.iter().enumerate() {
        let rate = Summary::of(&col(i, &|r| r.wrk.rate));
        let cpu = Summary::of(&col(i, &|r| r.envoy_us));
        let cpu_ratio = Summary::ratio(&col(i, &|r| r.envoy_us), &base_cpu);
        let rate_ratio = Summary::ratio(&col(i, &|r| r.wrk.rate), &base_rate);
        let non_2xx: u64 = runs[i].iter().map(|r| r.wrk.non_2xx).sum();
        let requests: u64 = runs[i].iter().map(|r| r.wrk.requests).sum();
        ratio_of[i] = cpu_ratio;
        rows.push(vec![
            v.name().to_string(),
            rate.show(0),
            rate_ratio.show(2),
            Summary::of(&col(i, &|r| r.wrk.p50_us)).show(0),
            Summary::of(&col(i, &|r| r.wrk.p99_us)).show(0),
            cpu.show(1),
            cpu_ratio.show(2),
            Summary::of(&col(i, &|r| r.store_us)).show(1),
            format!("{:.3}", Summary::of(&col(i, &|r| r.store_calls)).median),
            format!("{:.1}%", 100.0 * non_2xx as f64 / requests as f64),
        ]);
        figures.push(json!({"variant": v.name(), "rate": rate.to_json(), "cpu_us": cpu.to_json(),
            "cpu_ratio": cpu_ratio.to_json(), "rate_ratio": rate_ratio.to_json()}));
    }
    let idx = |v: Variant| Variant::ALL.iter().position(|&x| x == v).unwrap_or(0);
    let target = |v: Variant, cap: f64, what: &str| {
        let r = ratio_of[idx(v)];
        Target::new(
            &format!("Envoy CPU per request, {what}"),
            &format!("≤ {cap}× no filter"),
            format!("{:.2}×", r.median),
            r.median <= cap,
            String::new(),
        )
    };
    let mut targets = vec![
        target(Variant::NoRuleMatched, 1.25, "no rule matched"),
        target(Variant::DenyCacheHit, 0.7, "deny-cache hit"),
        target(Variant::Allowed, 2.0, "allowed, one store call"),
    ];
    // Why a target is missed, from the CPU medians of this run.
    let cpu_of = |v: Variant| Summary::of(&col(idx(v), &|r| r.envoy_us)).median;
    let (base, none, allow, deny) = (
        cpu_of(Variant::NoFilter),
        cpu_of(Variant::NoRuleMatched),
        cpu_of(Variant::Allowed),
        cpu_of(Variant::DenyCacheHit),
    );
    let whys = [
        format!(
            "{none:.1} µs vs {base:.1} µs: +{:.1} µs per request for hosting the filter in V8 and matching",
            none - base
        ),
        format!(
            "{deny:.1} µs vs {base:.1} µs: the 429 saves the upstream hop but pays the filter ({:+.1} µs when no rule \
             matches) and a local reply",
            none - base
        ),
        format!(
            "{allow:.1} µs vs {base:.1} µs: +{:.1} µs beyond a request no rule matches, for the decision (identity, \
             deny-cache lookup, one dispatch_http_call to webdis and its reply, response headers)",
            allow - none
        ),
    ];
    for (t, why) in targets.iter_mut().zip(whys) {
        if !t.met {
            t.why = why;
        }
    }
    let pass = ratio_of[idx(Variant::NoRuleMatched)].median;
    let allowed = idx(Variant::Allowed);
    let body = format!(
        "Six Envoys 1.40 (`--concurrency 1`), one per variant, all rendered from `envoy-config/envoy.yaml`, share \
         one upstream (in the bench process), webdis and Redis; `wrk -t1 -c{CONNECTIONS} -d{}s --latency` loads one \
         at a time, every variant in turn, {rounds} rounds (after a warm-up run each). Envoy CPU: utime+stime of \
         the Envoy process (/proc/<pid>/stat) over the run ÷ requests; store CPU: the same for webdis + Redis; \
         store calls: EVALSHA at Redis ÷ requests. Ratios are to the no-filter run of the same round. Median \
         (min–max). The filter variants use one sliding_window rule keyed by client address (store timeout \
         1000 ms, so that allow-path calls do not time out on this shared machine: {} store errors counted); the \
         fallback variant's store address has no listener ({} requests admitted by the fallback bucket); the \
         native local_ratelimit counted {} requests ok and {} rate limited.\n\n{}\n\
         Reading: Envoy pays {:.2}× its baseline CPU per request when no rule matches, {:.2}× on the allow path \
         (plus {:.1} µs of webdis + Redis CPU per request) and {:.2}× when the deny cache answers (no upstream \
         hop).\nRequests per second depend on the shared cores as much as on Envoy: on the allow path webdis and \
         Redis spend {:.1} µs of CPU per request next to Envoy's {:.1} µs, on the same two cores as wrk and the \
         upstream.\n\n![proxy cost](BENCHMARKS-proxy.png)\n",
        duration.as_secs(),
        checks.allowed_errors,
        checks.fallback_allowed,
        checks.native_ok,
        checks.native_limited,
        table(
            &[
                "variant",
                "requests/s",
                "× no filter",
                "p50 µs",
                "p99 µs",
                "Envoy CPU µs/request",
                "× no filter",
                "store CPU µs/request",
                "store calls/request",
                "non-2xx"
            ],
            &rows
        ),
        pass,
        ratio_of[allowed].median,
        Summary::of(&col(allowed, &|r| r.store_us)).median,
        ratio_of[idx(Variant::DenyCacheHit)].median,
        Summary::of(&col(allowed, &|r| r.store_us)).median,
        allow,
    );
    Section { title: "Proxy cost".into(), body, figures: json!(figures), targets }
}
