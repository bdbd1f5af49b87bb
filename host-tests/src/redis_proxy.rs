//! Envoy's `redis_proxy` in front of a Redis Cluster, run from the shipped
//! `envoy-config/redis-cluster-proxy.yaml` with only the marked lines
//! replaced (admin, listener, seed nodes, and the operation timeout: the
//! shipped 20 ms suits a production Redis; a loaded 2-core test machine
//! needs more, still below the tests' store timeout).

use std::time::{Duration, Instant};

use crate::envoy::Envoy;
use crate::paths::root;
use crate::process::free_port;

/// The proxy's operation timeout in the tests: below their store timeout
/// (500 ms), so a stuck shard still answers with an error, not a timeout.
pub const OP_TIMEOUT: &str = "0.25s";

/// The text of `envoy-config/redis-cluster-proxy.yaml`.
pub fn template_text() -> String {
    std::fs::read_to_string(root().join("envoy-config/redis-cluster-proxy.yaml")).unwrap()
}

/// Fills the template: `admin` and `listener` get loopback addresses and the
/// given ports; the `seed` lines (one per seed node in the file) are replaced
/// by one line per port of `seeds`, in the first seed line's place. Panics if
/// a marker is missing or unknown, so a test can never run a private variant.
pub fn render(listener: u16, admin: u16, seeds: &[u16]) -> String {
    let text = template_text();
    let mut out = String::new();
    let mut seen = Vec::new();
    for line in text.lines() {
        let indent = &line[..line.len() - line.trim_start().len()];
        let Some(name) = line.split("# template: ").nth(1).map(str::trim) else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let socket = |port: u16| format!("{indent}socket_address: {{ address: 127.0.0.1, port_value: {port} }}\n");
        match name {
            "op_timeout" => out.push_str(&format!("{indent}op_timeout: {OP_TIMEOUT}\n")),
            "admin" => out.push_str(&socket(admin)),
            "listener" => out.push_str(&socket(listener)),
            "seed" if seen.iter().any(|s| s == "seed") => {}
            "seed" => {
                for port in seeds {
                    out.push_str(&format!(
                        "{indent}- endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}\n"
                    ));
                }
            }
            other => panic!("unknown template marker {other} in redis-cluster-proxy.yaml"),
        }
        seen.push(name.to_string());
    }
    for m in ["admin", "listener", "seed", "op_timeout"] {
        assert!(seen.iter().any(|s| s == m), "redis-cluster-proxy.yaml lost its template marker {m}");
    }
    out
}

/// A running Envoy redis_proxy; stopped on drop.
pub struct RedisProxy {
    /// The Redis listener's port on 127.0.0.1 (point webdis here).
    pub port: u16,
    /// The Envoy process (admin, stats, log).
    pub envoy: Envoy,
}

impl RedisProxy {
    /// Starts the proxy with these seed nodes and waits until a keyed command
    /// through it is answered by the cluster (PING alone Envoy answers itself).
    pub fn start(seeds: &[u16]) -> RedisProxy {
        let (port, admin) = (free_port(), free_port());
        let config = render(port, admin, seeds);
        let envoy = Envoy::start(&config, port, admin, 1)
            .unwrap_or_else(|e| panic!("redis_proxy refused to start:\n{}", e.log));
        let proxy = RedisProxy { port, envoy };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let got: Result<Option<String>, _> = redis::cmd("GET").arg("{ready}").query(&mut proxy.connect());
            if got.is_ok() {
                return proxy;
            }
            assert!(Instant::now() < deadline, "no answer through the redis_proxy: {got:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A new client connection through the proxy.
    pub fn connect(&self) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).unwrap().get_connection().unwrap()
    }
}
