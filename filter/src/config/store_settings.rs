//! The `store` setting: where the counters live and how the filter calls
//! them (the calls themselves are the `store` module's).

use std::num::NonZeroU32;

use super::credential::{parse_credential, Env};
use super::duration::{parse_ms, DURATION_HELP};
use super::error::ConfigError;
use super::json::{Obj, Result};
use crate::json::Value;
use crate::secret::Secret;
use crate::store::Transport;
use crate::time::Millis;

/// The circuit breaker in front of the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Breaker {
    /// Consecutive store failures that open it.
    pub failures: u32,
    /// How long it stays open before one probe goes through.
    pub open: Millis,
    /// Records kept for Redis Cluster hash slots, each for a contiguous
    /// range of them (`deny_cache.slots`: the breaker keeps within the
    /// shared-data keys every other table does).
    pub slot_records: NonZeroU32,
}

/// How decisions share store calls, per worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batching {
    /// StoreSettings calls in flight at most; decisions that arrive while this many
    /// are out wait and go together in the next call.
    pub max_in_flight: NonZeroU32,
    /// Decisions one call carries at most.
    pub max_decisions: NonZeroU32,
}

/// StoreSettings calls in flight per worker when the configuration says nothing:
/// chosen by measurement (docs/BENCHMARKS.md, "Batching").
pub const DEFAULT_IN_FLIGHT: NonZeroU32 = NonZeroU32::MIN.saturating_add(1);
/// Decisions per call when the configuration says nothing.
pub const DEFAULT_DECISIONS: NonZeroU32 = NonZeroU32::MIN.saturating_add(31);
/// The most decisions the script takes in one call.
pub const MAX_DECISIONS: u64 = crate::spec::MAX_DECISIONS as u64;

/// The `store` setting: where the counters live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreSettings {
    /// webdis or redis.
    pub transport: Transport,
    /// The Envoy cluster to call.
    pub cluster: String,
    /// The :authority sent to webdis.
    pub authority: String,
    /// Per call.
    pub timeout: Millis,
    /// Stops calling a failing store.
    pub breaker: Breaker,
    /// How often each worker reads the store's INFO (evictions, memory).
    pub stats_interval: Millis,
    /// redis: the Redis ACL user; webdis: the basic-auth user of its ACL
    /// (empty: none).
    pub username: String,
    /// Its password.
    pub password: Secret,
    /// The store is a Redis Cluster (behind Envoy's redis_proxy): one call
    /// may only touch keys of one hash slot.
    pub redis_cluster: bool,
    /// How decisions share calls.
    pub batching: Batching,
}

const STORE_FIELDS: &[&str] = &[
    "transport",
    "cluster",
    "authority",
    "timeout_ms",
    "circuit_breaker",
    "stats_interval",
    "username",
    "password",
    "password_env",
    "redis_cluster",
    "batch",
];

fn duration(o: &Obj<'_>, field: &str, default_ms: u64, min_ms: u64, help: &str) -> Result<Millis> {
    match o.str(field)? {
        None => Ok(Millis::of(default_ms)),
        Some(t) => parse_ms(t)
            .filter(|ms| *ms >= min_ms)
            .and_then(Millis::new)
            .ok_or_else(|| ConfigError::at(&o.path_of(field), help)),
    }
}

fn non_zero(n: u64) -> NonZeroU32 {
    NonZeroU32::new(u32::try_from(n).unwrap_or(u32::MAX)).unwrap_or(NonZeroU32::MIN)
}

/// Parses `store`; the breaker keeps `slot_records` records of hash slots.
pub fn parse_store(v: &Value, env: &Env<'_>, slot_records: NonZeroU32) -> Result<StoreSettings> {
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
    let timeout = Millis::of(o.uint("timeout_ms", 1, 60_000)?.unwrap_or(25));
    let breaker = match o.value("circuit_breaker") {
        None => Breaker { failures: 3, open: Millis::of(30_000), slot_records },
        Some(b) => {
            let b = Obj::new(b, "store.circuit_breaker", &["failures", "open"])?;
            let open = duration(&b, "open", 30_000, 1, DURATION_HELP)?;
            Breaker { failures: b.uint("failures", 1, 1000)?.unwrap_or(3) as u32, open, slot_records }
        }
    };
    let stats_interval =
        duration(&o, "stats_interval", 10_000, 100, "must be a duration of at least \"100ms\", like \"10s\"")?;
    let credential = parse_credential(&o, transport, env)?;
    let batching = match o.value("batch") {
        None => Batching { max_in_flight: DEFAULT_IN_FLIGHT, max_decisions: DEFAULT_DECISIONS },
        Some(b) => {
            let b = Obj::new(b, "store.batch", &["max_in_flight", "max_decisions"])?;
            Batching {
                max_in_flight: non_zero(
                    b.uint("max_in_flight", 1, 1024)?.unwrap_or(u64::from(DEFAULT_IN_FLIGHT.get())),
                ),
                max_decisions: non_zero(
                    b.uint("max_decisions", 1, MAX_DECISIONS)?.unwrap_or(u64::from(DEFAULT_DECISIONS.get())),
                ),
            }
        }
    };
    Ok(StoreSettings {
        transport,
        cluster: cluster.to_string(),
        authority: authority.to_string(),
        timeout,
        breaker,
        stats_interval,
        username: credential.username,
        password: credential.password,
        redis_cluster: o.bool("redis_cluster")?.unwrap_or(false),
        batching,
    })
}
