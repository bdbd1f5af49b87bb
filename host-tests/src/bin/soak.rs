//! `make soak`: two Envoys (two workers each) sharing one Redis through one
//! webdis, under mixed traffic for SOAK_SECONDS (default 600): many
//! well-behaved clients (a new set every 30 s, each far below its limits)
//! and a few abusive ones (far over them). It samples Envoy's, webdis's and
//! Redis's memory and Redis's key count, checks what clients saw, and writes
//! its figures to the `## Soak` section of docs/BENCHMARKS.md.
//!
//! Checks (exit status 1 if any fails): every answer is 200 or 429; a 429
//! only for an abusive client; no 503 (Redis stays up); each abusive client
//! admitted at most what its limits allow over the run; DBSIZE never above
//! (clients active within the keys' lifetime) × (keys per client); memory
//! levels off (the last third of the run grows at most 10% + 2 MiB over the
//! middle third's peak; judged only for runs of 5 minutes or more).

// A driver: a failure to start a server ends it with that message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use host_tests::fleet::{rss_kib, Fleet};
use host_tests::http::agent;
use host_tests::paths::{root, BENCHMARKS};
use host_tests::redis_server::RedisServer;

const PROXIES: usize = 2;
const WORKERS: u32 = 2;
/// Well-behaved clients: a pool of POOL identities, renewed every GENERATION.
const POOL: usize = 1000;
const GENERATION: Duration = Duration::from_secs(30);
const NORMAL_THREADS: usize = 4;
const NORMAL_RPS_PER_THREAD: u64 = 100;
/// Abusive clients: ABUSERS fixed identities, each ~40 requests a second.
const ABUSERS: usize = 10;
const ABUSIVE_THREADS: usize = 2;
const ABUSIVE_RPS_PER_THREAD: u64 = 200;
/// The limits (per client): sliding window 120/min, fixed window 30/10 s.
/// A well-behaved client sends one request every POOL / (NORMAL_THREADS ×
/// NORMAL_RPS_PER_THREAD) = 2.5 s: 4 per 10 s, 24 a minute.
const SLIDING_LIMIT: u64 = 120;
const FIXED_LIMIT: u64 = 30;
/// sliding_window: the current and the previous minute's counters; fixed_window: one.
const KEYS_PER_CLIENT: u64 = 3;
/// A sliding-window key lives until the end of the minute after its own.
const KEY_LIFETIME: Duration = Duration::from_secs(120);

const CONFIG: &str = r#"{"domain":"soak",
  "store":{"transport":"webdis","cluster":"ratelimit_store","authority":"webdis","timeout_ms":250,
           "circuit_breaker":{"failures":3,"open":"1s"}},
  "rules":[{"name":"api","match":{"path_prefix":"/api/"},"key":["header:x-user"],"failure_mode":"open","fleet_size":2,
            "limits":[{"algorithm":"sliding_window","limit":120,"window":"1m"},
                      {"algorithm":"fixed_window","limit":30,"window":"10s"}]}]}"#;

#[derive(Default, Clone)]
struct Tally {
    by_status: HashMap<u16, u64>,
    errors: u64,
    latencies_us: Vec<u32>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        for (s, n) in other.by_status {
            *self.by_status.entry(s).or_default() += n;
        }
        self.errors += other.errors;
        self.latencies_us.extend(other.latencies_us);
    }
    fn count(&self, status: u16) -> u64 {
        self.by_status.get(&status).copied().unwrap_or(0)
    }
    fn total(&self) -> u64 {
        self.by_status.values().sum::<u64>() + self.errors
    }
    /// The latency at quantile `p` (the latencies must be sorted).
    fn percentile_ms(&self, p: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return 0.0;
        }
        let i = ((self.latencies_us.len() - 1) as f64 * p).round() as usize;
        f64::from(self.latencies_us[i]) / 1000.0
    }
}

struct Sample {
    at: Duration,
    envoy_rss_kib: Vec<u64>,
    webdis_rss_kib: u64,
    redis_rss_kib: u64,
    redis_used: u64,
    dbsize: u64,
    bound: u64,
}

