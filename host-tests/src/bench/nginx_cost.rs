//! What the filter costs NGINX (ngx_wasm_module, 2 worker processes, the
//! shipped `envoy-config/nginx.conf`), against NGINX alone and NGINX's own
//! `limit_req` (local to one NGINX, not distributed): one NGINX per case
//! side by side in front of one upstream and one store, loaded by wrk in
//! turn, round after round, CPU per request read from /proc for the
//! master and its workers.

use std::time::Duration;

use serde_json::json;

use super::proc_cpu::cpu_seconds;
use super::report::{table, Section};
use super::stats::Summary;
use super::wrk::{self, api_key_script, WrkRun};
use crate::backend::Backend;
use crate::nginx::{render, Nginx, Ports};
use crate::process::{free_port, TempDir};
use crate::redis_server::RedisServer;
use crate::stack::command_calls;
use crate::webdis::{with_credential, Webdis};

/// wrk connections.
const CONNECTIONS: u32 = 32;

/// One NGINX of the sitting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    /// No `proxy_wasm`, no `limit_req`: the baseline.
    NoFilter,
    /// `limit_req` keyed by `$http_x_api_key`, never reached.
    LimitReqAllowed,
    /// `limit_req` at 1 request a minute: all but the first answered 429.
    LimitReqDenied,
    /// The filter, its one rule matching another path.
    NoRuleMatched,
    /// The filter, every request allowed by the store (webdis, Redis).
    Allowed,
    /// The filter, a limit of 1: all but the first answered from the deny cache.
    Denied,
}

const CASES: [Case; 6] =
    [Case::NoFilter, Case::LimitReqAllowed, Case::LimitReqDenied, Case::NoRuleMatched, Case::Allowed, Case::Denied];

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::NoFilter => "no filter (baseline)",
            Case::LimitReqAllowed => "limit_req (local), allowed",
            Case::LimitReqDenied => "limit_req (local), denied",
            Case::NoRuleMatched => "filter, no rule matched",
            Case::Allowed => "filter, allowed through the store",
            Case::Denied => "filter, denied (deny-cache hit)",
        }
    }

    /// The rule's path prefix and limit, for the filter's cases.
    fn rule(self) -> Option<(&'static str, u64)> {
        match self {
            Case::NoRuleMatched => Some(("/never/", 100_000_000)),
            Case::Allowed => Some(("/", 100_000_000)),
            Case::Denied => Some(("/", 1)),
            _ => None,
        }
    }

    /// `limit_req`'s rate, for its cases.
    fn limit_req_rate(self) -> Option<&'static str> {
        match self {
            Case::LimitReqAllowed => Some("rate=1000000r/s burst=1000000 nodelay"),
            Case::LimitReqDenied => Some("rate=1r/m"),
            _ => None,
        }
    }
}

/// The plugin configuration of a filter case: one rule keyed by
/// `x-api-key`, one sliding_window limit per hour.
fn plugin(webdis: u16, prefix: &str, limit: u64) -> String {
    with_credential(&format!(
        r#"{{"domain":"bench","store":{{"transport":"webdis","cluster":"127.0.0.1:{webdis}","authority":"webdis","timeout_ms":1000}},
        "deny_cache":{{"enabled":true,"slots":4096}},"response_headers":true,
        "rules":[{{"name":"api","match":{{"path_prefix":"{prefix}"}},"key":["header:x-api-key"],
        "limits":[{{"limit":{limit},"window":"1h"}}],"failure_mode":"open"}}]}}"#
    ))
}

/// `text` without the span from `from` through the first `to` after it.
fn cut(text: &str, from: &str, to: &str) -> String {
    let start = text.find(from).expect("the span's start");
    let end = start + text[start..].find(to).expect("the span's end") + to.len();
    format!("{}{}", &text[..start], &text[end..])
}

