//! The module's own work per request, counted in the wasmtime host (the
//! one the wasm_host tests run, with a real Redis behind webdis): wasm
//! instructions (wasmtime's fuel, about one a wasm instruction, callbacks
//! and the memory the host asks the module for included) and hostcalls
//! (`proxy_*` imports) per request, for the kinds of request the proxy
//! sitting times in Envoy. The same from run to run, where Envoy's CPU per
//! request varies by ±20% here: what a change of the request path costs the
//! module can be weighed exactly. It is not Envoy's time: in Envoy, a
//! hostcall costs far more than a wasm instruction (V8 crosses into C++,
//! and a read copies into memory the module allocates).

use std::collections::BTreeMap;

use serde_json::json;

use super::envoy_variants::{Batching, Variant};
use super::report::{table, Section};
use crate::prng::Rng;
use crate::redis_server::RedisServer;
use crate::wasm_host::{Artifact, Host, Request};
use crate::webdis::{with_credential, Webdis};

/// The store cluster the proxy sitting's plugin configurations name.
const STORE_CLUSTER: &str = "ratelimit_store";
/// Requests counted per case, after its warm-up.
const COUNTED: u64 = 2_000;
/// Requests before counting: a leased client hot and leased by then.
const WARM_UP: u64 = 500;
/// Requests per simulated millisecond (the clock is the host's own).
const PER_MS: u64 = 10;

/// Identities of the skewed cases, and the Zipf exponent (the proxy
/// sitting's skewed case).
const ZIPF_IDENTITIES: usize = 10_000;
const ZIPF_S: f64 = 1.1;
/// The skewed cases run longer: leases live `max_age` (1 s, 10,000
/// requests here), so warm-up and count each span two of them.
const ZIPF_WARM_UP: u64 = 20_000;
const ZIPF_COUNTED: u64 = 20_000;

/// Whose requests a case sends.
#[derive(Clone, Copy)]
enum Clients {
    /// `key-1` only.
    One,
    /// `key-<i>`, i drawn from Zipf(ZIPF_S) over ZIPF_IDENTITIES (seeded:
    /// the same sequence every run).
    Zipf,
}

/// One kind of request: a variant of the proxy sitting (its plugin
/// configuration, so both measure the same rules).
struct Case {
    name: &'static str,
    variant: Variant,
    /// Workers (VMs) of the proxy; requests go to them in turn.
    workers: usize,
    clients: Clients,
    /// What every counted request must be answered.
    status: u32,
}

const CASES: [Case; 7] = [
    Case { name: "no rule matched", variant: Variant::NoRuleMatched, workers: 1, clients: Clients::One, status: 200 },
    Case {
        name: "allowed, 1 identity, leases off (a store call each)",
        variant: Variant::Allowed(Batching::On),
        workers: 1,
        clients: Clients::One,
        status: 200,
    },
    Case {
        name: "allowed, 1 identity, leases on",
        variant: Variant::Leased,
        workers: 1,
        clients: Clients::One,
        status: 200,
    },
    Case {
        name: "allowed, 1 identity, leases on, 2 workers in turn",
        variant: Variant::Leased,
        workers: 2,
        clients: Clients::One,
        status: 200,
    },
    Case {
        name: "allowed, Zipf(1.1) over 10,000 identities, leases off",
        variant: Variant::Allowed(Batching::On),
        workers: 1,
        clients: Clients::Zipf,
        status: 200,
    },
    Case {
        name: "allowed, Zipf(1.1) over 10,000 identities, leases on",
        variant: Variant::Leased,
        workers: 1,
        clients: Clients::Zipf,
        status: 200,
    },
    Case {
        name: "denied (deny-cache hit)",
        variant: Variant::DenyCacheHit,
        workers: 1,
        clients: Clients::One,
        status: 429,
    },
];

/// Draws identities from Zipf(ZIPF_S) over 1..=ZIPF_IDENTITIES by
/// inverting its cumulative distribution.
struct Zipf {
    cdf: Vec<f64>,
    rng: Rng,
}

impl Zipf {
    fn new() -> Zipf {
        let weights: Vec<f64> = (1..=ZIPF_IDENTITIES).map(|i| 1.0 / (i as f64).powf(ZIPF_S)).collect();
        let total: f64 = weights.iter().sum();
        let cdf = weights
            .iter()
            .scan(0.0, |sum, w| {
                *sum += w / total;
                Some(*sum)
            })
            .collect();
        Zipf { cdf, rng: Rng::new(42) }
    }

    /// The next identity, 1-based.
    fn next(&mut self) -> usize {
        let u = self.rng.uniform();
        self.cdf.partition_point(|&c| c < u).min(ZIPF_IDENTITIES - 1) + 1
    }
}

