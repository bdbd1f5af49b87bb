//! NGINX with ngx_wasm_module (built by `make nginx`), from the shipped
//! `envoy-config/nginx.conf` on free loopback ports, with Redis, webdis
//! and an upstream.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::backend::Backend;
use crate::http::{agent, send, Answer};
use crate::paths::{dist, root};
use crate::process::{free_port, wait_for_port, Guard, TempDir};
use crate::redis_server::RedisServer;
use crate::webdis::{with_credential, Webdis};

/// The nginx binary: `NGINX_BIN`, else what `.ci/nginx.sh` builds (once,
/// into its cache; seconds when built).
pub fn binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("NGINX_BIN") {
            return PathBuf::from(bin);
        }
        let out = Command::new(root().join(".ci/nginx.sh")).output().expect("cannot run .ci/nginx.sh");
        assert!(out.status.success(), "make nginx failed:\n{}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout);
        PathBuf::from(stdout.lines().last().expect(".ci/nginx.sh printed no path").trim())
    })
    .clone()
}

/// The shipped configuration.
pub fn shipped_conf() -> String {
    std::fs::read_to_string(root().join("envoy-config/nginx.conf")).unwrap()
}

/// `text` with exactly one `from` replaced by `to`.
fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(text.matches(from).count(), 1, "nginx.conf holds `{from}` once");
    text.replacen(from, to, 1)
}

/// Where the rendered configuration points.
pub struct Ports {
    pub listen: u16,
    pub backend: u16,
    pub webdis: u16,
}

/// The shipped configuration on `ports`, loading `dist/ratelimit.wasm`,
/// with `plugin` as the plugin configuration (`None`: the shipped one).
pub fn render(ports: &Ports, plugin: Option<&str>) -> String {
    let mut text = shipped_conf();
    text = replace_once(&text, "listen 127.0.0.1:10000;", &format!("listen 127.0.0.1:{};", ports.listen));
    text = replace_once(&text, "server 127.0.0.1:8080;", &format!("server 127.0.0.1:{};", ports.backend));
    text =
        replace_once(&text, "\"cluster\": \"127.0.0.1:7379\"", &format!("\"cluster\": \"127.0.0.1:{}\"", ports.webdis));
    text = replace_once(&text, "/etc/nginx/ratelimit.wasm", &dist("ratelimit.wasm").display().to_string());
    if let Some(plugin) = plugin {
        let start = text.find("proxy_wasm ratelimit '").expect("a proxy_wasm line") + "proxy_wasm ratelimit '".len();
        let end = start + text[start..].find("';").expect("the plugin configuration ends");
        assert!(!plugin.contains('\''), "a plugin configuration for NGINX holds no single quote");
        text.replace_range(start..end, plugin);
    }
    text
}

/// NGINX running; stopped (master and workers) on drop.
pub struct Nginx {
    pub port: u16,
    process: Guard,
    dir: TempDir,
}

/// NGINX did not come up: its error log.
#[derive(Debug)]
pub struct NginxFailed {
    pub log: String,
}

impl Nginx {
    /// Starts NGINX with `conf` (listening on `port`) and waits until it
    /// listens and both worker processes configured the plugin (or one
    /// refused it: then its log).
    pub fn start(conf: &str, port: u16) -> Result<Nginx, NginxFailed> {
        Nginx::start_with(conf, port, 2)
    }

    /// The same, waiting for `configured` workers to log that they
    /// configured the plugin (0: a configuration without `proxy_wasm`).
    pub fn start_with(conf: &str, port: u16, configured: usize) -> Result<Nginx, NginxFailed> {
        let dir = TempDir::new("nginx");
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        let path = dir.path().join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let mut cmd = Command::new(binary());
        cmd.arg("-p").arg(dir.path()).arg("-c").arg(&path);
        let mut process = Guard::spawn("nginx", cmd, &dir.path().join("stdout.log"));
        let deadline = Instant::now() + Duration::from_secs(30);
        let log_path = dir.path().join("logs/error.log");
        while Instant::now() < deadline {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            if !process.running() || log.contains("configuration refused") {
                return Err(NginxFailed { log });
            }
            // One line per worker process that configured it.
            let ready = log.matches(" rules, store ").count() >= configured;
            if ready && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(Nginx { port, process, dir });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("nginx not ready in 30 s:\n{}", std::fs::read_to_string(&log_path).unwrap_or_default());
    }

    /// Its error log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("logs/error.log")).unwrap_or_default()
    }

