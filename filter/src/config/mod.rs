//! The plugin configuration: JSON, validated once in `on_configure`.
//!
//! Parsing walks the JSON by hand so that every error names its field path
//! (`rules[1].limits[0].limit: must be at least 1`) and unknown fields are
//! refused. All defaults live here.

mod duration;
mod error;
mod json;
mod rule;

use serde_json::Value;

pub use duration::parse_ms;
pub use error::ConfigError;
pub use rule::{is_name, FailureMode, KeyPart, Limit, Matcher, Rule, SLIDING_LOG_MAX};

use json::{Obj, Result};

/// Most rules in one configuration.
pub const MAX_RULES: usize = 64;
/// Most limits in all rules together: the script decides at most 64 per call.
pub const MAX_LIMITS: usize = 64;

/// How the filter reaches Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// HTTP calls to a webdis gateway (stock Envoy).
    Webdis,
    /// The Redis-call hostcalls of Higress-built Envoy (`ratelimit-redis.wasm`).
    Redis,
}

/// The circuit breaker in front of the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Breaker {
    /// Consecutive store failures that open it.
    pub failures: u32,
    /// How long it stays open before one probe goes through, in ms.
    pub open_ms: u64,
}

/// Where the counters live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Store {
    /// webdis or redis.
    pub transport: Transport,
    /// The Envoy cluster to call.
    pub cluster: String,
    /// The :authority sent to webdis.
    pub authority: String,
    /// Per call.
    pub timeout_ms: u64,
    /// Stops calling a failing store.
    pub breaker: Breaker,
    /// How often each worker reads the store's INFO (evictions, memory).
    pub stats_interval_ms: u64,
    /// Redis ACL user (redis transport).
    pub username: String,
    /// Redis password (redis transport).
    pub password: String,
}

/// The deny cache in shared data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DenyCache {
    /// Whether denials are cached.
    pub enabled: bool,
    /// Fixed number of entries (shared data never shrinks).
    pub slots: u32,
}

/// Rules whose requests spend one identity's budget in one store call: the
/// same key parts and the same shadow flag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyGroup {
    /// The key parts all these rules use.
    pub key: Vec<KeyPart>,
    /// Whether these rules are in shadow mode (their own call, so a
    /// would-be denial never blocks an enforced rule's consumption).
    pub shadow: bool,
    /// Indices into `Config::rules`.
    pub rules: Vec<usize>,
}

/// The validated configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Prefix of every Redis key.
    pub domain: String,
    /// The store.
    pub store: Store,
    /// 0: the connection's address; N: the Nth X-Forwarded-For entry from the right.
    pub xff_trusted_hops: u32,
    /// The deny cache.
    pub deny_cache: DenyCache,
    /// Whether rate-limit headers are written (Retry-After always is).
    pub response_headers: bool,
    /// The rules, in order.
    pub rules: Vec<Rule>,
    /// The rules grouped by identity.
    pub groups: Vec<KeyGroup>,
}

const TOP_FIELDS: &[&str] = &["domain", "store", "client_ip", "deny_cache", "response_headers", "rules"];
const STORE_FIELDS: &[&str] =
    &["transport", "cluster", "authority", "timeout_ms", "circuit_breaker", "stats_interval", "username", "password"];