/// The case's nginx.conf.
fn conf(case: Case, ports: &Ports) -> String {
    if let Some((prefix, limit)) = case.rule() {
        return render(ports, Some(&plugin(ports.webdis, prefix, limit)));
    }
    let mut text = render(ports, None);
    text = cut(&text, "proxy_wasm_request_headers_in_access on;", ";");
    text = cut(&text, "proxy_wasm ratelimit '", "';");
    if let Some(rate) = case.limit_req_rate() {
        text = text.replacen(
            "access_log off;",
            "access_log off;\n    limit_req_zone $http_x_api_key zone=bench:10m rate=1r/s;",
            1,
        );
        let (zone_rate, rest) = rate.split_once(' ').map_or((rate, ""), |(r, rest)| (r, rest));
        text = text.replacen("rate=1r/s;", &format!("{zone_rate};"), 1);
        text = text.replacen(
            "proxy_http_version 1.1;",
            &format!(
                "limit_req zone=bench {rest};\n            limit_req_status 429;\n            proxy_http_version 1.1;"
            ),
            1,
        );
    }
    text
}

/// The master and its worker processes.
fn processes(master: u32) -> Vec<u32> {
    let children = std::fs::read_to_string(format!("/proc/{master}/task/{master}/children")).unwrap_or_default();
    std::iter::once(master).chain(children.split_whitespace().filter_map(|p| p.parse().ok())).collect()
}

/// CPU seconds of `pids` together.
fn cpu_of(pids: &[u32]) -> f64 {
    pids.iter().map(|&p| cpu_seconds(p)).sum()
}

/// One run's readings.
#[derive(Clone, Copy, Debug)]
struct Run {
    wrk: WrkRun,
    nginx_us: f64,
    store_us: f64,
    store_calls: f64,
}

/// One wrk run against `nginx`.
fn measure(nginx: &Nginx, redis: &RedisServer, store: &[u32], script: &std::path::Path, length: Duration) -> Run {
    let pids = processes(nginx.pid());
    let (cpu0, store0, calls0) = (cpu_of(&pids), cpu_of(store), command_calls(redis, "evalsha"));
    let run = wrk::run_script(&format!("http://127.0.0.1:{}/api/x", nginx.port), CONNECTIONS, length, Some(script));
    let per = |d: f64| d * 1e6 / run.requests as f64;
    Run {
        wrk: run,
        nginx_us: per(cpu_of(&pids) - cpu0),
        store_us: per(cpu_of(store) - store0),
        store_calls: (command_calls(redis, "evalsha") - calls0) as f64 / run.requests as f64,
    }
}

/// The sitting and its section.
pub fn run(rounds: usize, length: Duration) -> Section {
    let redis = RedisServer::start();
    let webdis = Webdis::start(redis.port);
    let backend = Backend::start();
    let dir = TempDir::new("nginx-bench");
    let script = dir.path().join("key.lua");
    std::fs::write(&script, api_key_script(1)).unwrap();
    let nginxes: Vec<Nginx> = CASES
        .iter()
        .map(|&case| {
            let ports = Ports { listen: free_port(), backend: backend.port, webdis: webdis.port };
            let configured = if case.rule().is_some() { 2 } else { 0 };
            Nginx::start_with(&conf(case, &ports), ports.listen, configured)
                .unwrap_or_else(|e| panic!("nginx ({}) did not start:\n{}", case.name(), e.log))
        })
        .collect();
    let store = [redis.process.pid(), webdis.process.pid()];
    for (case, nginx) in CASES.iter().zip(&nginxes) {
        let warm = measure(nginx, &redis, &store, &script, Duration::from_secs(1));
        println!("nginx warm-up: {} {:.0} requests/s", case.name(), warm.wrk.rate);
    }
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); CASES.len()];
    for round in 0..rounds {
        for (i, (case, nginx)) in CASES.iter().zip(&nginxes).enumerate() {
            let r = measure(nginx, &redis, &store, &script, length);
            println!("nginx round {round}: {:<40} {:>6.1} µs/request", case.name(), r.nginx_us);
            runs[i].push(r);
        }
    }
    for (case, nginx) in CASES.iter().zip(&nginxes) {
        assert!(!nginx.workers_crashed(), "an NGINX worker crashed ({}):\n{}", case.name(), nginx.log());
        assert!(!nginx.store_failed(), "a store call failed ({}):\n{}", case.name(), nginx.log());
    }
    section(&runs, rounds, length)
}

