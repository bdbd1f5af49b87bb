//! The whole setup of the README: Redis, webdis, an upstream and Envoy with
//! the filter, from `envoy-config/`, on free loopback ports.

use std::time::Duration;

use crate::backend::Backend;
use crate::envoy::{start_edited, start_from_template, Edit, Envoy, EnvoyFailed};
use crate::http::{agent, send, Answer};
use crate::paths::dist;
use crate::redis_server::RedisServer;
use crate::webdis::Webdis;

/// Everything running; stopped in reverse order on drop.
pub struct Stack {
    /// Envoy with the filter.
    pub envoy: Envoy,
    /// webdis.
    pub webdis: Webdis,
    /// Redis.
    pub redis: RedisServer,
    /// The upstream.
    pub backend: Backend,
    agent: ureq::Agent,
}

impl Stack {
    /// Starts everything with this plugin configuration and 2 Envoy workers.
    pub fn start(plugin_config: &str) -> Stack {
        Stack::try_start(plugin_config, 2).unwrap_or_else(|e| panic!("envoy refused to start:\n{}", e.log))
    }

    /// Starts everything; Envoy's log if Envoy refuses the configuration.
    pub fn try_start(plugin_config: &str, concurrency: u32) -> Result<Stack, EnvoyFailed> {
        Stack::launch(Some(plugin_config), concurrency)
    }

    /// Starts everything with the plugin configuration shipped in envoy.yaml.
    pub fn start_shipped(concurrency: u32) -> Result<Stack, EnvoyFailed> {
        Stack::launch(None, concurrency)
    }

    /// Starts everything with this plugin configuration in front of the
    /// upstream on `upstream` (instead of the example one).
    pub fn start_with_upstream(plugin_config: &str, upstream: u16) -> Stack {
        Stack::launch_to(Some(plugin_config), 2, Some(upstream))
            .unwrap_or_else(|e| panic!("envoy refused to start:\n{}", e.log))
    }

    /// Starts everything with envoy.yaml changed by `edits` and Envoy given
    /// the extra command-line `args`; Envoy's log if it refuses.
    pub fn start_edited(
        plugin_config: &str,
        concurrency: u32,
        edits: &[Edit<'_>],
        args: &[&str],
    ) -> Result<Stack, EnvoyFailed> {
        Stack::start_edited_to(plugin_config, concurrency, None, edits, args)
    }

    /// The same in front of the upstream on `upstream` instead of the
    /// example one (when given).
    pub fn start_edited_to(
        plugin_config: &str,
        concurrency: u32,
        upstream: Option<u16>,
        edits: &[Edit<'_>],
        args: &[&str],
    ) -> Result<Stack, EnvoyFailed> {
        let redis = RedisServer::start();
        let webdis = Webdis::start(redis.port);
        let backend = Backend::start();
        let module = dist("ratelimit.wasm");
        let to = upstream.unwrap_or(backend.port);
        let envoy = start_edited(to, webdis.port, &module, plugin_config, concurrency, edits, args)?;
        Ok(Stack { envoy, webdis, redis, backend, agent: agent(Duration::from_secs(10)) })
    }

    fn launch(plugin_config: Option<&str>, concurrency: u32) -> Result<Stack, EnvoyFailed> {
        Stack::launch_to(plugin_config, concurrency, None)
    }

    fn launch_to(plugin_config: Option<&str>, concurrency: u32, upstream: Option<u16>) -> Result<Stack, EnvoyFailed> {
        let redis = RedisServer::start();
        let webdis = Webdis::start(redis.port);
        let backend = Backend::start();
        let envoy = start_from_template(upstream.unwrap_or(backend.port), webdis.port, plugin_config, concurrency)?;
        Ok(Stack { envoy, webdis, redis, backend, agent: agent(Duration::from_secs(10)) })
    }

    /// `method path` through Envoy with extra headers.
    pub fn send(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
        send(&self.agent, method, &format!("http://127.0.0.1:{}{path}", self.envoy.port), headers)
    }

    /// GET `path` through Envoy.
    pub fn get(&self, path: &str) -> Answer {
        self.send("GET", path, &[])
    }

    /// GET `path` through Envoy on a connection of its own: the kernel
    /// hands each new connection to one of Envoy's workers, so a series of
    /// them reaches every worker (a pooled one stays on one).
    pub fn get_fresh(&self, path: &str) -> Answer {
        send(&agent(Duration::from_secs(10)), "GET", &format!("http://127.0.0.1:{}{path}", self.envoy.port), &[])
    }

    /// EVALSHA commands Redis has executed (INFO commandstats).
    pub fn evalsha_calls(&self) -> u64 {
        command_calls(&self.redis, "evalsha")
    }
}

/// Calls of one command since the server started (INFO commandstats).
pub fn command_calls(redis: &RedisServer, command: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(&mut redis.connect()).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
