//! Section "Token streams": what a rule whose cost comes from a streamed
//! response (LLM token budgets) costs Envoy, in CPU per request at a few
//! connections and in memory per open stream, against the same Envoy
//! without the filter. The upstream streams OpenAI-style events.

use std::time::Duration;

use serde_json::json;

use super::envoy_variants::replace_wasm_block;
use super::proc_cpu::cpu_seconds;
use super::report::{table, Section, Target};
use super::sse_upstream::{SseUpstream, EVENTS, GAP, TOTAL_TOKENS};
use super::stats::Summary;
use super::stream_memory::{self, per_stream, Held, Reading};
use super::wrk::{self, WrkRun};
use crate::envoy::{render, Envoy, EnvoyTemplate};
use crate::paths::dist;
use crate::process::free_port;
use crate::redis_server::RedisServer;
use crate::webdis::Webdis;

/// wrk connections.
pub const CONNECTIONS: u32 = 8;
/// Streams held open for the memory figure, and in how many steps.
pub const STREAMS: usize = 800;
const STEPS: usize = 4;
/// The completions path (any path under `/v1/` but the hold path).
const PATH: &str = "/v1/chat/completions";

/// The rule: cost read from the response body, one token bucket never reached.
const TOKEN_RULE: &str = r#"{"domain":"bench","store":{"transport":"webdis","cluster":"ratelimit_store",
  "authority":"webdis","timeout_ms":1000},"rules":[{"name":"llm","match":{"path_prefix":"/v1/"},
  "key":["client_ip"],"cost":{"response_body":"usage.total_tokens","default":1000,"max":200000,"reserve":1},
  "limits":[{"algorithm":"token_bucket","limit":1000000000,"window":"1h"}]}]}"#;

/// The same rule with a concurrency limit never reached (wrk's 8
/// connections come from one address): the cost of taking and releasing
/// a slot per stream.
const CONCURRENCY_RULE: &str = r#"{"domain":"bench","store":{"transport":"webdis","cluster":"ratelimit_store",
  "authority":"webdis","timeout_ms":1000},"rules":[{"name":"llm","match":{"path_prefix":"/v1/"},
  "key":["client_ip"],"cost":{"response_body":"usage.total_tokens","default":1000,"max":200000,"reserve":1},
  "limits":[{"algorithm":"token_bucket","limit":1000000000,"window":"1h"},
  {"algorithm":"concurrency","limit":1000,"max_hold":"60s"}]}]}"#;

/// What the rule charges a stream reset before its usage came.
const DEFAULT_COST: u64 = 1000;

/// How many of `charges` charged the default rather than the usage, given
/// the `units` charged in all.
pub fn cut_streams(charges: u64, units: u64) -> u64 {
    let over = units.saturating_sub(charges * TOTAL_TOKENS) as f64;
    (over / (DEFAULT_COST - TOTAL_TOKENS) as f64).round() as u64
}

/// The Envoys compared.
const NAMES: [&str; 3] = ["no filter", "token rule (`llm`)", "token rule + concurrency limit"];

/// Starts Envoy `which` (0: no filter, 1: the token rule, 2: with a
/// concurrency limit) in front of the upstream, the route's timeout off as
/// streams need.
fn start(which: usize, upstream: u16, webdis: u16) -> Envoy {
    let rule = if which == 2 { CONCURRENCY_RULE } else { TOKEN_RULE };
    streams_envoy((which != 0).then_some(rule), upstream, webdis, |config| config)
}

/// Envoy from `envoy.yaml` with plugin configuration `rules` (none: no
/// filter) in front of `upstream`, the route's timeout off as streams
/// need, and `edit` applied to a configuration with the filter.
pub fn streams_envoy(rules: Option<&str>, upstream: u16, webdis: u16, edit: impl Fn(String) -> String) -> Envoy {
    let (listener, admin) = (free_port(), free_port());
    let t = EnvoyTemplate {
        listener,
        admin,
        backend: upstream,
        webdis,
        module: dist("ratelimit.wasm").display().to_string(),
        plugin_config: Some(rules.unwrap_or(TOKEN_RULE).to_string()),
    };
    let rendered = render(&t);
    assert_eq!(rendered.matches("timeout: 5s").count(), 1, "envoy.yaml's route timeout moved");
    let rendered = rendered.replacen("timeout: 5s", "timeout: 0s", 1);
    let config = if rules.is_none() { replace_wasm_block(&rendered, "") } else { edit(rendered) };
    Envoy::start(&config, listener, admin, 1).unwrap_or_else(|e| panic!("Envoy refused to start:\n{}", e.log))
}