fn section(runs: &[Vec<Run>], rounds: usize, length: Duration) -> Section {
    let col = |i: usize, f: fn(&Run) -> f64| runs[i].iter().map(f).collect::<Vec<f64>>();
    let base = col(0, |r| r.nginx_us);
    let mut rows = Vec::new();
    let mut figures = Vec::new();
    let mut ratios = Vec::new();
    for (i, case) in CASES.iter().enumerate() {
        let requests: u64 = runs[i].iter().map(|r| r.wrk.requests).sum();
        let non_2xx: u64 = runs[i].iter().map(|r| r.wrk.non_2xx).sum();
        let cpu = Summary::of(&col(i, |r| r.nginx_us));
        let ratio = Summary::ratio(&col(i, |r| r.nginx_us), &base);
        ratios.push(ratio.median);
        rows.push(vec![
            case.name().to_string(),
            Summary::of(&col(i, |r| r.wrk.rate)).show(0),
            Summary::of(&col(i, |r| r.wrk.p50_us)).show(0),
            Summary::of(&col(i, |r| r.wrk.p99_us)).show(0),
            cpu.show(1),
            ratio.show(2),
            Summary::of(&col(i, |r| r.store_us)).show(1),
            format!("{:.3}", Summary::of(&col(i, |r| r.store_calls)).median),
            format!("{:.1}%", 100.0 * non_2xx as f64 / requests.max(1) as f64),
        ]);
        figures.push(json!({"case": case.name(), "cpu_us": cpu.to_json(), "cpu_ratio": ratio.to_json()}));
    }
    let body = format!(
        "Six NGINX 1.27.4 with ngx_wasm_module (Wasmtime 26), each from the shipped `envoy-config/nginx.conf` \
         (2 worker processes), share one upstream (in the bench process), webdis and Redis; `wrk -t1 -c{CONNECTIONS} \
         -d{}s --latency` with `x-api-key: key-1` loads one at a time, every case in turn, {rounds} rounds (after one \
         warm-up run each). NGINX CPU: utime+stime of the master and its workers over the run ÷ requests; store CPU: \
         the same for webdis + Redis. The filter's cases have one rule keyed by `header:x-api-key`, one sliding_window \
         limit per hour (100,000,000, never reached; or 1, so that the deny cache answers) and a store timeout of \
         1000 ms; NGINX's own `limit_req` is keyed by `$http_x_api_key` (`limit_req_status 429`), one NGINX's count \
         only. Ratios are to the no-filter run of the same round. Median (min–max).\n\n{}\n\
         Reading: NGINX pays {:.2}× its baseline CPU per request when no rule matches, {:.2}× when the store allows \
         (one store call per request on NGINX: docs/nginx.md says why), and {:.2}× when the deny cache answers; its \
         own `limit_req`, which shares nothing between NGINXes, {:.2}× allowing and {:.2}× denying.\n",
        length.as_secs(),
        table(
            &[
                "case",
                "requests/s",
                "p50 µs",
                "p99 µs",
                "NGINX CPU µs/request",
                "× no filter",
                "store CPU µs/request",
                "store calls/request",
                "non-2xx",
            ],
            &rows
        ),
        ratios[3],
        ratios[4],
        ratios[5],
        ratios[1],
        ratios[2],
    );
    Section { title: "NGINX cost".into(), body, figures: json!({ "nginx": figures }), targets: Vec::new() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports() -> Ports {
        Ports { listen: 1, backend: 2, webdis: 3 }
    }

    #[test]
    fn the_baseline_runs_no_module_and_limit_req_is_keyed_by_the_api_key() {
        let plain = conf(Case::NoFilter, &ports());
        assert!(!plain.contains("proxy_wasm ratelimit") && !plain.contains("proxy_wasm_request_headers_in_access"));
        assert!(!plain.contains("limit_req"));
        let limited = conf(Case::LimitReqDenied, &ports());
        assert!(limited.contains("limit_req_zone $http_x_api_key zone=bench:10m rate=1r/m;"));
        assert!(limited.contains("limit_req zone=bench ;"));
        let allowed = conf(Case::LimitReqAllowed, &ports());
        assert!(
            allowed.contains("rate=1000000r/s;") && allowed.contains("limit_req zone=bench burst=1000000 nodelay;")
        );
        let filter = conf(Case::Denied, &ports());
        assert!(filter.contains(r#""limits":[{"limit":1,"window":"1h"}]"#) && filter.contains("127.0.0.1:3"));
    }
}
