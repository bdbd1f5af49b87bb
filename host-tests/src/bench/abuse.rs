//! Section 3: one client sending 100 times its limit within one window,
//! spread over two Envoys of two workers each: how many of its requests
//! reach the store, with the deny cache and without it.

use serde_json::json;

use super::http_load::{send_many, Tally};
use super::report::{table, Section, Target};
use super::stats::Summary;
use crate::backend::Backend;
use crate::envoy::{start_from_template, Envoy};
use crate::redis_server::RedisServer;
use crate::stack::command_calls;
use crate::webdis::Webdis;

/// The client's limit per window.
pub const LIMIT: u64 = 100;
/// Envoys sharing the store.
pub const PROXIES: u64 = 2;
/// Workers per Envoy.
pub const WORKERS: u64 = 2;
/// Client connections per Envoy: one per worker, and a more aggressive client.
pub const CONNECTIONS: [u64; 2] = [2, 16];

fn plugin_config(deny_cache: bool) -> String {
    format!(
        r#"{{"domain":"abuse","store":{{"transport":"webdis","cluster":"ratelimit_store","authority":"webdis",
            "timeout_ms":1000}},"deny_cache":{{"enabled":{deny_cache}}},"rules":[{{"name":"api",
            "key":["header:x-client"],"limits":[{{"algorithm":"sliding_window","limit":{LIMIT},"window":"1h"}}]}}]}}"#
    )
}

/// One run's outcome.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    /// What the client got back.
    pub tally: Tally,
    /// EVALSHA calls Redis ran.
    pub store_calls: u64,
}

/// `rounds` rounds of: for each client concurrency, deny cache on, then off.
pub fn run(rounds: usize) -> Section {
    let redis = RedisServer::start();
    let webdis = Webdis::start(redis.port);
    let backend = Backend::start();
    // Loaded up front, so no NOSCRIPT retry is counted as a store call.
    let _ = crate::script::load(&mut redis.connect(), ratelimit::script::SCRIPT);
    let start = |deny_cache: bool| -> Vec<Envoy> {
        (0..PROXIES)
            .map(|_| {
                start_from_template(backend.port, webdis.port, Some(&plugin_config(deny_cache)), WORKERS as u32)
                    .unwrap_or_else(|e| panic!("{}", e.log))
            })
            .collect()
    };
    let fleets = [start(true), start(false)];
    // runs[concurrency][deny cache on/off]
    let mut runs = vec![vec![Vec::new(); 2]; CONNECTIONS.len()];
    for round in 0..rounds {
        for (c, &connections) in CONNECTIONS.iter().enumerate() {
            for (m, fleet) in fleets.iter().enumerate() {
                let client = format!("abuser-{round}-{c}-{m}");
                let before = command_calls(&redis, "evalsha");
                let tally = std::thread::scope(|s| {
                    let handles: Vec<_> = fleet
                        .iter()
                        .map(|e| {
                            let client = client.as_str();
                            s.spawn(move || send_many(e.port, client, connections, 100 * LIMIT / PROXIES))
                        })
                        .collect();
                    handles.into_iter().map(|h| h.join().unwrap()).fold(Tally::default(), |a, t| Tally {
                        ok: a.ok + t.ok,
                        denied: a.denied + t.denied,
                        other: a.other + t.other,
                    })
                });
                let r = Run { tally, store_calls: command_calls(&redis, "evalsha") - before };
                eprintln!("  abuse round {round} connections {connections}/proxy deny_cache={}: {r:?}", m == 0);
                runs[c][m].push(r);
            }
        }
    }
    section(&runs, rounds)
}