impl Config {
    /// Parses and validates the plugin configuration.
    pub fn parse(bytes: &[u8]) -> std::result::Result<Config, ConfigError> {
        let doc: Value =
            serde_json::from_slice(bytes).map_err(|e| ConfigError::at("", format!("not valid JSON: {e}")))?;
        let o = Obj::new(&doc, "", TOP_FIELDS)?;
        let domain = o.str("domain")?.unwrap_or("rl");
        if !is_name(domain, 32, true) {
            return Err(ConfigError::at("domain", "must be 1 to 32 characters of a-z, 0-9, _, - and ."));
        }
        let store = parse_store(o.value("store").ok_or_else(|| ConfigError::at("store", "is required"))?)?;
        let xff_trusted_hops = match o.value("client_ip") {
            None => 0,
            Some(v) => Obj::new(v, "client_ip", &["xff_trusted_hops"])?.uint("xff_trusted_hops", 0, 16)?.unwrap_or(0),
        } as u32;
        let deny_cache = match o.value("deny_cache") {
            None => DenyCache { enabled: true, slots: 4096 },
            Some(v) => {
                let d = Obj::new(v, "deny_cache", &["enabled", "slots"])?;
                DenyCache {
                    enabled: d.bool("enabled")?.unwrap_or(true),
                    slots: d.uint("slots", 1, 1 << 20)?.unwrap_or(4096) as u32,
                }
            }
        };
        let response_headers = o.bool("response_headers")?.unwrap_or(true);
        let rule_values = o.array("rules")?.ok_or_else(|| ConfigError::at("rules", "is required"))?;
        if rule_values.is_empty() || rule_values.len() > MAX_RULES {
            return Err(ConfigError::at("rules", format!("must hold 1 to {MAX_RULES} rules")));
        }
        let mut rules: Vec<Rule> = Vec::with_capacity(rule_values.len());
        for (i, v) in rule_values.iter().enumerate() {
            let rule = rule::parse_rule(v, &format!("rules[{i}]"), domain)?;
            if rules.iter().any(|r| r.name == rule.name) {
                return Err(ConfigError::at(
                    &format!("rules[{i}].name"),
                    format!("\"{}\" is used by an earlier rule", rule.name),
                ));
            }
            rules.push(rule);
        }
        if rules.iter().map(|r| r.limits.len()).sum::<usize>() > MAX_LIMITS {
            return Err(ConfigError::at("rules", format!("hold more than {MAX_LIMITS} limits in all")));
        }
        let groups = group_rules(&rules);
        let config =
            Config { domain: domain.to_string(), store, xff_trusted_hops, deny_cache, response_headers, rules, groups };
        if config.store.transport == Transport::Webdis {
            crate::store::webdis::check_body_bound(&config)?;
        }
        Ok(config)
    }
}

fn parse_store(v: &Value) -> Result<Store> {
    let o = Obj::new(v, "store", STORE_FIELDS)?;
    let transport = match o.str("transport")? {
        None | Some("webdis") => Transport::Webdis,
        Some("redis") if cfg!(feature = "redis") => Transport::Redis,
        Some("redis") => {
            return Err(ConfigError::at(
                "store.transport",
                "\"redis\" needs the Redis-call build (ratelimit-redis.wasm); this module speaks webdis",
            ))
        }
        Some(_) => return Err(ConfigError::at("store.transport", "must be \"webdis\" or \"redis\"")),
    };
    let cluster = o.required_str("cluster")?;
    if cluster.is_empty() || cluster.len() > 256 {
        return Err(ConfigError::at("store.cluster", "must name an Envoy cluster"));
    }
    let authority = o.str("authority")?.unwrap_or(cluster);
    if authority.is_empty() || authority.len() > 256 {
        return Err(ConfigError::at("store.authority", "must be 1 to 256 characters"));
    }
    let timeout_ms = o.uint("timeout_ms", 1, 60_000)?.unwrap_or(25);
    let breaker = match o.value("circuit_breaker") {
        None => Breaker { failures: 3, open_ms: 30_000 },
        Some(b) => {
            let b = Obj::new(b, "store.circuit_breaker", &["failures", "open"])?;
            let open_ms = match b.str("open")? {
                None => 30_000,
                Some(t) => {
                    parse_ms(t).ok_or_else(|| ConfigError::at("store.circuit_breaker.open", duration::DURATION_HELP))?
                }
            };
            Breaker { failures: b.uint("failures", 1, 1000)?.unwrap_or(3) as u32, open_ms }
        }
    };
    let stats_interval_ms = match o.str("stats_interval")? {
        None => 10_000,
        Some(t) => parse_ms(t).filter(|ms| *ms >= 100).ok_or_else(|| {
            ConfigError::at("store.stats_interval", "must be a duration of at least \"100ms\", like \"10s\"")
        })?,
    };
    let username = o.str("username")?.unwrap_or("");
    let password = o.str("password")?.unwrap_or("");
    if transport == Transport::Webdis && !(username.is_empty() && password.is_empty()) {
        let field = if username.is_empty() { "store.password" } else { "store.username" };
        return Err(ConfigError::at(
            field,
            "applies to transport \"redis\" only (webdis holds its own Redis credentials)",
        ));
    }
    Ok(Store {
        transport,
        cluster: cluster.to_string(),
        authority: authority.to_string(),
        timeout_ms,
        breaker,
        stats_interval_ms,
        username: username.to_string(),
        password: password.to_string(),
    })
}

fn group_rules(rules: &[Rule]) -> Vec<KeyGroup> {
    let mut groups: Vec<KeyGroup> = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        match groups.iter_mut().find(|g| g.key == r.key && g.shadow == r.shadow) {
            Some(g) => g.rules.push(i),
            None => groups.push(KeyGroup { key: r.key.clone(), shadow: r.shadow, rules: vec![i] }),
        }
    }
    groups
}

#[cfg(test)]
mod tests;
