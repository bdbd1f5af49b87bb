//! The host's services behind the pure modules' traits: plain hostcalls,
//! each status handled.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use super::abi;
use super::pause_guard::PauseGuard;
use crate::config::Config;
use crate::metrics::{metric_name, Event, Metrics};
use crate::request::{HeaderList, RequestSource};
use crate::response::LocalReply;
use crate::secret::Secret;
use crate::shared::SharedData;
use crate::store::stats::StoreStats;
use crate::store::transport::Wire;
use crate::store::Transport;
use crate::store::{webdis, StoreError};
use crate::time::Instant;
use crate::worker::access_log::Field;
use crate::worker::{Host, ResponseSource};

/// Metric ids defined at configure time; a host without metrics
/// (NGINX-wasm) leaves them out and counting is off.
#[derive(Debug, Default)]
pub struct MetricIds {
    rules: Vec<[Option<u32>; Event::ALL.len()]>,
    store_calls: Option<u32>,
    store_decisions: Option<u32>,
    store_latency: Option<u32>,
    store_gauges: [Option<u32>; 4],
}

const COUNTER: u32 = 0;
const GAUGE: u32 = 1;
const HISTOGRAM: u32 = 2;

impl MetricIds {
    /// Defines the metrics of `config`'s rules and of the store.
    pub fn define(config: &Config) -> MetricIds {
        let define = |kind, name: &str| abi::define_metric(kind, name).ok();
        MetricIds {
            rules: config.rules.iter().map(|r| Event::ALL.map(|e| define(COUNTER, &metric_name(&r.name, e)))).collect(),
            store_calls: define(COUNTER, "ratelimit.store_calls"),
            store_decisions: define(COUNTER, "ratelimit.store_decisions"),
            store_latency: define(HISTOGRAM, "ratelimit.store_latency_ms"),
            store_gauges: [
                "ratelimit.store.evicted_keys",
                "ratelimit.store.used_memory_bytes",
                "ratelimit.store.maxmemory_bytes",
                "ratelimit.store.evicting_policy",
            ]
            .map(|name| define(GAUGE, name)),
        }
    }
}

/// Where and how the store is called (copied from the configuration).
#[derive(Clone, Debug)]
pub struct StoreTarget {
    /// webdis or redis.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub transport: Transport,
    /// The Envoy cluster.
    pub cluster: String,
    /// webdis's :authority.
    pub authority: String,
    /// webdis's basic auth, if configured.
    pub authorization: Option<Secret>,
    /// Per call.
    pub timeout_ms: u32,
    /// What this plugin's shared-data keys end with (`Config::shared_scope`).
    pub shared_scope: String,
}

impl StoreTarget {
    /// The target of `config`.
    pub fn of(config: &Config) -> StoreTarget {
        StoreTarget {
            transport: config.store.transport,
            cluster: config.store.cluster.clone(),
            authority: config.store.authority.clone(),
            authorization: match config.store.transport {
                Transport::Webdis => webdis::authorization(&config.store.username, &config.store.password),
                Transport::Redis => None,
            },
            timeout_ms: u32::try_from(config.store.timeout.ms()).unwrap_or(u32::MAX),
            shared_scope: config.shared_scope(),
        }
    }
}

/// The host as one plugin (root context) sees it during one callback.
pub struct HostCalls<'a> {
    /// The plugin's root context.
    pub root: u32,
    /// The stream whose callback runs, if any (its context is restored
    /// after a call is sent from the root context).
    pub current: Option<u32>,
    /// The host ignores `proxy_set_effective_context` (NGINX): webdis is
    /// called with `GET` (see `webdis::get_path`).
    pub pinned: bool,
    /// Metric ids.
    pub metrics: &'a MetricIds,
    /// The store.
    pub target: &'a StoreTarget,
    /// SplitMix64 state for `random`.
    pub rng: &'a Cell<u64>,
    /// The paused requests, on a pinned host (NGINX may let them through).
    pub guard: &'a PauseGuard,
    /// The Redis transport's connection state.
    #[cfg(feature = "redis")]
    pub redis: &'a super::redis::RedisLink,
}

