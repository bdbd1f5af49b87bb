//! Section 1: what the filter costs the proxy, from the proxy sitting
//! (`proxy_sitting`): CPU per request of every case at 32 connections
//! against Envoy without the filter, and latency at 1 connection with
//! batching on and off.

use serde_json::json;

use super::envoy_variants::{Batching, Variant};
use super::proxy_sitting::{Run, Sitting, CONNECTIONS, MANY};
use super::report::{table, Section, Target};
use super::stats::Summary;

/// A column of runs.
fn col(runs: &[Run], f: impl Fn(&Run) -> f64) -> Vec<f64> {
    runs.iter().map(f).collect()
}

/// Median of a column.
fn median(runs: &[Run], f: impl Fn(&Run) -> f64) -> f64 {
    Summary::of(&col(runs, f)).median
}

/// The section.
pub fn section(s: &Sitting) -> Section {
    let none: &[Run] = &[];
    let at32 = |v: Variant, ids: u32| s.of(v, ids, CONNECTIONS).unwrap_or(none);
    let base = at32(Variant::NoFilter, 1);
    let (base_cpu, base_rate) = (col(base, |r| r.envoy_us), col(base, |r| r.wrk.rate));
    let mut rows = Vec::new();
    let mut figures = Vec::new();
    for (case, runs) in s.cases.iter().zip(&s.runs).filter(|(c, _)| c.connections == CONNECTIONS) {
        let cpu = Summary::of(&col(runs, |r| r.envoy_us));
        let cpu_ratio = Summary::ratio(&col(runs, |r| r.envoy_us), &base_cpu);
        let rate = Summary::of(&col(runs, |r| r.wrk.rate));
        let non_2xx: u64 = runs.iter().map(|r| r.wrk.non_2xx).sum();
        let requests: u64 = runs.iter().map(|r| r.wrk.requests).sum();
        let per_call = col(runs, |r| r.decisions_per_call);
        let callee = Summary::of(&col(runs, |r| r.callee_us));
        rows.push(vec![
            case.name(),
            rate.show(0),
            Summary::ratio(&col(runs, |r| r.wrk.rate), &base_rate).show(2),
            Summary::of(&col(runs, |r| r.wrk.p50_us)).show(0),
            Summary::of(&col(runs, |r| r.wrk.p99_us)).show(0),
            cpu.show(1),
            cpu_ratio.show(2),
            Summary::of(&col(runs, |r| r.store_us)).show(1),
            if case.variant == Variant::ExtAuthz { callee.show(1) } else { "–".into() },
            format!("{:.3}", median(runs, |r| r.store_calls)),
            if per_call.iter().all(|d| d.is_finite()) { Summary::of(&per_call).show(1) } else { "–".into() },
            format!("{:.1}%", 100.0 * non_2xx as f64 / requests.max(1) as f64),
        ]);
        figures.push(json!({"variant": case.name(), "rate": rate.to_json(), "cpu_us": cpu.to_json(),
            "cpu_ratio": cpu_ratio.to_json()}));
    }
    let ratio = |runs: &[Run]| Summary::ratio(&col(runs, |r| r.envoy_us), &base_cpu);
    let target = |runs: &[Run], cap: f64, what: &str, why: String| {
        let r = ratio(runs);
        let met = r.median <= cap;
        Target::new(
            &format!("Envoy CPU per request, {what}"),
            &format!("≤ {cap}× no filter"),
            format!("{:.2}×", r.median),
            met,
            if met { String::new() } else { why },
        )
    };
    let cpu_of = |runs: &[Run]| median(runs, |r| r.envoy_us);
    let (none_rule, deny) = (at32(Variant::NoRuleMatched, 1), at32(Variant::DenyCacheHit, 1));
    let (on1, onm) = (at32(Variant::Allowed(Batching::On), 1), at32(Variant::Allowed(Batching::On), MANY));
    let (b, n) = (cpu_of(base), cpu_of(none_rule));
    let allow_why = |runs: &[Run]| {
        format!(
            "{:.1} µs vs {b:.1} µs: +{:.1} µs beyond a request no rule matches, for the decision (identity, deny-cache \
             lookup, its share of a batched call to webdis and of its reply, response headers)",
            cpu_of(runs),
            cpu_of(runs) - n
        )
    };
    let mut targets = vec![
        target(
            none_rule,
            1.25,
            "no rule matched",
            format!("{n:.1} µs vs {b:.1} µs: +{:.1} µs per request for hosting the filter in V8 and matching", n - b),
        ),
        target(
            deny,
            0.7,
            "deny-cache hit",
            format!(
                "{:.1} µs vs {b:.1} µs: the 429 saves the upstream hop but pays the filter ({:+.1} µs when no rule \
                 matches) and a local reply",
                cpu_of(deny),
                n - b
            ),
        ),
        target(on1, 2.0, "allowed, 1 identity, batching on", allow_why(on1)),
        target(onm, 2.0, &format!("allowed, {MANY} identities, batching on"), allow_why(onm)),
    ];
    let (latency, latency_target) = latency(s);
    targets.push(latency_target);
    targets.extend(lease_targets(s, &base_cpu));
    let c = &s.checks;
    let store_on = median(on1, |r| r.store_us);
    let body = format!(
        "Ten Envoys 1.40 (`--concurrency 1`), one per variant plus the authorization server, all but that one \
         rendered from `envoy-config/envoy.yaml`, share one upstream (in the bench process), webdis and Redis; \
         `wrk -t1 -c{CONNECTIONS} -d{}s --latency` with a Lua script setting `x-api-key: key-<i>` (i fixed at 1, or \
         round robin over 1..{MANY}) loads one at a time, every case in turn, {} rounds (after one warm-up run per \
         Envoy). Envoy CPU: utime+stime of the Envoy process (/proc/<pid>/stat) over the run ÷ requests; store CPU: \
         the same for webdis + Redis; callee CPU: the same for the authorization server; store calls: EVALSHA at \
         Redis ÷ requests; decisions per call: the module's `store_decisions ÷ store_calls` over the run. Ratios are \
         to the no-filter run of the same round. Median (min–max).\n\n\
         The allowed variants have one rule keyed by `header:x-api-key`, one sliding_window limit of 100,000,000 \
         per hour (never reached) and a store timeout of 1000 ms, so that calls do not time out on this shared \
         machine ({} store errors counted); they differ in `store.batch` only: the default (2 calls in flight, 32 \
         decisions a call), `{{\"max_in_flight\":8,\"max_decisions\":32}}`, and off \
         (`{{\"max_in_flight\":1024,\"max_decisions\":1}}`). The other filter variants key by client address. \
         The fallback variant's store address has no listener ({} requests admitted by the fallback bucket); the \
         native local_ratelimit counted {} requests ok and {} rate limited; ext_authz (`http_service`, \
         `failure_mode_allow: false`) calls a separate Envoy whose route answers 200 with `direct_response` ({} \
         requests authorized), so the measured Envoy pays only the calling side, as it does for our calls to \
         webdis.\n\n{}\n\
         Reading: Envoy pays {:.2}× its baseline CPU per request when no rule matches, {:.2}× on the allow path \
         with batching on (1 identity; {:.2}× with {MANY}), {:.2}× with batching off, and {:.2}× when the deny \
         cache answers (no upstream hop); native ext_authz, one HTTP callout per request, costs {:.2}×.\nRequests \
         per second depend on the shared cores as much as on Envoy: on the allow path webdis and Redis spend \
         {store_on:.1} µs of CPU per request next to Envoy's {:.1} µs, on the same two cores as wrk and the \
         upstream.\n\n![proxy cost](BENCHMARKS-proxy.png)\n\n{latency}",
        s.long.as_secs(),
        s.rounds,
        c.allowed_errors,
        c.fallback_allowed,
        c.native_ok,
        c.native_limited,
        c.authz_ok,
        table(
            &[
                "case",
                "requests/s",
                "× no filter",
                "p50 µs",
                "p99 µs",
                "Envoy CPU µs/request",
                "× no filter",
                "store CPU µs/request",
                "callee CPU µs/request",
                "store calls/request",
                "decisions/call",
                "non-2xx"
            ],
            &rows
        ),
        ratio(none_rule).median,
        ratio(on1).median,
        ratio(onm).median,
        ratio(at32(Variant::Allowed(Batching::Off), 1)).median,
        ratio(deny).median,
        ratio(at32(Variant::ExtAuthz, 1)).median,
        cpu_of(on1),
    );
    Section { title: "Proxy cost".into(), body, figures: json!(figures), targets }
}

