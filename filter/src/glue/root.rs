//! The root context: validates the configuration once and hands it to
//! every HTTP context.

use std::rc::Rc;

use std::time::Duration;

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{BufferType, ContextType, MapType};

use super::host::HostMetrics;
use super::http::Http;
use crate::config::{Config, Transport};
use crate::store::stats::StoreStats;
use crate::store::webdis;

/// The validated configuration and the metrics defined for it.
pub struct Plugin {
    /// The configuration in force.
    pub config: Config,
    /// Its metric ids.
    pub metrics: HostMetrics,
}

/// The root context.
#[derive(Default)]
pub struct Root {
    plugin: Option<Rc<Plugin>>,
    /// The INFO call in flight, if any (one at a time).
    info_token: Option<u32>,
    /// The eviction policy last warned about, so the log says it once.
    warned_policy: String,
}

impl Root {
    /// Exports INFO figures and warns once per policy that can evict counters.
    fn take_info(&mut self, info: Result<String, crate::store::StoreError>) {
        let Some(plugin) = &self.plugin else { return };
        let Some(stats) = info.ok().as_deref().and_then(StoreStats::parse) else { return };
        plugin.metrics.store_stats(&stats);
        match stats.warning() {
            Some(w) if self.warned_policy != stats.policy => {
                log::warn!("{w}");
                self.warned_policy = stats.policy;
            }
            Some(_) => {}
            None => self.warned_policy.clear(),
        }
    }
}

impl Context for Root {
    fn on_http_call_response(&mut self, token: u32, _headers: usize, body_size: usize, _trailers: usize) {
        if self.info_token.take() != Some(token) {
            return;
        }
        let status = hostcalls::get_map_value(MapType::HttpCallResponseHeaders, ":status")
            .ok()
            .flatten()
            .and_then(|s| s.parse::<u32>().ok());
        let body =
            hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size).ok().flatten().unwrap_or_default();
        self.take_info(webdis::decode_info(status, &body));
    }
}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        let bytes =
            proxy_wasm::hostcalls::get_buffer(proxy_wasm::types::BufferType::PluginConfiguration, 0, usize::MAX)
                .ok()
                .flatten()
                .unwrap_or_default();
        match Config::parse(&bytes) {
            Ok(config) => {
                let names: Vec<String> = config.rules.iter().map(|r| r.name.clone()).collect();
                log::info!(
                    "ratelimit: {} rules, store {} via cluster {}, script {}",
                    config.rules.len(),
                    match config.store.transport {
                        Transport::Webdis => "webdis",
                        Transport::Redis => "redis",
                    },
                    config.store.cluster,
                    crate::script::sha1_hex()
                );
                #[cfg(feature = "redis")]
                if config.store.transport == Transport::Redis {
                    super::redis::init(&config.store);
                }
                let _ = hostcalls::set_tick_period(Duration::from_millis(config.store.stats_interval_ms));
                self.plugin = Some(Rc::new(Plugin { metrics: HostMetrics::define(&names), config }));
                true
            }
            Err(e) => {
                log::error!("ratelimit: configuration refused: {e}");
                false
            }
        }
    }

    /// Reads the store's INFO: evictions, memory and policy.
    fn on_tick(&mut self) {
        let Some(plugin) = self.plugin.clone() else { return };
        let store = &plugin.config.store;
        match store.transport {
            Transport::Webdis => {
                if self.info_token.is_some() {
                    return;
                }
                let req = webdis::info();
                self.info_token = hostcalls::dispatch_http_call(
                    &store.cluster,
                    vec![(":method", req.method), (":path", req.path), (":authority", &store.authority)],
                    None,
                    vec![],
                    Duration::from_millis(store.timeout_ms),
                )
                .ok();
            }
            #[cfg(feature = "redis")]
            Transport::Redis => super::redis::request_info(store),
            #[cfg(not(feature = "redis"))]
            Transport::Redis => {}
        }
        #[cfg(feature = "redis")]
        if let Some(info) = super::redis::take_info() {
            self.take_info(info);
        }
    }

    fn create_http_context(&self, id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Http::new(id, self.plugin.clone())))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
