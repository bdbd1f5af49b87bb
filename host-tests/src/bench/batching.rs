//! Section "Batching": what a decision costs and what a store call costs,
//! split from the allowed runs of the proxy sitting. Per request, a run
//! pays a + b/d above a request no rule matches, with d its decisions per
//! call: a per decision, b per call. Fitted per round over the runs that
//! differ only in d (least squares), for Envoy and for webdis + Redis.

use serde_json::{json, Value};

use super::envoy_variants::{Batching, Variant};
use super::fit::Line;
use super::proxy_sitting::{Run, Sitting, CONNECTIONS, MANY};
use super::report::{table, Section};
use super::stats::Summary;

/// What is fitted: Envoy's CPU or the store's, per request.
#[derive(Clone, Copy)]
enum Payer {
    Envoy,
    Store,
}

impl Payer {
    fn cpu(self, r: &Run) -> f64 {
        match self {
            Payer::Envoy => r.envoy_us,
            Payer::Store => r.store_us,
        }
    }
}

/// Per round, the points (1/d, CPU above the no-rule run) of `runs`.
fn points(payer: Payer, runs: &[&[Run]], base: &[Run]) -> Vec<Vec<(f64, f64)>> {
    (0..base.len())
        .map(|round| {
            runs.iter()
                .filter_map(|rs| rs.get(round))
                .filter(|r| r.decisions_per_call.is_finite() && r.decisions_per_call > 0.0)
                .map(|r| (1.0 / r.decisions_per_call, payer.cpu(r) - payer.cpu(&base[round])))
                .collect()
        })
        .collect()
}

/// The per-round fits of one set of runs, summarized.
struct Split {
    a: Summary,
    b: Summary,
    rms: Summary,
    rounds: usize,
}

fn split(rounds: &[Vec<(f64, f64)>]) -> Option<Split> {
    let fits: Vec<Line> = rounds.iter().filter_map(|p| Line::fit(p)).collect();
    if fits.is_empty() {
        return None;
    }
    let of = |f: fn(&Line) -> f64| Summary::of(&fits.iter().map(f).collect::<Vec<_>>());
    Some(Split { a: of(|l| l.a), b: of(|l| l.b), rms: of(|l| l.rms), rounds: fits.len() })
}

fn row(what: &str, s: &Option<Split>) -> Vec<String> {
    match s {
        Some(s) => vec![what.into(), s.a.show(2), s.b.show(2), s.rms.show(2), s.rounds.to_string()],
        None => vec![what.into(), "no fit (one d only)".into(), "–".into(), "–".into(), "0".into()],
    }
}

fn line_json(s: &Option<Split>) -> Value {
    s.as_ref().map_or(Value::Null, |s| json!({"a": s.a.median, "b": s.b.median}))
}

/// The section.
pub fn section(s: &Sitting) -> Section {
    let none: &[Run] = &[];
    let at = |v: Variant, ids: u32| s.of(v, ids, CONNECTIONS).unwrap_or(none);
    let base = at(Variant::NoRuleMatched, 1);
    let one: Vec<&[Run]> =
        [Batching::On, Batching::Small, Batching::Off].iter().map(|&b| at(Variant::Allowed(b), 1)).collect();
    let many: Vec<&[Run]> = [Batching::On, Batching::Off].iter().map(|&b| at(Variant::Allowed(b), MANY)).collect();
    let fits = [
        ("Envoy, 1 identity (3 runs)".to_string(), split(&points(Payer::Envoy, &one, base))),
        (format!("Envoy, {MANY} identities (2 runs)"), split(&points(Payer::Envoy, &many, base))),
        ("webdis + Redis, 1 identity (3 runs)".to_string(), split(&points(Payer::Store, &one, base))),
        (format!("webdis + Redis, {MANY} identities (2 runs)"), split(&points(Payer::Store, &many, base))),
    ];
    let rows: Vec<Vec<String>> = fits.iter().map(|(w, f)| row(w, f)).collect();
    let (no_filter, authz) = (at(Variant::NoFilter, 1), at(Variant::ExtAuthz, 1));
    let callout: Vec<f64> = authz.iter().zip(no_filter).map(|(a, n)| a.envoy_us - n.envoy_us).collect();
    let callout = Summary::of(&callout);
    let callee = Summary::of(&authz.iter().map(|r| r.callee_us).collect::<Vec<_>>());
    let d = |runs: &[Run]| Summary::of(&runs.iter().map(|r| r.decisions_per_call).collect::<Vec<_>>()).median;
    let mut figures = Vec::new();
    let named = [
        ("1 identity, on".to_string(), one[0]),
        ("1 identity, 8×32".to_string(), one[1]),
        ("1 identity, off".to_string(), one[2]),
        (format!("{MANY} identities, on"), many[0]),
        (format!("{MANY} identities, off"), many[1]),
    ];
    for (name, runs) in named {
        let pts = |payer: Payer| -> Vec<[f64; 2]> {
            runs.iter().zip(base).map(|(r, b)| [1.0 / r.decisions_per_call, payer.cpu(r) - payer.cpu(b)]).collect()
        };
        figures.push(json!({"case": name, "envoy": pts(Payer::Envoy), "store": pts(Payer::Store)}));
    }
    let envoy_one = &fits[0].1;
    let reading = match envoy_one {
        Some(f) => format!(
            "Reading: in Envoy a decision costs {:.1} µs and a store call {:.1} µs more, shared by the decisions it \
             carries; the native ext_authz callout costs Envoy {:.1} µs per request (and its callee {:.1} µs). \
             Batching on carried {:.1} decisions per call with 1 identity and {:.1} with {MANY}.",
            f.a.median,
            f.b.median,
            callout.median,
            callee.median,
            d(one[0]),
            d(many[0])
        ),
        None => "Reading: no fit (the runs did not differ in decisions per call).".into(),
    };
    let body = format!(
        "From the proxy sitting's allowed runs at {CONNECTIONS} connections: y = CPU per request minus that of the \
         no-rule-matched run of the same round, x = 1/d with d = decisions per store call (the module's \
         `wasmcustom.ratelimit.store_decisions ÷ wasmcustom.ratelimit.store_calls` over the run, from Envoy's admin \
         /stats), fitted as y = a + b·x by least squares per round: a is the cost per decision, b per call. One \
         identity: the three runs (batching on, 8 in flight × 32, off), with the fit's residual; {MANY} \
         identities: the two runs (on, off), a line through two points. webdis + Redis: the same with their CPU \
         (the no-rule run's, nearly nothing, subtracted likewise). Median (min–max) over rounds.\n\n{}\n\
         For comparison, the native callout: Envoy with ext_authz minus Envoy without filters, {} µs per request \
         (the authorization server's own CPU, the callee: {} µs).\n\n{reading}\n\n\
         ![batching](BENCHMARKS-batching.png)\n",
        table(&["fit", "per decision a (µs)", "per call b (µs)", "fit residual rms (µs)", "rounds fitted"], &rows),
        callout.show(1),
        callee.show(1),
    );
    let figures = json!({"runs": figures, "envoy": line_json(&fits[0].1), "envoy_many": line_json(&fits[1].1),
        "store": line_json(&fits[2].1), "store_many": line_json(&fits[3].1), "callout_us": callout.median});
    Section { title: "Batching".into(), body, figures, targets: Vec::new() }
}
