//! The simulated configuration: its rules, each there for some invariants
//! (`invariants`), in two versions. Version 1 is the one the first saved
//! regressions ran on (limits of an hour, the store on its own clock);
//! version 2 has limits of seconds to minutes, so that a schedule sees
//! windows roll over, buckets refill and slots expire, and adds the
//! default algorithm, limits without leases, costs read from response
//! bodies, reservations sized by the request body and a fail-open rate.
//! A rule keeps its index across versions (regressions name rules by it).

use ratelimit::config::Config;
use ratelimit::spec::LimitSpec;

use crate::world::Kind as Build;

/// What a rule is there for: how its requests are made and counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Rate limits decided in the store, one unit a request, fail closed:
    /// every decision compared with the model, the `exact.*` bounds.
    Rate,
    /// Rate limits with leases (decided in the proxy between asks): their
    /// `exact.*_leased` bounds only.
    Leased,
    /// `cc`: concurrency, fail closed.
    Slots,
    /// `co`: concurrency, fail open (`concurrency.after_outage`).
    SlotsOpen,
    /// `ccx`: a `cc` slot and a fixed window of its own (another identity).
    SlotAndWindow,
    /// `tk`: a budget charged from a response header after the response.
    ChargedHeader,
    /// `tkb`: a budget charged from the response body (JSON or events).
    ChargedBody,
    /// `rv`: a window reserved from a fixed body, settled from a header.
    Reserved,
    /// `rvt`: a token bucket reserved from the body's `max_tokens`,
    /// settled from the response body.
    ReservedBody,
    /// `fo`: a rate that fails open (`fallback.share`).
    FailOpen,
}

/// One rule of the configuration.
#[derive(Clone, Debug)]
pub struct Rule {
    pub name: &'static str,
    pub kind: Kind,
    /// Its limits as the script takes them (from the parsed configuration).
    pub specs: Vec<LimitSpec>,
    /// Its limits' fingerprints (deny cache, fallback entries).
    pub fingerprints: Vec<u64>,
    /// Its cost's `default` (charged for a hang-up before the response).
    pub default_cost: u64,
}

/// Every rule, by index.
#[derive(Clone, Debug)]
pub struct Rules {
    pub version: u32,
    pub list: Vec<Rule>,
    /// The plugin configuration they were read from.
    pub json: String,
    /// Slots of each shared-data table.
    pub slots: usize,
}

/// The store's call timeout (ms).
pub const TIMEOUT_MS: u64 = 25;