fn section(runs: &[Vec<Vec<Run>>], rounds: usize) -> Section {
    let bound = LIMIT + WORKERS * PROXIES;
    let mut rows = Vec::new();
    let mut targets = Vec::new();
    let mut figures = Vec::new();
    for (c, &connections) in CONNECTIONS.iter().enumerate() {
        let calls = |m: usize| runs[c][m].iter().map(|r| r.store_calls as f64).collect::<Vec<_>>();
        let reduction = Summary::ratio(&calls(1), &calls(0));
        for (m, name) in ["on", "off"].into_iter().enumerate() {
            let rs = &runs[c][m];
            let col = |f: &dyn Fn(&Run) -> f64| Summary::of(&rs.iter().map(f).collect::<Vec<_>>());
            let requests = col(&|r| r.tally.total() as f64);
            let store = col(&|r| r.store_calls as f64);
            rows.push(vec![
                format!("{connections} per Envoy ({} in all)", connections * PROXIES),
                name.to_string(),
                requests.show(0),
                col(&|r| r.tally.ok as f64).show(0),
                col(&|r| r.tally.denied as f64).show(0),
                store.show(0),
                if m == 0 { reduction.show(1) } else { "1".into() },
            ]);
            figures
                .push(json!({"connections": connections, "deny_cache": name == "on", "requests": requests.to_json(),
                "store_calls": store.to_json(), "bound": bound}));
        }
        let worst = runs[c][0].iter().map(|r| r.store_calls).max().unwrap_or(0);
        targets.push(Target::new(
            &format!("abuse: store calls of 100 × L requests, {connections} connections per Envoy"),
            &format!("≤ L + workers × proxies = {bound}"),
            format!("at most {worst} in {rounds} rounds"),
            worst <= bound,
            if worst <= bound {
                String::new()
            } else {
                format!(
                    "requests already in flight to the store when the first denial is cached also reach it: up to \
                     one per connection ({} in all), not one per worker",
                    connections * PROXIES
                )
            },
        ));
    }
    let on: Vec<f64> = runs.iter().flat_map(|r| r[0].iter().map(|x| x.store_calls as f64)).collect();
    let off: Vec<f64> = runs.iter().flat_map(|r| r[1].iter().map(|x| x.store_calls as f64)).collect();
    let admitted: Vec<u64> = runs.iter().flatten().flatten().map(|r| r.tally.ok).collect();
    let exact = admitted.iter().all(|&a| a == LIMIT);
    let beyond: Vec<String> = CONNECTIONS
        .iter()
        .enumerate()
        .map(|(c, &n)| {
            let most = runs[c][0].iter().map(|r| r.store_calls.saturating_sub(LIMIT)).max().unwrap_or(0);
            format!("at most {most} with {} connections", n * PROXIES)
        })
        .collect();
    let body = format!(
        "Two Envoys ({WORKERS} workers each) share webdis and Redis; one client (`x-client` header, a new one per \
         run) sends {} requests, half to each Envoy, against a sliding_window limit of L = {LIMIT} per hour; \
         store calls are EVALSHA counted at Redis (INFO commandstats; the script was loaded beforehand). The \
         deny cache on and off alternate, {rounds} rounds. Median (min–max).\n\n{}\n\
         Reading: with the deny cache, {:.0}–{:.0} store calls serve {} requests ({}); without it every request \
         costs a call ({:.0}).\nThe calls beyond L ({}) stay below the client's connection count: they are the \
         requests already on their way to the store when the first denial is cached.\n\n\
         ![abuse](BENCHMARKS-abuse.png)\n",
        100 * LIMIT,
        table(
            &[
                "client connections",
                "deny cache",
                "requests",
                "admitted",
                "denied (429)",
                "store calls",
                "× fewer calls than without"
            ],
            &rows
        ),
        on.iter().copied().fold(f64::MAX, f64::min),
        on.iter().copied().fold(0.0, f64::max),
        100 * LIMIT,
        if exact { "exactly L admitted in every run".to_string() } else { format!("admitted: {admitted:?}") },
        Summary::of(&off).median,
        beyond.join(", "),
    );
    Section { title: "Abuse: the deny cache".into(), body, figures: json!(figures), targets }
}
