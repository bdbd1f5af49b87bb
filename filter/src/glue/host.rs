//! The host's services behind the pure modules' traits.

use std::cell::Cell;
use std::time::UNIX_EPOCH;

use proxy_wasm::hostcalls;
use proxy_wasm::types::{MapType, MetricType};

use crate::metrics::{metric_name, Event, Metrics};
use crate::request::RequestSource;
use crate::shared::SharedData;

/// Milliseconds since the epoch by the host's clock.
pub fn now_ms() -> u64 {
    hostcalls::get_current_time()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The current request, read through hostcalls on demand.
pub struct HostRequest;

impl RequestSource for HostRequest {
    fn header(&self, name: &str) -> Option<String> {
        hostcalls::get_map_value(MapType::HttpRequestHeaders, name).ok().flatten()
    }

    fn source_address(&self) -> Option<String> {
        let bytes = hostcalls::get_property(vec!["source", "address"]).ok().flatten()?;
        String::from_utf8(bytes).ok()
    }
}

/// proxy-wasm shared data.
pub struct HostShared;

impl SharedData for HostShared {
    fn get(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        match hostcalls::get_shared_data(key) {
            Ok((Some(bytes), Some(cas))) => Some((bytes, cas)),
            _ => None,
        }
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        // Err(CasMismatch): another worker wrote first.
        hostcalls::set_shared_data(key, Some(value), cas).is_ok()
    }
}

/// Metric ids defined at configure time; hosts without metrics (NGINX-wasm)
/// leave them out and counting is off.
#[derive(Default)]
pub struct HostMetrics {
    /// Per rule, per event.
    pub rules: Vec<[Option<u32>; Event::ALL.len()]>,
    /// Store calls made (EVALSHA, SCRIPT LOAD).
    pub store_calls: Option<u32>,
    /// Store call latency, ms.
    pub store_latency: Option<u32>,
    /// Gauges from the store's INFO: evicted_keys, used_memory, maxmemory,
    /// and 1 when the eviction policy can evict live counters.
    pub store_gauges: [Option<u32>; 4],
    /// Store errors logged so far on this VM (logs are thinned out).
    pub errors_seen: Cell<u64>,
}

impl HostMetrics {
    /// Defines the metrics of `rules`.
    pub fn define(rules: &[String]) -> HostMetrics {
        let define = |kind, name: &str| hostcalls::define_metric(kind, name).ok();
        HostMetrics {
            rules: rules.iter().map(|r| Event::ALL.map(|e| define(MetricType::Counter, &metric_name(r, e)))).collect(),
            store_calls: define(MetricType::Counter, "ratelimit.store_calls"),
            store_latency: define(MetricType::Histogram, "ratelimit.store_latency_ms"),
            store_gauges: [
                "ratelimit.store.evicted_keys",
                "ratelimit.store.used_memory_bytes",
                "ratelimit.store.maxmemory_bytes",
                "ratelimit.store.evicting_policy",
            ]
            .map(|name| define(MetricType::Gauge, name)),
            errors_seen: Cell::new(0),
        }
    }

    /// Counts one store call.
    pub fn store_call(&self) {
        if let Some(id) = self.store_calls {
            let _ = hostcalls::increment_metric(id, 1);
        }
    }

    /// Records one store call's latency.
    pub fn latency(&self, ms: u64) {
        if let Some(id) = self.store_latency {
            let _ = hostcalls::record_metric(id, ms);
        }
    }

    /// Exports the store's INFO figures.
    pub fn store_stats(&self, s: &crate::store::stats::StoreStats) {
        let values = [s.evicted_keys, s.used_memory, s.maxmemory, u64::from(s.can_evict_counters())];
        for (id, value) in self.store_gauges.iter().zip(values) {
            if let Some(id) = id {
                let _ = hostcalls::record_metric(*id, value);
            }
        }
    }

    /// Whether the n-th store error should be logged: 1, 2, 4, 8, ... so a
    /// failing store cannot flood the log.
    pub fn should_log_error(&self) -> bool {
        let n = self.errors_seen.get() + 1;
        self.errors_seen.set(n);
        n.is_power_of_two()
    }
}

impl Metrics for HostMetrics {
    fn count(&self, rule: usize, event: Event) {
        if let Some(Some(id)) = self.rules.get(rule).map(|ids| ids[event.index()]) {
            let _ = hostcalls::increment_metric(id, 1);
        }
    }
}