/// One run: wrk, Envoy's CPU per request and store calls per request.
fn measure(envoy: &Envoy, duration: Duration) -> (WrkRun, f64, f64) {
    let calls = || envoy.stat("wasmcustom.ratelimit.store_calls");
    let (e0, c0) = (cpu_seconds(envoy.process.pid()), calls());
    let w = wrk::run(&format!("http://127.0.0.1:{}{PATH}", envoy.port), CONNECTIONS, duration);
    let (e1, c1) = (cpu_seconds(envoy.process.pid()), calls());
    let n = w.requests.max(1) as f64;
    (w, (e1 - e0) * 1e6 / n, c1.saturating_sub(c0) as f64 / n)
}

/// Starts the store, the upstream and both Envoys; `rounds` rounds of runs,
/// then the memory figure on each Envoy.
pub fn run(rounds: usize, duration: Duration, warmup: Duration, streams: usize) -> Section {
    let redis = RedisServer::start();
    let webdis = Webdis::start(redis.port);
    let upstream = SseUpstream::start();
    let envoys = [0, 1, 2].map(|i| start(i, upstream.port, webdis.port));
    for e in &envoys {
        let _ = wrk::run(&format!("http://127.0.0.1:{}{PATH}", e.port), CONNECTIONS, warmup);
    }
    let mut runs: [Vec<(WrkRun, f64, f64)>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for round in 0..rounds {
        for (i, e) in envoys.iter().enumerate() {
            let r = measure(e, duration);
            eprintln!("  tokens round {round} {}: {r:?}", NAMES[i]);
            runs[i].push(r);
        }
    }
    let charges = envoys[1].stat("wasmcustom.ratelimit.llm.charges");
    let units = envoys[1].stat("wasmcustom.ratelimit.llm.charged_units");
    let slots = ["taken", "released"].map(|e| envoys[2].stat(&format!("wasmcustom.ratelimit.llm.slots_{e}")));
    // Memory is compared without the concurrency limit (its slots would cap the streams held).
    let held: Vec<Held> = envoys[..2].iter().map(|e| stream_memory::hold(e, streams, STEPS)).collect();
    for (h, name) in held.iter().zip(NAMES) {
        eprintln!("  streams {name}: {:?}, {} failed", h.readings, h.failed);
    }
    section(&runs, &held, rounds, duration, (charges, units), streams, slots)
}

fn section(
    runs: &[Vec<(WrkRun, f64, f64)>; 3],
    held: &[Held],
    rounds: usize,
    duration: Duration,
    (charges, units): (u64, u64),
    streams: usize,
    [taken, released]: [u64; 2],
) -> Section {
    let cpu = |i: usize| runs[i].iter().map(|r| r.1).collect::<Vec<f64>>();
    let ratio = Summary::ratio(&cpu(1), &cpu(0));
    let with_slots = Summary::ratio(&cpu(2), &cpu(1));
    let calls = |i: usize| Summary::of(&runs[i].iter().map(|r| r.2).collect::<Vec<_>>());
    let rows: Vec<Vec<String>> = (0..3)
        .map(|i| {
            let non_2xx: u64 = runs[i].iter().map(|r| r.0.non_2xx).sum();
            vec![
                NAMES[i].to_string(),
                Summary::of(&runs[i].iter().map(|r| r.0.rate).collect::<Vec<_>>()).show(0),
                Summary::of(&runs[i].iter().map(|r| r.0.p50_us).collect::<Vec<_>>()).show(0),
                Summary::of(&cpu(i)).show(1),
                if i == 0 { "1".into() } else { Summary::ratio(&cpu(i), &cpu(0)).show(2) },
                calls(i).show(2),
                non_2xx.to_string(),
            ]
        })
        .collect();
    let slope = |h: &Held, f: fn(&Reading) -> u64| per_stream(&h.readings, f);
    let show = |b: Option<f64>| b.map_or("–".to_string(), |b| format!("{b:.0}"));
    let mem_rows: Vec<Vec<String>> = held
        .iter()
        .zip(NAMES)
        .map(|(h, name)| {
            vec![
                name.to_string(),
                show(slope(h, |r| r.heap)),
                show(slope(h, |r| r.linear)),
                show(slope(h, |r| r.rss)),
                h.failed.to_string(),
            ]
        })
        .collect();
    let linear = held.get(1).and_then(|h| slope(h, |r| r.linear));
    let heap_extra =
        match (held.first().and_then(|h| slope(h, |r| r.heap)), held.get(1).and_then(|h| slope(h, |r| r.heap))) {
            (Some(a), Some(b)) => format!("{:.0}", b - a),
            _ => "–".into(),
        };
    let targets = vec![
        Target::new(
            "Envoy CPU per request, token streams (8 connections)",
            "≤ 2.5× no filter",
            format!("{:.2}×", ratio.median),
            ratio.median <= 2.5,
            String::new(),
        ),
        Target::new(
            "Envoy CPU per stream with a concurrency limit ÷ without (token streams)",
            "report only",
            format!("{:.2}×", with_slots.median),
            true,
            format!(
                "store calls per stream {} with, {} without; slots taken {taken}, released {released}",
                calls(2).show(2),
                calls(1).show(2)
            ),
        ),
        Target::new(
            "filter's linear memory per open stream",
            "≤ 1 KiB (1024 B), report only",
            show(linear) + " B",
            linear.is_some_and(|b| b <= 1024.0),
            "slope of the VMs' resident linear memory over the streams held: all the filter keeps per stream (its \
             stream state and body reader), not the reader alone"
                .into(),
        ),
    ];
    let figures = json!({
        "cpu": (0..2).map(|i| json!({"envoy": NAMES[i], "cpu_us": Summary::of(&cpu(i)).to_json()})).collect::<Vec<_>>(),
        "ratio": ratio.to_json(),
        "concurrency_ratio": with_slots.to_json(),
        "store_calls_per_stream": (0..3).map(|i| json!({"envoy": NAMES[i], "calls": calls(i).to_json()})).collect::<Vec<_>>(),
        "memory": held.iter().zip(NAMES).map(|(h, n)| json!({"envoy": n, "readings": stream_memory::to_json(h)}))
            .collect::<Vec<_>>(),
    });
    let body = format!(
        "Three Envoys 1.40 (`--concurrency 1`) rendered from `envoy-config/envoy.yaml`, the route's `timeout: 0s` (as \
         streams need), in front of an upstream in the bench process that answers every request with an \
         OpenAI-style stream: {EVENTS} `data:` events, one chunk of the chunked encoding each, {} µs apart, \
         `usage.total_tokens` = {TOTAL_TOKENS} in the last (`include_usage`), then `data: [DONE]`. One Envoy has no \
         filter; the other has one rule `llm` on `/v1/`, keyed by client address, cost \
         `{{\"response_body\":\"usage.total_tokens\",\"default\":1000,\"max\":200000,\"reserve\":1}}`, one \
         token_bucket limit of 10^9 per hour: a check at the request and a charge of the usage read from the \
         stream after it. The third has the same rule with a concurrency limit of 1,000 streams (never reached): \
         each stream also takes a slot with its decision and releases it when it ends (slots taken {taken}, \
         released {released}). `wrk -t1 -c{CONNECTIONS} -d{}s` on `{PATH}`, the three in turn, {rounds} rounds after a \
         warm-up each; Envoy CPU from /proc as in \"Proxy cost\". The rule charged {charges} streams {units} \
         units in all: {TOTAL_TOKENS} per completed stream, and the default {DEFAULT_COST} for the ~{} streams wrk \
         cut at the end of each run, reset before their usage came.\n\n{}\n\
         **Memory per open stream.** {streams} streams on `/v1/hold` (the upstream sends 10 events, then holds \
         the stream open), opened in {STEPS} steps, {} connections at a time, and held; after each step: Envoy's \
         heap in use (admin `/memory` `allocated`), the VMs' resident linear memory (/proc/<pid>/smaps: the \
         read-write mapping right below each 8 GiB reservation V8 makes) and Envoy's RSS. Bytes per stream: the \
         least-squares slope over the {} readings.\n\n{}\n\
         Reading: a token stream costs Envoy {:.2}× its CPU without the filter, and a concurrency limit {:.2}× \
         that again; each open stream costs the filter {} B of linear memory and Envoy {heap_extra} B more heap \
         than without the filter.\n\n\
         ![token streams](BENCHMARKS-tokens.png)\n",
        GAP.as_micros(),
        duration.as_secs(),
        cut_streams(charges, units),
        table(
            &["Envoy", "requests/s", "p50 µs", "Envoy CPU µs/request", "× no filter", "store calls/request", "non-2xx"],
            &rows
        ),
        stream_memory::OPENED_AT_ONCE,
        STEPS + 1,
        table(&["Envoy", "heap B/stream", "linear memory B/stream", "RSS B/stream", "streams failed"], &mem_rows),
        ratio.median,
        with_slots.median,
        show(linear),
    );
    Section { title: "Token streams".into(), body, figures, targets }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_charged_the_default_are_counted_back() {
        assert_eq!(cut_streams(677, 653 * TOTAL_TOKENS + 24 * DEFAULT_COST), 24);
        assert_eq!(cut_streams(10, 10 * TOTAL_TOKENS), 0);
    }
}