const V1: [(&str, Kind, &str); 9] = [
    ("fw", Kind::Rate, r#""failure_mode":"closed","limits":[{"algorithm":"fixed_window","limit":20,"window":"1h"}]"#),
    (
        "tb",
        Kind::Leased,
        r#""failure_mode":"closed","lease":{"max_units":8,"max_age":"2s"},"limits":[{"algorithm":"token_bucket","limit":20,"window":"1h","burst":20}]"#,
    ),
    ("cc", Kind::Slots, r#""failure_mode":"closed","limits":[{"algorithm":"concurrency","limit":3,"max_hold":"60s"}]"#),
    (
        "co",
        Kind::SlotsOpen,
        r#""failure_mode":"open","limits":[{"algorithm":"concurrency","limit":2,"max_hold":"60s"}]"#,
    ),
    ("sl", Kind::Rate, r#""failure_mode":"closed","limits":[{"algorithm":"sliding_log","limit":20,"window":"1h"}]"#),
    (
        "gc",
        Kind::Leased,
        r#""failure_mode":"closed","lease":{"max_units":8,"max_age":"2s"},"limits":[{"algorithm":"gcra","limit":20,"window":"1h","burst":20}]"#,
    ),
    (
        "tk",
        Kind::ChargedHeader,
        r#""failure_mode":"closed","cost":{"response_header":"x-usage","default":7,"max":1000},"limits":[{"algorithm":"fixed_window","limit":1000000000,"window":"1h"}]"#,
    ),
    (
        "ccx",
        Kind::SlotAndWindow,
        r#""failure_mode":"closed","limits":[{"algorithm":"fixed_window","limit":4,"window":"1h"}]"#,
    ),
    (
        "rv",
        Kind::Reserved,
        r#""failure_mode":"closed","cost":{"response_header":"x-usage","default":7,"max":1000,"reservation":{"default_output":0}},"limits":[{"algorithm":"fixed_window","limit":200,"window":"1h"}]"#,
    ),
];

/// Version 2: `{fleet}` is the number of proxies (a fleet sets
/// `fleet_size` to it).
const V2: [(&str, Kind, &str); 16] = [
    ("fw", Kind::Rate, r#""failure_mode":"closed","limits":[{"algorithm":"fixed_window","limit":3,"window":"4s"}]"#),
    (
        "tb",
        Kind::Leased,
        r#""failure_mode":"closed","lease":{"max_units":3,"max_age":"2s"},"limits":[{"algorithm":"token_bucket","limit":20,"window":"30s","burst":10}]"#,
    ),
    ("cc", Kind::Slots, r#""failure_mode":"closed","limits":[{"algorithm":"concurrency","limit":3,"max_hold":"12s"}]"#),
    (
        "co",
        Kind::SlotsOpen,
        r#""failure_mode":"open","fleet_size":{fleet},"limits":[{"algorithm":"concurrency","limit":2,"max_hold":"12s"}]"#,
    ),
    ("sl", Kind::Rate, r#""failure_mode":"closed","limits":[{"algorithm":"sliding_log","limit":3,"window":"6s"}]"#),
    (
        "gc",
        Kind::Leased,
        r#""failure_mode":"closed","lease":{"max_units":3,"max_age":"2s"},"limits":[{"algorithm":"gcra","limit":20,"window":"30s","burst":10}]"#,
    ),
    (
        "tk",
        Kind::ChargedHeader,
        r#""failure_mode":"closed","cost":{"response_header":"x-usage","default":7,"max":1000},"limits":[{"algorithm":"fixed_window","limit":1000000,"window":"1d"}]"#,
    ),
    (
        "ccx",
        Kind::SlotAndWindow,
        r#""failure_mode":"closed","limits":[{"algorithm":"fixed_window","limit":2,"window":"8s","staggered":true}]"#,
    ),
    (
        "rv",
        Kind::Reserved,
        r#""failure_mode":"closed","cost":{"response_header":"x-usage","default":7,"max":1000,"reservation":{"default_output":0}},"limits":[{"algorithm":"fixed_window","limit":200,"window":"20s"}]"#,
    ),
    ("sw", Kind::Rate, r#""failure_mode":"closed","limits":[{"limit":4,"window":"10s"}]"#),
    ("sw2", Kind::Rate, r#""failure_mode":"closed","limits":[{"limit":2,"window":"2s"},{"limit":5,"window":"20s"}]"#),
    (
        "tbn",
        Kind::Rate,
        r#""failure_mode":"closed","limits":[{"algorithm":"token_bucket","limit":4,"window":"5s","burst":2}]"#,
    ),
    ("gcn", Kind::Rate, r#""failure_mode":"closed","limits":[{"algorithm":"gcra","limit":3,"window":"3s","burst":2}]"#),
    (
        "rvt",
        Kind::ReservedBody,
        r#""failure_mode":"closed","cost":{"response_body":"usage.total_tokens","default":10,"max":5000,"reservation":{"default_output":0}},"limits":[{"algorithm":"token_bucket","limit":1000,"window":"10s"}]"#,
    ),
    (
        "fo",
        Kind::FailOpen,
        r#""failure_mode":"open","fleet_size":{fleet},"limits":[{"algorithm":"fixed_window","limit":4,"window":"5s"}]"#,
    ),
    (
        "tkb",
        Kind::ChargedBody,
        r#""failure_mode":"closed","cost":{"response_body":"usage.total_tokens","default":5,"max":5000},"limits":[{"algorithm":"fixed_window","limit":1000000,"window":"1d"}]"#,
    ),
];

impl Rules {
    /// Version `version` for `proxies` proxies with `slots` slots per table.
    pub fn new(version: u32, build: Build, proxies: usize, slots: usize) -> Rules {
        let table: &[(&str, Kind, &str)] = if version == 1 { &V1 } else { &V2 };
        let rules: Vec<String> = table
            .iter()
            .map(|(name, _, body)| {
                // ccx keys on the path too: another identity than cc's. In
                // version 2 every rule has an identity of its own (rules
                // sharing a key are decided in one call, and webdis's
                // calls have a size bound).
                let key = match (*name, version) {
                    ("ccx", _) => r#""header:x-user","path""#.to_string(),
                    (_, 1) => r#""header:x-user""#.to_string(),
                    _ => format!(r#""header:x-user","literal:{name}""#),
                };
                let body = body.replace("{fleet}", &proxies.to_string());
                // A rule's requests go to `/<name>/x`: in version 2 no rule
                // matches another's, but `cc` matches `ccx`'s.
                let slash = if version == 1 || *name == "cc" { "" } else { "/" };
                format!(r#"{{"name":"{name}","match":{{"path_prefix":"/{name}{slash}"}},"key":[{key}],{body}}}"#)
            })
            .collect();
        let json = |store: &str| {
            host_tests::webdis::with_credential(&format!(
                r#"{{"domain":"t","store":{{{store},"timeout_ms":{TIMEOUT_MS},"circuit_breaker":{{"failures":3,"open":"2s"}},"stats_interval":"1h"}},"deny_cache":{{"slots":{slots}}},"rules":[{}]}}"#,
                rules.join(",")
            ))
        };
        let webdis = json(r#""transport":"webdis","cluster":"store""#);
        // Read here as the webdis build reads it (the transport changes no
        // limit nor fingerprint; this crate is built without the Redis one).
        let config = Config::parse(webdis.as_bytes()).unwrap_or_else(|e| panic!("the simulated configuration: {e}"));
        let json = match build {
            Build::Webdis => webdis,
            Build::Redis => json(r#""transport":"redis","cluster":"store?db=0""#),
        };
        let list = table
            .iter()
            .zip(&config.rules)
            .map(|((name, kind, _), r)| Rule {
                name,
                kind: *kind,
                specs: r.limits.iter().map(|l| l.spec).collect(),
                fingerprints: r.limits.iter().map(|l| l.fingerprint).collect(),
                default_cost: match &r.cost {
                    ratelimit::config::Cost::Response { default, .. } => *default,
                    _ => 1,
                },
            })
            .collect();
        Rules { version, list, json, slots }
    }

    /// Rule `r`.
    pub fn get(&self, r: usize) -> &Rule {
        &self.list[r]
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// The index of the rule named `name`, if any.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.list.iter().position(|r| r.name == name)
    }
}

/// Units one request of `rv` reserves with the body `RV_BODY`: 30 output
/// tokens and 17 bytes.
pub const RV_RESERVED: u64 = 47;
/// The body of an `rv` request.
pub const RV_BODY: &str = r#"{"max_tokens":30}"#;

/// The capacity of `rvt`'s bucket: the most one request reserves.
const RVT_CAPACITY: u64 = 1000;

/// The body of an `rvt` request stating `n` output tokens for `choices`
/// completions, and what it reserves: `n` × `choices` + its bytes, at
/// most the bucket.
pub fn rvt_body(n: u64, choices: u64) -> (String, u64) {
    let body =
        if choices > 1 { format!(r#"{{"max_tokens":{n},"n":{choices}}}"#) } else { format!(r#"{{"max_tokens":{n}}}"#) };
    let reserved = (n * choices + body.len() as u64).min(RVT_CAPACITY);
    (body, reserved)
}