impl HostCalls<'_> {
    /// Makes stream `stream` effective to carry out its decision: false
    /// when it is gone, or a pinned host let it through before it.
    fn may_carry_out(&self, stream: u32) -> bool {
        (!self.pinned || self.guard.deciding(stream)) && abi::set_effective_context(stream).is_ok()
    }
}

/// The last time the host's clock told (ms since the epoch).
static LAST_NOW_MS: AtomicU64 = AtomicU64::new(0);

/// Milliseconds since the epoch by the host's clock; when the clock
/// hostcall fails, the last time it told. Never 0 once it has told: every
/// expiry and window compared with 0 would read an old entry (a cached
/// denial, an ended lease) as in force.
pub fn now() -> Instant {
    Instant::from_ms(match abi::now_ns() {
        Some(ns) => {
            let ms = ns / 1_000_000;
            LAST_NOW_MS.store(ms, Ordering::Relaxed);
            ms
        }
        None => LAST_NOW_MS.load(Ordering::Relaxed),
    })
}

impl SharedData for HostCalls<'_> {
    fn get(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        abi::shared_get(&[key, &self.target.shared_scope].concat()).ok().flatten()
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        // CasMismatch: another worker wrote first.
        abi::shared_set(&[key, &self.target.shared_scope].concat(), value, cas.unwrap_or(0)).is_ok()
    }
}