/// Issue 19's targets for leases, from the same sitting: a hot identity
/// decided in the proxy at 32 connections (CPU and store calls), its p50 at
/// 1 connection against a request no rule matches, and 1,000 identities
/// round robin no worse than without leases.
fn lease_targets(s: &Sitting, base_cpu: &[f64]) -> Vec<Target> {
    let none: &[Run] = &[];
    let at = |v: Variant, ids: u32, conns: u32| s.of(v, ids, conns).unwrap_or(none);
    let ratio = |runs: &[Run]| Summary::ratio(&col(runs, |r| r.envoy_us), base_cpu).median;
    let hot = at(Variant::Leased, 1, CONNECTIONS);
    let (hot_cpu, hot_calls) = (ratio(hot), median(hot, |r| r.store_calls));
    let many = at(Variant::Leased, MANY, CONNECTIONS);
    let (many_cpu, many_off) = (ratio(many), ratio(at(Variant::Allowed(Batching::On), MANY, CONNECTIONS)));
    let (leased1, rule1) = (at(Variant::Leased, 1, 1), at(Variant::NoRuleMatched, 1, 1));
    let p50 = Summary::ratio(&col(leased1, |r| r.wrk.p50_us), &col(rule1, |r| r.wrk.p50_us)).median;
    let t = |name: &str, goal: &str, got: String, met: bool| Target::new(name, goal, got, met, String::new());
    vec![
        t(
            "Envoy CPU per request, hot identity with leases",
            "≤ 1.45× no filter",
            format!("{hot_cpu:.2}×"),
            hot_cpu <= 1.45,
        ),
        t("store calls per request, hot identity with leases", "≤ 0.05", format!("{hot_calls:.3}"), hot_calls <= 0.05),
        t(
            "latency at 1 connection, hot identity with leases",
            "p50 ≤ 1.15× no rule matched",
            format!("{p50:.2}×"),
            p50 <= 1.15,
        ),
        t(
            &format!("Envoy CPU per request, {MANY} identities round robin, leases on"),
            "≤ 1.6× no filter and no worse than leases off",
            format!("{many_cpu:.2}× (leases off {many_off:.2}×)"),
            many_cpu <= 1.6 && many_cpu <= many_off * 1.05,
        ),
    ]
}