/// Sends paced requests until `stop`: identity `who(i)` for the i-th
/// request, alternating over the proxies; never faster than `rps` (a late
/// request does not make the next one earlier than one period after it).
fn traffic(
    fleet: &Fleet,
    stop: &AtomicBool,
    rps: u64,
    offset: usize,
    who: impl Fn(u64) -> String,
    mut on_answer: impl FnMut(&str, u16),
) -> Tally {
    let period = Duration::from_micros(1_000_000 / rps);
    let agent = agent(Duration::from_secs(5));
    let mut tally = Tally::default();
    let mut next = Instant::now();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        next = next.max(Instant::now()) + period;
        let user = who(i);
        let url = fleet.url((i as usize + offset) % PROXIES, "/api/items");
        let start = Instant::now();
        match agent.get(&url).header("x-user", &user).call() {
            Ok(mut resp) => {
                let _ = resp.body_mut().read_to_string();
                let status = resp.status().as_u16();
                *tally.by_status.entry(status).or_default() += 1;
                on_answer(&user, status);
            }
            Err(_) => tally.errors += 1,
        }
        tally.latencies_us.push(u32::try_from(start.elapsed().as_micros()).unwrap_or(u32::MAX));
        i += 1;
    }
    tally
}

/// The 1-, 5- and 15-minute load averages.
fn loadavg() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

