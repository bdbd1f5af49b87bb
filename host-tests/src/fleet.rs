//! Several proxies sharing one store: N Envoys from `envoy-config/envoy.yaml`
//! (each with its own ports, base id and temp dir), one webdis in front of
//! the store (a Redis, or a redis_proxy in front of a Redis Cluster), one
//! upstream.

use std::time::Duration;

use crate::backend::Backend;
use crate::envoy::{start_from_template, Envoy};
use crate::http::{agent, send, Answer};
use crate::webdis::Webdis;

/// Everything of the fleet; stopped on drop (the store belongs to the caller).
pub struct Fleet {
    /// The proxies, in the order the tests address them.
    pub envoys: Vec<Envoy>,
    /// The webdis they all call.
    pub webdis: Webdis,
    /// The upstream.
    pub backend: Backend,
    agent: ureq::Agent,
}

impl Fleet {
    /// Starts webdis in front of the Redis protocol server on `store_port`,
    /// an upstream, and `proxies` Envoys with `concurrency` workers each,
    /// all with this plugin configuration (started in parallel).
    pub fn start(store_port: u16, proxies: usize, concurrency: u32, plugin_config: &str) -> Fleet {
        let webdis = Webdis::start(store_port);
        let backend = Backend::start();
        let (backend_port, webdis_port) = (backend.port, webdis.port);
        let envoys = std::thread::scope(|s| {
            let starting: Vec<_> = (0..proxies)
                .map(|_| {
                    s.spawn(move || start_from_template(backend_port, webdis_port, Some(plugin_config), concurrency))
                })
                .collect();
            starting
                .into_iter()
                .map(|t| t.join().unwrap().unwrap_or_else(|e| panic!("envoy refused to start:\n{}", e.log)))
                .collect()
        });
        Fleet { envoys, webdis, backend, agent: agent(Duration::from_secs(10)) }
    }

    /// The URL of `path` on proxy `proxy`.
    pub fn url(&self, proxy: usize, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.envoys[proxy].port)
    }

    /// `method path` through proxy `proxy` with extra headers.
    pub fn send(&self, proxy: usize, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
        send(&self.agent, method, &self.url(proxy, path), headers)
    }

    /// GET `path` through proxy `proxy` as client `user` (header `x-user`).
    pub fn get_as(&self, proxy: usize, path: &str, user: &str) -> Answer {
        self.send(proxy, "GET", path, &[("x-user", user)])
    }

    /// A stat summed over the fleet.
    pub fn stat_sum(&self, name: &str) -> u64 {
        self.envoys.iter().map(|e| e.stat(name)).sum()
    }
}

/// Resident memory of a process in KiB (`VmRSS` of /proc/<pid>/status), 0 if gone.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