/// The latency part: one connection, one request at a time, so batching
/// can only add waiting, never share a call.
fn latency(s: &Sitting) -> (String, Target) {
    let none: &[Run] = &[];
    let at1 = |v: Variant| s.of(v, 1, 1).unwrap_or(none);
    let (base, on, off) =
        (at1(Variant::NoFilter), at1(Variant::Allowed(Batching::On)), at1(Variant::Allowed(Batching::Off)));
    let rows: Vec<Vec<String>> = [
        ("no filter", base),
        ("filter, no rule matched", at1(Variant::NoRuleMatched)),
        ("filter, 1 identity, batching on", on),
        ("filter, 1 identity, batching off", off),
        ("filter, 1 identity, leases on", at1(Variant::Leased)),
    ]
    .iter()
    .map(|(name, runs)| {
        vec![
            name.to_string(),
            Summary::of(&col(runs, |r| r.wrk.rate)).show(0),
            Summary::of(&col(runs, |r| r.wrk.p50_us)).show(0),
            Summary::of(&col(runs, |r| r.wrk.p99_us)).show(0),
            Summary::of(&col(runs, |r| r.envoy_us)).show(1),
        ]
    })
    .collect();
    let p50 = Summary::ratio(&col(on, |r| r.wrk.p50_us), &col(off, |r| r.wrk.p50_us));
    let p99 = Summary::ratio(&col(on, |r| r.wrk.p99_us), &col(off, |r| r.wrk.p99_us));
    let met = p50.median <= 1.10;
    let target = Target::new(
        "latency at 1 connection, batching on ÷ off",
        "p50 ≤ 1.10×",
        format!("p50 {:.2}×, p99 {:.2}×", p50.median, p99.median),
        met,
        if met {
            String::new()
        } else {
            format!(
                "p50 {:.0} µs with batching on vs {:.0} µs off",
                median(on, |r| r.wrk.p50_us),
                median(off, |r| r.wrk.p50_us)
            )
        },
    );
    let text = format!(
        "**Latency at 1 connection** (`wrk -t1 -c1 -d{}s --latency`, same Envoys, same rounds): one request at a \
         time, so a decision never finds a call in flight and goes alone at once with batching on as with it \
         off.\n\n{}\nOn ÷ off, per round: p50 {}, p99 {}.\n",
        s.short.as_secs(),
        table(&["case", "requests/s", "p50 µs", "p99 µs", "Envoy CPU µs/request"], &rows),
        p50.show(2),
        p99.show(2),
    );
    (text, target)
}