fn redis_info(redis: &RedisServer, field: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("memory").query(&mut redis.connect()).unwrap();
    info.lines().find_map(|l| l.strip_prefix(&format!("{field}:"))).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// Clients whose keys can still be alive at `at`: every generation of
/// well-behaved clients that ended less than KEY_LIFETIME ago, plus the abusers.
fn active_clients(at: Duration) -> u64 {
    let now_gen = at.as_secs() / GENERATION.as_secs();
    let oldest = at.saturating_sub(KEY_LIFETIME + GENERATION).as_secs() / GENERATION.as_secs();
    (now_gen - oldest + 1) * POOL as u64 + ABUSERS as u64
}

fn main() {
    let seconds: u64 = std::env::var("SOAK_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(600);
    let duration = Duration::from_secs(seconds);
    let interval = Duration::from_secs((seconds / 60).clamp(1, 10));
    println!("Soak: {seconds} s, 2 Envoys x {WORKERS} workers, one webdis, one Redis; sampling every {interval:?}");

    let load_before = loadavg();
    let redis = RedisServer::start_with(&["--maxmemory", "256mb", "--maxmemory-policy", "volatile-ttl"]);
    let fleet = Arc::new(Fleet::start(redis.port, PROXIES, WORKERS, CONFIG));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let abuser_admitted: Arc<Mutex<HashMap<String, u64>>> = Arc::default();

    let mut normal = Vec::new();
    for t in 0..NORMAL_THREADS {
        let (fleet, stop) = (fleet.clone(), stop.clone());
        normal.push(std::thread::spawn(move || {
            let who = move |i: u64| {
                let generation = started.elapsed().as_secs() / GENERATION.as_secs();
                let per_thread = (POOL / NORMAL_THREADS) as u64;
                format!("user-{generation}-{}", (i % per_thread) as usize * NORMAL_THREADS + t)
            };
            traffic(&fleet, &stop, NORMAL_RPS_PER_THREAD, t, who, |_, _| {})
        }));
    }
    let mut abusive = Vec::new();
    for t in 0..ABUSIVE_THREADS {
        let (fleet, stop, admitted) = (fleet.clone(), stop.clone(), abuser_admitted.clone());
        abusive.push(std::thread::spawn(move || {
            let per_thread = (ABUSERS / ABUSIVE_THREADS) as u64;
            let who = move |i: u64| format!("abuser-{}", (i % per_thread) as usize * ABUSIVE_THREADS + t);
            let mut local: HashMap<String, u64> = HashMap::new();
            let tally = traffic(&fleet, &stop, ABUSIVE_RPS_PER_THREAD, t, who, |user, status| {
                if status == 200 {
                    *local.entry(user.to_string()).or_default() += 1;
                }
            });
            let mut all = admitted.lock().unwrap();
            for (u, n) in local {
                *all.entry(u).or_default() += n;
            }
            tally
        }));
    }

    let mut samples = Vec::new();
    let mut next = started;
    while started.elapsed() < duration {
        let at = started.elapsed();
        let dbsize: u64 = redis::cmd("DBSIZE").query(&mut redis.connect()).unwrap();
        let sample = Sample {
            at,
            envoy_rss_kib: fleet.envoys.iter().map(|e| rss_kib(e.process.pid())).collect(),
            webdis_rss_kib: rss_kib(fleet.webdis.process.pid()),
            redis_rss_kib: rss_kib(redis.process.pid()),
            redis_used: redis_info(&redis, "used_memory"),
            dbsize,
            bound: active_clients(at) * KEYS_PER_CLIENT,
        };
        println!(
            "  {:>5.0} s  envoy RSS {:?} MiB  webdis {:.1} MiB  redis used_memory {:.1} MiB  DBSIZE {} (bound {})",
            at.as_secs_f64(),
            sample.envoy_rss_kib.iter().map(|k| format!("{:.1}", *k as f64 / 1024.0)).collect::<Vec<_>>(),
            sample.webdis_rss_kib as f64 / 1024.0,
            sample.redis_used as f64 / 1048576.0,
            sample.dbsize,
            sample.bound
        );
        samples.push(sample);
        next += interval;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait.min(duration.saturating_sub(started.elapsed())));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed();
    let load_after = loadavg();
    let mut normal_tally = Tally::default();
    for t in normal {
        normal_tally.merge(t.join().unwrap());
    }
    let mut abusive_tally = Tally::default();
    for t in abusive {
        abusive_tally.merge(t.join().unwrap());
    }
    let stat = |name: &str| fleet.stat_sum(&format!("wasmcustom.ratelimit.{name}"));
    let stats = [
        ("store_calls", stat("store_calls")),
        ("api.allowed", stat("api.allowed")),
        ("api.denied", stat("api.denied")),
        ("api.deny_cache_hits", stat("api.deny_cache_hits")),
        ("api.store_errors", stat("api.store_errors")),
        ("api.fallback_allowed", stat("api.fallback_allowed")),
    ];

    // Checks.
    let mut failed: Vec<String> = Vec::new();
    for (class, tally) in [("well-behaved", &normal_tally), ("abusive", &abusive_tally)] {
        let other: u64 = tally.by_status.iter().filter(|(s, _)| ![200, 429].contains(*s)).map(|(_, n)| n).sum();
        if other > 0 || tally.errors > 0 {
            failed.push(format!("{class}: {other} answers other than 200/429, {} transport errors", tally.errors));
        }
    }
    if normal_tally.count(429) > 0 {
        failed.push(format!("{} well-behaved requests got 429", normal_tally.count(429)));
    }
    let minutes = elapsed.as_secs().div_ceil(60) + 1;
    let admitted = abuser_admitted.lock().unwrap().clone();
    let most = admitted.values().copied().max().unwrap_or(0);
    let least = (0..ABUSERS).map(|a| admitted.get(&format!("abuser-{a}")).copied().unwrap_or(0)).min().unwrap_or(0);
    if most > SLIDING_LIMIT * minutes || least == 0 {
        failed.push(format!("abusive clients admitted {least}..{most}, bound {}", SLIDING_LIMIT * minutes));
    }
    if let Some(s) = samples.iter().find(|s| s.dbsize > s.bound) {
        failed.push(format!("DBSIZE {} above {} at {:?}", s.dbsize, s.bound, s.at));
    }
    let levelled = |series: &[u64]| -> bool {
        let third = series.len() / 3;
        let middle = series[third..2 * third].iter().max().copied().unwrap_or(0);
        let last = series[2 * third..].iter().max().copied().unwrap_or(0);
        last <= middle + middle / 10 + 2048
    };
    let mut series: Vec<(String, Vec<u64>, &str)> = Vec::new();
    for p in 0..PROXIES {
        series.push((format!("Envoy {} RSS", p + 1), samples.iter().map(|s| s.envoy_rss_kib[p]).collect(), "KiB"));
    }
    series.push(("webdis RSS".into(), samples.iter().map(|s| s.webdis_rss_kib).collect(), "KiB"));
    series.push(("Redis RSS".into(), samples.iter().map(|s| s.redis_rss_kib).collect(), "KiB"));
    series.push(("Redis used_memory".into(), samples.iter().map(|s| s.redis_used / 1024).collect(), "KiB"));
    series.push(("Redis DBSIZE".into(), samples.iter().map(|s| s.dbsize).collect(), "keys"));
    let judged = seconds >= 300 && samples.len() >= 9;
    for (name, values, unit) in &series {
        if judged && *unit == "KiB" && !levelled(values) {
            failed.push(format!("{name} still grows in the last third of the run"));
        }
    }

    // Report.
    let total = normal_tally.total() + abusive_tally.total();
    let mut md = String::new();
    let command = if seconds == 600 { "make soak".to_string() } else { format!("SOAK_SECONDS={seconds} make soak") };
    let _ = writeln!(md, "## Soak\n");
    let _ = writeln!(
        md,
        "`{command}` (host-tests/src/bin/soak.rs), {} s, on a 2-core machine shared with other work \
         (load average {load_before} before, {load_after} at the end). \
         Two Envoy 1.40 (2 workers each) with `dist/ratelimit.wasm`, one webdis, one Redis \
         (`maxmemory 256mb`, `volatile-ttl`), all on loopback. Rule `api`: per `x-user`, \
         sliding window {SLIDING_LIMIT}/min + fixed window {FIXED_LIMIT}/10 s, fails open, fleet_size 2.\n",
        elapsed.as_secs()
    );
    let _ = writeln!(
        md,
        "Traffic: {NORMAL_THREADS}×{NORMAL_RPS_PER_THREAD} req/s from well-behaved clients ({POOL} identities, \
         a new set every {} s, each one request per 2.5 s) and {ABUSIVE_THREADS}×{ABUSIVE_RPS_PER_THREAD} req/s \
         from {ABUSERS} abusive identities (~{} req/s each), alternating over the two proxies. \
         {total} requests, {:.0} req/s.\n",
        GENERATION.as_secs(),
        ABUSIVE_RPS_PER_THREAD * ABUSIVE_THREADS as u64 / ABUSERS as u64,
        total as f64 / elapsed.as_secs_f64()
    );
    let _ = writeln!(md, "| clients | requests | 200 | 429 | 503 | other / errors | p50 ms | p99 ms | max ms |");
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    normal_tally.latencies_us.sort_unstable();
    abusive_tally.latencies_us.sort_unstable();
    for (class, tally) in [("well-behaved", &normal_tally), ("abusive", &abusive_tally)] {
        let other: u64 = tally.by_status.iter().filter(|(s, _)| ![200, 429, 503].contains(*s)).map(|(_, n)| n).sum();
        let _ = writeln!(
            md,
            "| {class} | {} | {} | {} | {} | {} / {} | {:.1} | {:.1} | {:.1} |",
            tally.total(),
            tally.count(200),
            tally.count(429),
            tally.count(503),
            other,
            tally.errors,
            tally.percentile_ms(0.5),
            tally.percentile_ms(0.99),
            tally.percentile_ms(1.0)
        );
    }
    let _ = writeln!(
        md,
        "\nAbusive clients admitted {least}–{most} requests each over the run (at most {SLIDING_LIMIT} a minute: \
         bound {}).\n",
        SLIDING_LIMIT * minutes
    );
    let _ = writeln!(md, "Filter counters (both proxies): {}.\n", {
        stats.iter().map(|(n, v)| format!("`{n}` {v}")).collect::<Vec<_>>().join(", ")
    });
    let _ = writeln!(md, "Sampled every {} s ({} samples):\n", interval.as_secs(), samples.len());
    let _ = writeln!(md, "| series | first | middle | last | max |");
    let _ = writeln!(md, "|---|---:|---:|---:|---:|");
    for (name, values, unit) in &series {
        let fmt = |v: u64| if *unit == "KiB" { format!("{:.1} MiB", v as f64 / 1024.0) } else { v.to_string() };
        let _ = writeln!(
            md,
            "| {name} | {} | {} | {} | {} |",
            fmt(values[0]),
            fmt(values[values.len() / 2]),
            fmt(values[values.len() - 1]),
            fmt(values.iter().copied().max().unwrap_or(0))
        );
    }
    let bound_max = samples.iter().map(|s| s.bound).max().unwrap_or(0);
    let _ = writeln!(
        md,
        "\nDBSIZE bound: clients whose keys can still live (the generations of the last {} s, plus the \
         abusers) × {KEYS_PER_CLIENT} keys; at most {bound_max}.\n",
        (KEY_LIFETIME + GENERATION).as_secs()
    );
    if failed.is_empty() {
        let level = if judged { "memory levels off" } else { "memory not judged (run shorter than 5 min)" };
        let _ = writeln!(
            md,
            "Checks: passed (only 200/429; 429 only for abusive clients; no 503; abusive admissions within \
             the limits; DBSIZE within the bound; {level})."
        );
    } else {
        let _ = writeln!(md, "Checks: FAILED: {}.", failed.join("; "));
    }
    print!("\n{md}");
    write_section(&md);
    drop(fleet);
    if !failed.is_empty() {
        std::process::exit(1);
    }
}

/// Replaces the `## Soak` section of docs/BENCHMARKS.md (up to the next `## `),
/// or appends it; creates the file if absent.
fn write_section(section: &str) {
    let path = root().join(BENCHMARKS);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|_| "# Benchmarks\n\n".to_string());
    let out = match text.find("## Soak\n") {
        Some(start) => {
            let end = text[start + 1..].find("\n## ").map_or(text.len(), |e| start + 1 + e + 1);
            format!("{}{section}{}{}", &text[..start], if end < text.len() { "\n" } else { "" }, &text[end..])
        }
        None => format!("{}{}{section}", text, if text.ends_with("\n\n") { "" } else { "\n" }),
    };
    std::fs::write(&path, out).unwrap();
    println!("Wrote the ## Soak section of {BENCHMARKS}");
}
