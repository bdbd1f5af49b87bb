//! The root context: validates the configuration once and hands it to
//! every HTTP context.

use std::rc::Rc;

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::ContextType;

use super::host::HostMetrics;
use super::http::Http;
use crate::config::Config;

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
}

impl Context for Root {}

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
                        crate::config::Transport::Webdis => "webdis",
                        crate::config::Transport::Redis => "redis",
                    },
                    config.store.cluster,
                    crate::script::sha1_hex()
                );
                #[cfg(feature = "redis")]
                if config.store.transport == crate::config::Transport::Redis {
                    super::redis::init(&config.store);
                }
                self.plugin = Some(Rc::new(Plugin { metrics: HostMetrics::define(&names), config }));
                true
            }
            Err(e) => {
                log::error!("ratelimit: configuration refused: {e}");
                false
            }
        }
    }

    fn create_http_context(&self, id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Http::new(id, self.plugin.clone())))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