    /// Whether a worker process died (NGINX logs it and starts another).
    pub fn workers_crashed(&self) -> bool {
        self.log().contains("exited on signal")
    }

    /// Whether a store call failed (then the rule's failure policy, not
    /// the store, decided).
    pub fn store_failed(&self) -> bool {
        self.log().contains("dispatch failed")
    }

    /// Rewrites its configuration with `edit` and reloads it (SIGHUP to the
    /// master): new worker processes take new connections, the old ones
    /// finish theirs and exit.
    pub fn reload(&self, edit: impl FnOnce(String) -> String) {
        let path = self.dir.path().join("nginx.conf");
        let conf = edit(std::fs::read_to_string(&path).unwrap());
        std::fs::write(&path, conf).unwrap();
        self.process.signal("HUP");
    }

    /// The master's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}

/// Redis, webdis, an upstream and NGINX with the module; stopped in
/// reverse order on drop.
pub struct NginxStack {
    pub nginx: Nginx,
    pub webdis: Webdis,
    pub redis: RedisServer,
    pub backend: Backend,
    agent: ureq::Agent,
}

impl NginxStack {
    /// Everything, with `plugin` as the plugin configuration (webdis's
    /// credential added); panics with NGINX's log if it refuses it.
    pub fn start(plugin: &str) -> NginxStack {
        NginxStack::try_start(Some(plugin)).unwrap_or_else(|e| panic!("nginx refused to start:\n{}", e.log))
    }

    /// Everything; NGINX's log if it refuses the configuration. `None`:
    /// the shipped plugin configuration.
    pub fn try_start(plugin: Option<&str>) -> Result<NginxStack, NginxFailed> {
        NginxStack::try_start_to(plugin, None)
    }

    /// Everything in front of the upstream on `upstream` (`None`: the
    /// example one).
    pub fn start_to(plugin: &str, upstream: u16) -> NginxStack {
        NginxStack::try_start_to(Some(plugin), Some(upstream))
            .unwrap_or_else(|e| panic!("nginx refused to start:\n{}", e.log))
    }

    /// Everything in front of the upstream on `upstream`, with the
    /// rendered configuration passed through `edit` (a test of what a
    /// directive changes).
    pub fn start_edited(plugin: &str, upstream: u16, edit: impl FnOnce(String) -> String) -> NginxStack {
        NginxStack::try_start_edited(Some(plugin), Some(upstream), edit)
            .unwrap_or_else(|e| panic!("nginx refused to start:\n{}", e.log))
    }

    fn try_start_to(plugin: Option<&str>, upstream: Option<u16>) -> Result<NginxStack, NginxFailed> {
        NginxStack::try_start_edited(plugin, upstream, |conf| conf)
    }

    fn try_start_edited(
        plugin: Option<&str>,
        upstream: Option<u16>,
        edit: impl FnOnce(String) -> String,
    ) -> Result<NginxStack, NginxFailed> {
        let redis = RedisServer::start();
        let webdis = Webdis::start(redis.port);
        let backend = Backend::start();
        let ports = Ports { listen: free_port(), backend: upstream.unwrap_or(backend.port), webdis: webdis.port };
        // A test's plugin configuration names webdis as the shipped one
        // does (127.0.0.1:7379): it goes to this webdis.
        let plugin =
            plugin.map(|p| with_credential(&p.replace("127.0.0.1:7379", &format!("127.0.0.1:{}", webdis.port))));
        let conf = edit(render(&ports, plugin.as_deref()));
        let nginx = Nginx::start(&conf, ports.listen)?;
        wait_for_port(ports.listen, "nginx", Duration::from_secs(10));
        Ok(NginxStack { nginx, webdis, redis, backend, agent: agent(Duration::from_secs(10)) })
    }

    /// One request through NGINX.
    pub fn send(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
        send(&self.agent, method, &format!("http://127.0.0.1:{}{path}", self.nginx.port), headers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_configuration_renders_on_the_given_ports_with_any_plugin_configuration() {
        let ports = Ports { listen: 1, backend: 2, webdis: 3 };
        let text = render(&ports, Some(r#"{"domain":"x"}"#));
        assert!(text.contains("listen 127.0.0.1:1;"));
        assert!(text.contains("server 127.0.0.1:2;"));
        assert!(text.contains(r#"proxy_wasm ratelimit '{"domain":"x"}';"#));
        // The shipped plugin configuration names webdis's port.
        assert!(render(&ports, None).contains(r#""cluster": "127.0.0.1:3""#));
    }
}
