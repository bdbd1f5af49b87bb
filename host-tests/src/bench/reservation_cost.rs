//! Section "Reservations and request bodies": what an LLM request costs
//! Envoy when its token budget is reserved at admission and settled after
//! the response, against today's check-then-charge, and what waiting for
//! the request body costs, in CPU per request against the same Envoy
//! without the filter. Every Envoy gets the same POST with a JSON body and
//! answers with the same OpenAI-style stream.

use std::time::Duration;

use serde_json::json;

use super::proc_cpu::cpu_seconds;
use super::report::{table, Section, Target};
use super::sse_upstream::{SseUpstream, TOTAL_TOKENS};
use super::stats::Summary;
use super::token_streams::streams_envoy;
use super::wrk::{self, WrkRun};
use crate::envoy::Envoy;
use crate::redis_server::RedisServer;
use crate::webdis::Webdis;

/// wrk connections.
const CONNECTIONS: u32 = 8;
const PATH: &str = "/v1/chat/completions";
/// What wrk posts: 64 output tokens stated, 73 bytes: 137 reserved.
const BODY: &str = r#"{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
/// The cost's `default`: what a request cut off before its usage pays.
const DEFAULT_COST: u64 = 1000;
/// What the reservation Envoy reserves per request: `max_tokens` and the body's bytes.
const RESERVED: u64 = 64 + BODY.len() as u64;

/// What the reservation Envoy's stats say of its settlements: every
/// admitted request settled, each answered one given back what its usage
/// left of the reservation, each cut off (by wrk's end) charged the default.
#[derive(Clone, Copy, Debug)]
struct Settled {
    allowed: u64,
    charges: u64,
    /// Settled without a usage: cut off before the last event.
    cut_off: u64,
    units: u64,
    charge_errors: u64,
}

impl Settled {
    /// Settled with a usage below the reservation, so with a refund.
    fn refunded(&self) -> u64 {
        self.charges.saturating_sub(self.cut_off)
    }

    /// Every admitted request settled, the store took every settlement,
    /// and the units are exactly the usage of the answered ones and the
    /// default of the cut-off ones (so each answered one was refunded).
    fn whole(&self) -> bool {
        self.charges == self.allowed
            && self.charge_errors == 0
            && self.units == TOTAL_TOKENS * self.refunded() + DEFAULT_COST * self.cut_off
    }
}

/// The rule of each Envoy with the filter: `key` and the cost's extra fields.
fn rule(key: &str, mode: &str) -> String {
    format!(
        r#"{{"domain":"bench","store":{{"transport":"webdis","cluster":"ratelimit_store","authority":"webdis","timeout_ms":1000}},
  "rules":[{{"name":"llm","match":{{"path_prefix":"/v1/"}},"key":{key},
  "cost":{{"response_body":"usage.total_tokens","default":{DEFAULT_COST},"max":200000,{mode}}},
  "limits":[{{"algorithm":"token_bucket","limit":1000000000,"window":"1h"}}]}}]}}"#
    )
}