impl Metrics for HostCalls<'_> {
    fn count(&self, rule: usize, event: Event) {
        self.count_by(rule, event, 1);
    }

    fn count_by(&self, rule: usize, event: Event, n: u64) {
        if let Some(Some(id)) = self.metrics.rules.get(rule).map(|ids| ids[event.index()]) {
            abi::increment_metric(id, i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    fn store_call(&self, decisions: usize) {
        if let Some(id) = self.metrics.store_calls {
            abi::increment_metric(id, 1);
        }
        if let Some(id) = self.metrics.store_decisions {
            abi::increment_metric(id, i64::try_from(decisions).unwrap_or(i64::MAX));
        }
    }

    fn store_latency(&self, ms: u64) {
        if let Some(id) = self.metrics.store_latency {
            abi::record_metric(id, ms);
        }
    }

    fn store_stats(&self, s: &StoreStats) {
        let values = [s.evicted_keys, s.used_memory, s.maxmemory, u64::from(s.can_evict_counters())];
        for (id, value) in self.metrics.store_gauges.iter().zip(values) {
            if let Some(id) = id {
                abi::record_metric(*id, value);
            }
        }
    }
}

impl Host for HostCalls<'_> {
    fn now(&self) -> Instant {
        now()
    }

    fn random(&self) -> u64 {
        // SplitMix64: spreads Retry-After jitter; nothing secret rides on it.
        let z = self.rng.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        self.rng.set(z);
        let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn send(&self, wire: &Wire, reinit: bool) -> Result<u32, StoreError> {
        // A request's own call pauses it: not on a pinned host that let
        // one through (another worker process may have found it: one
        // shared-data read per such call).
        if self.pinned && self.current.is_some() {
            self.guard.settle();
            if self.guard.refused() {
                return Err(StoreError::Dispatch);
            }
        }
        // From the root context: the call belongs to the plugin, not to
        // the stream that happened to start it.
        abi::set_effective_context(self.root).map_err(|_| StoreError::Dispatch)?;
        let sent = match wire {
            // NGINX writes a body apart from the headers, which webdis
            // never answers: the command goes in a GET's path instead.
            Wire::Http { method, path, body } if self.pinned => {
                let t = self.target;
                let path = webdis::get_path(method, path, body);
                let headers =
                    abi::serialize_pairs(&webdis::headers("GET", &path, &t.authority, t.authorization.as_ref()));
                abi::http_call(&self.target.cluster, &headers, b"", self.target.timeout_ms)
                    .map_err(|_| StoreError::Dispatch)
            }
            Wire::Http { method, path, body } => {
                let t = self.target;
                let headers =
                    abi::serialize_pairs(&webdis::headers(method, path, &t.authority, t.authorization.as_ref()));
                abi::http_call(&self.target.cluster, &headers, body, self.target.timeout_ms)
                    .map_err(|_| StoreError::Dispatch)
            }
            #[cfg(feature = "redis")]
            Wire::Resp(query) => self.redis.call(&self.target.cluster, query, reinit),
            #[cfg(not(feature = "redis"))]
            Wire::Resp(_) => {
                let _ = reinit;
                Err(StoreError::Dispatch)
            }
        };
        if let Some(stream) = self.current {
            let _ = abi::set_effective_context(stream);
        }
        sent
    }

    fn set_request_header(&self, name: &str, value: &str) {
        let _ = abi::replace_header(abi::REQUEST_HEADERS, name, value);
    }

    fn replace_request_body(&self, len: u64, body: &[u8]) -> bool {
        let Ok(len) = usize::try_from(len) else { return false };
        // The length first: a body the upstream would read short or long
        // must never go out (a request without one is sent chunked).
        let length = abi::header_value(abi::REQUEST_HEADERS, "content-length");
        if matches!(length, Ok(Some(_)))
            && abi::replace_header(abi::REQUEST_HEADERS, "content-length", &body.len().to_string()).is_err()
        {
            return false;
        }
        if abi::set_buffer(abi::REQUEST_BODY, 0, len, body).is_ok() {
            return true;
        }
        if let Ok(Some(old)) = length {
            let _ = abi::replace_header(abi::REQUEST_HEADERS, "content-length", &String::from_utf8_lossy(&old));
        }
        false
    }

    fn resume(&self, stream: u32, log: &[Field]) {
        // A stream that is gone cannot be made effective: nothing to resume.
        if self.may_carry_out(stream) {
            set_properties(log);
            let _ = abi::continue_request();
        }
    }

    fn reply(&self, stream: u32, reply: &LocalReply, log: &[Field]) {
        if self.may_carry_out(stream) {
            set_properties(log);
            let headers: Vec<(&str, &str)> = reply.headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let _ = abi::send_local_response(reply.status, &abi::serialize_pairs(&headers), reply.body.as_bytes());
        }
    }

    fn warn(&self, message: &str) {
        // Not through `log`: its formatting here cost the module 1.8 KB.
        abi::log(abi::LOG_WARN, message);
    }

    fn annotate(&self, stream: u32, fields: &[Field]) {
        // The stream whose callback runs is effective already.
        if self.current == Some(stream) || self.may_carry_out(stream) {
            set_properties(fields);
        }
    }
}

/// Sets each field as a property of the effective stream. A status (a
/// host without such properties) changes nothing for the request.
fn set_properties(fields: &[Field]) {
    for (name, value) in fields {
        let _ = abi::set_property(name, value.as_bytes());
    }
}

/// The current request, read through hostcalls on demand.
pub struct HostRequest;

impl RequestSource for HostRequest {
    fn headers(&self) -> HeaderList {
        match abi::header_pairs(abi::REQUEST_HEADERS) {
            Ok(Some(pairs)) => HeaderList::parse(pairs).unwrap_or_else(HeaderList::unreadable),
            Ok(None) => HeaderList::default(),
            Err(_) => HeaderList::unreadable(),
        }
    }

    fn source_address(&self) -> Option<Vec<u8>> {
        abi::property(&["source", "address"]).ok().flatten()
    }
}

/// The current response, read through hostcalls on demand.
pub struct HostResponse;

impl ResponseSource for HostResponse {
    fn header(&self, name: &str) -> Option<Vec<u8>> {
        abi::header_value(abi::RESPONSE_HEADERS, name).ok().flatten()
    }
}