/// What one case counted, per request.
struct Work {
    instructions: f64,
    hostcalls: BTreeMap<String, f64>,
}

fn count(case: &Case, webdis: &Webdis) -> Work {
    let plugin = case.variant.plugin_config().unwrap_or_else(|| panic!("{}: not a filter variant", case.name));
    let config = with_credential(&plugin);
    let mut host =
        Host::builder(Artifact::Webdis, &config).vms(case.workers).http_cluster(STORE_CLUSTER, webdis.port).start();
    assert!(host.configured(0), "{}: the configuration was refused", case.name);
    let mut zipf = Zipf::new();
    let mut request = || {
        let key = match case.clients {
            Clients::One => 1,
            Clients::Zipf => zipf.next(),
        };
        Request::get("/api/x").header("x-api-key", &format!("key-{key}"))
    };
    let (warm_up, counted) = match case.clients {
        Clients::One => (WARM_UP, COUNTED),
        Clients::Zipf => (ZIPF_WARM_UP, ZIPF_COUNTED),
    };
    let mut i = 0u64;
    let mut send = |host: &mut Host| {
        let r = host.send((i % case.workers as u64) as usize, request());
        i += 1;
        if i.is_multiple_of(PER_MS) {
            host.advance(1);
        }
        r.status
    };
    for _ in 0..warm_up {
        send(&mut host);
    }
    let names = host.hostcalls();
    let calls = |host: &Host| names.iter().map(|n| host.hostcall_count(n).calls).collect::<Vec<u64>>();
    let instructions = |host: &Host| (0..case.workers).map(|vm| host.instructions(vm)).sum::<u64>();
    let (calls_before, instructions_before) = (calls(&host), instructions(&host));
    for _ in 0..counted {
        let status = send(&mut host);
        assert_eq!(status, case.status, "{}", case.name);
    }
    let n = counted as f64;
    let hostcalls = names
        .iter()
        .zip(calls(&host).iter().zip(&calls_before))
        .filter(|(_, (after, before))| after > before)
        .map(|(name, (after, before))| (name.clone(), (after - before) as f64 / n))
        .collect();
    Work { instructions: (instructions(&host) - instructions_before) as f64 / n, hostcalls }
}

/// Counts every case; the section.
pub fn run() -> Section {
    let redis = RedisServer::start();
    crate::script::load(&mut redis.connect(), ratelimit::script::SCRIPT);
    let webdis = Webdis::start(redis.port);
    let mut rows = Vec::new();
    let mut figures = Vec::new();
    for case in &CASES {
        let work = count(case, &webdis);
        let total: f64 = work.hostcalls.values().sum();
        let which = work
            .hostcalls
            .iter()
            .map(|(name, per)| {
                let per = if *per >= 0.1 { format!("{per:.2}") } else { format!("{per:.3}") };
                format!("{} {per}", name.trim_start_matches("proxy_"))
            })
            .collect::<Vec<_>>()
            .join(", ");
        eprintln!(
            "  module work: {}: {:.0} instructions, {total:.2} hostcalls ({which})",
            case.name, work.instructions
        );
        rows.push(vec![case.name.to_string(), format!("{:.0}", work.instructions), format!("{total:.2}"), which]);
        figures.push(json!({"case": case.name, "instructions": work.instructions, "hostcalls": work.hostcalls}));
    }
    let body = format!(
        "The module's own work per request in the wasmtime host of the wasm_host tests (`dist/ratelimit.wasm`, a real \
         Redis behind webdis, the host's clock moving 1 ms every {PER_MS} requests): wasm instructions (wasmtime's \
         fuel: about one per wasm instruction, in every callback of the request and in the memory the host asks the \
         module for) and `proxy_*` hostcalls, per request, over {COUNTED} requests after {WARM_UP} of warm-up \
         ({ZIPF_COUNTED} after {ZIPF_WARM_UP} for the Zipf mixes, the same seeded sequence of identities in both); \
         the proxy sitting's plugin configurations; requests to the workers in turn, one at a time (so a store call \
         carries one decision: no batching here). The same from run to run, where Envoy's CPU per \
         request varies by ±20% on this machine: the measure to weigh a change of the request path by \
         (`BENCH_ONLY=module`, seconds). It is not Envoy's time: there a hostcall costs far more than an \
         instruction (V8 calls into C++; a read copies into memory the module allocates).\n\n{}",
        table(&["request", "wasm instructions", "hostcalls", "which (per request)"], &rows)
    );
    Section { title: "Module work per request".into(), body, figures: json!(figures), targets: Vec::new() }
}