/// The Envoys compared, and their rules (none: no filter).
fn variants() -> [(&'static str, Option<String>); 4] {
    let check = r#""reserve":1"#;
    [
        ("no filter", None),
        ("check-then-charge", Some(rule(r#"["client_ip"]"#, check))),
        ("check-then-charge, keyed on body:model", Some(rule(r#"["client_ip","body:model"]"#, check))),
        ("reserved and settled", Some(rule(r#"["client_ip"]"#, r#""reservation":{"default_output":4096}"#))),
    ]
}

fn start(rules: Option<&str>, upstream: u16, webdis: u16) -> Envoy {
    // The body reaches the filter while the headers wait.
    let stop_iteration = |config: String| {
        config.replacen(
            "failure_policy: FAIL_RELOAD",
            "failure_policy: FAIL_RELOAD\n                allow_on_headers_stop_iteration: true",
            1,
        )
    };
    streams_envoy(rules, upstream, webdis, stop_iteration)
}

/// One run: wrk, Envoy's CPU per request and store calls per request.
fn measure(envoy: &Envoy, script: &std::path::Path, duration: Duration) -> (WrkRun, f64, f64) {
    let calls = || envoy.stat("wasmcustom.ratelimit.store_calls");
    let (e0, c0) = (cpu_seconds(envoy.process.pid()), calls());
    let w = wrk::run_script(&format!("http://127.0.0.1:{}{PATH}", envoy.port), CONNECTIONS, duration, Some(script));
    let (e1, c1) = (cpu_seconds(envoy.process.pid()), calls());
    let n = w.requests.max(1) as f64;
    (w, (e1 - e0) * 1e6 / n, c1.saturating_sub(c0) as f64 / n)
}

/// `rounds` rounds, the Envoys in turn (the order turned each round).
pub fn run(rounds: usize, duration: Duration, warmup: Duration) -> Section {
    let redis = RedisServer::start();
    let webdis = Webdis::start(redis.port);
    let upstream = SseUpstream::start();
    let variants = variants();
    let envoys: Vec<Envoy> = variants.iter().map(|(_, r)| start(r.as_deref(), upstream.port, webdis.port)).collect();
    let script = std::env::temp_dir().join(format!("ratelimit-bench-post-{}.lua", std::process::id()));
    let lua =
        format!("wrk.method = \"POST\"\nwrk.body = '{BODY}'\nwrk.headers[\"Content-Type\"] = \"application/json\"\n");
    std::fs::write(&script, lua).unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    for e in &envoys {
        let _ = wrk::run_script(&format!("http://127.0.0.1:{}{PATH}", e.port), CONNECTIONS, warmup, Some(&script));
    }
    let mut runs: Vec<Vec<(WrkRun, f64, f64)>> = vec![Vec::new(); envoys.len()];
    for round in 0..rounds {
        for k in 0..envoys.len() {
            let i = if round % 2 == 0 { k } else { envoys.len() - 1 - k };
            let r = measure(&envoys[i], &script, duration);
            eprintln!("  reservation round {round} {}: {r:?}", variants[i].0);
            runs[i].push(r);
        }
    }
    let _ = std::fs::remove_file(&script);
    // The settlements of the last requests reach the store.
    std::thread::sleep(Duration::from_millis(500));
    let stat = |e: &str| envoys[3].stat(&format!("wasmcustom.ratelimit.llm.{e}"));
    let settled = Settled {
        allowed: stat("allowed"),
        charges: stat("charges"),
        cut_off: stat("usage_missing"),
        units: stat("charged_units"),
        charge_errors: stat("charge_errors"),
    };
    eprintln!("  reservation settlements: {settled:?}");
    section(&variants, &runs, rounds, duration, settled)
}

fn section(
    variants: &[(&'static str, Option<String>)],
    runs: &[Vec<(WrkRun, f64, f64)>],
    rounds: usize,
    duration: Duration,
    settled: Settled,
) -> Section {
    let cpu = |i: usize| runs[i].iter().map(|r| r.1).collect::<Vec<f64>>();
    let calls = |i: usize| Summary::of(&runs[i].iter().map(|r| r.2).collect::<Vec<_>>());
    let rows: Vec<Vec<String>> = (0..runs.len())
        .map(|i| {
            vec![
                variants[i].0.to_string(),
                Summary::of(&runs[i].iter().map(|r| r.0.rate).collect::<Vec<_>>()).show(0),
                Summary::of(&cpu(i)).show(1),
                if i == 0 { "1".into() } else { Summary::ratio(&cpu(i), &cpu(0)).show(2) },
                calls(i).show(2),
                runs[i].iter().map(|r| r.0.non_2xx).sum::<u64>().to_string(),
            ]
        })
        .collect();
    let body_wait = Summary::ratio(&cpu(2), &cpu(1));
    let reserved = Summary::ratio(&cpu(3), &cpu(1));
    let targets = vec![
        Target::new(
            "Envoy CPU per LLM request, reserved and settled ÷ check-then-charge",
            "report only",
            format!("{:.2}×", reserved.median),
            true,
            "both wait for nothing but the store; the reservation also waits for the body".into(),
        ),
        Target::new(
            "Envoy CPU per request, waiting for the request body ÷ not",
            "report only",
            format!("{:.2}×", body_wait.median),
            true,
            String::new(),
        ),
        Target::new(
            "LLM requests reserved and settled with a refund",
            "every admitted request settled; each answered one given back its unused reservation",
            format!("{} of {} ({} cut off by wrk's end)", settled.refunded(), settled.allowed, settled.cut_off),
            settled.whole(),
            if settled.whole() {
                String::new()
            } else {
                format!(
                    "{} settled of {} admitted, {} units, {} charge errors",
                    settled.charges, settled.allowed, settled.units, settled.charge_errors
                )
            },
        ),
    ];
    let figures = json!({
        "cpu": (0..runs.len()).map(|i| json!({"envoy": variants[i].0, "cpu_us": Summary::of(&cpu(i)).to_json()})).collect::<Vec<_>>(),
        "body_wait_ratio": body_wait.to_json(),
        "reserved_ratio": reserved.to_json(),
    });
    let body = format!(
        "Four Envoys 1.40 (`--concurrency 1`) rendered from `envoy-config/envoy.yaml` (route `timeout: 0s`, \
         `allow_on_headers_stop_iteration: true` where the filter runs) in front of the upstream of \"Token \
         streams\" ({TOTAL_TOKENS} tokens reported in the last event). wrk posts `{BODY}` \
         (`wrk -t1 -c{CONNECTIONS} -d{}s`, {rounds} rounds, the order turned each round, after a warm-up). The \
         rule `llm` counts tokens in a token bucket of 10^9 an hour: check-then-charge (`reserve` 1; keyed on the \
         client, or on the client and `body:model`, which makes the decision wait for the body), or reserved and \
         settled (`reservation`: 64 + {} = {RESERVED} reserved, {TOTAL_TOKENS} used, {} given back per request: the \
         reservation Envoy settled {} of {} admitted requests, {} of them with that refund and {} cut off by \
         wrk's end, which paid the default {DEFAULT_COST}; {} units charged in all, {} charge errors).\n\n{}\n\
         Reading: waiting for the body costs {:.2}× the CPU of a decision on the headers; a reservation that is \
         settled after the response costs {:.2}× today's check-then-charge (both make one decision and one \
         after-the-fact call per request; the reservation also waits for the body).\n",
        duration.as_secs(),
        BODY.len(),
        RESERVED - TOTAL_TOKENS,
        settled.charges,
        settled.allowed,
        settled.refunded(),
        settled.cut_off,
        settled.units,
        settled.charge_errors,
        table(&["Envoy", "requests/s", "Envoy CPU µs/request", "× no filter", "store calls/request", "non-2xx"], &rows),
        body_wait.median,
        reserved.median,
    );
    Section { title: "Reservations and request bodies".into(), body, figures, targets }
}
