//! Envoy 1.40 from the project's virtualenv, run from the shared template
//! `envoy-config/envoy.yaml` with only the marked lines replaced.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::paths::{dist, envoy, root};
use crate::process::{free_port, Guard, TempDir};

/// What to put into the template.
pub struct EnvoyTemplate {
    /// Port of the ingress listener.
    pub listener: u16,
    /// Port of the admin interface.
    pub admin: u16,
    /// Port of the example upstream.
    pub backend: u16,
    /// Port of webdis.
    pub webdis: u16,
    /// Path of the .wasm module.
    pub module: String,
    /// The plugin configuration (JSON); `None` keeps the file's own.
    pub plugin_config: Option<String>,
}

/// The text of `envoy-config/envoy.yaml`.
pub fn template_text() -> String {
    config_text("envoy.yaml")
}

/// The text of a file of `envoy-config/`.
pub fn config_text(name: &str) -> String {
    std::fs::read_to_string(root().join("envoy-config").join(name)).unwrap()
}

/// Fills the template: each `# template: <name>` line gets loopback
/// addresses and the given ports; the plugin configuration between its
/// markers is replaced (with webdis's credential added, see
/// [`crate::webdis::with_credential`]). Panics if a marker is missing, so a test can never
/// run a private variant of the config.
pub fn render(t: &EnvoyTemplate) -> String {
    render_text(&template_text(), t, &[("module", format!("local: {{ filename: {} }}", t.module))])
}

/// Fills `text`, a file of `envoy-config/` with the markers of envoy.yaml
/// (admin, listener, backend, webdis, the plugin configuration) and the
/// further `lines`: (marker, the line's new content after its indent).
/// `t.module` is not used here. Panics if a marker is missing or unknown.
pub fn render_text(text: &str, t: &EnvoyTemplate, lines: &[(&str, String)]) -> String {
    let mut out = String::new();
    let mut in_plugin = false;
    let mut seen = Vec::new();
    for line in text.lines() {
        let indent = &line[..line.len() - line.trim_start().len()];
        if let Some(name) = line.split("# template: ").nth(1).map(str::trim) {
            seen.push(name.to_string());
            let socket = |port: u16| format!("{indent}socket_address: {{ address: 127.0.0.1, port_value: {port} }}");
            match name {
                "admin" => out.push_str(&socket(t.admin)),
                "listener" => out.push_str(&socket(t.listener)),
                "backend" => out.push_str(&socket(t.backend)),
                "webdis" => out.push_str(&socket(t.webdis)),
                "plugin-config-begin" => match &t.plugin_config {
                    Some(json) => {
                        in_plugin = true;
                        // The shipped webdis.json refuses calls without it.
                        let json = crate::webdis::with_credential(json);
                        let escaped = json.replace('\'', "''").replace('\n', " ");
                        out.push_str(&format!("{indent}value: '{escaped}'"));
                    }
                    None => continue,
                },
                "plugin-config-end" => {
                    in_plugin = false;
                    continue;
                }
                other => match lines.iter().find(|(n, _)| *n == other) {
                    Some((_, content)) => out.push_str(&format!("{indent}{content}")),
                    None => panic!("unknown template marker {other}"),
                },
            }
            out.push('\n');
            continue;
        }
        if !in_plugin {
            out.push_str(line);
            out.push('\n');
        }
    }
    let common = ["admin", "listener", "backend", "webdis", "plugin-config-begin", "plugin-config-end"];
    for m in common.into_iter().chain(lines.iter().map(|(n, _)| *n)) {
        assert!(seen.iter().any(|s| s == m), "the Envoy config lost its template marker {m}");
    }
    out
}

/// A running Envoy, stopped on drop.
pub struct Envoy {
    /// The ingress listener port.
    pub port: u16,
    /// The admin port.
    pub admin: u16,
    /// The process.
    pub process: Guard,
    dir: TempDir,
}

/// Starts Envoy from envoy.yaml with `dist/ratelimit.wasm` on fresh loopback
/// ports, in front of this upstream and webdis; `None` keeps the shipped
/// plugin configuration.
pub fn start_from_template(
    backend: u16,
    webdis: u16,
    plugin_config: Option<&str>,
    concurrency: u32,
) -> Result<Envoy, EnvoyFailed> {
    let (config, listener, admin) = render_on_fresh_ports(backend, webdis, plugin_config);
    Envoy::start(&config, listener, admin, concurrency)
}

/// envoy.yaml rendered on fresh loopback ports with `dist/ratelimit.wasm`
/// and `plugin_config` (`None` keeps the shipped one): the text, its
/// listener port and its admin port (a test may edit it before starting Envoy).
pub fn render_on_fresh_ports(backend: u16, webdis: u16, plugin_config: Option<&str>) -> (String, u16, u16) {
    let (listener, admin) = (free_port(), free_port());
    let text = render(&EnvoyTemplate {
        listener,
        admin,
        backend,
        webdis,
        module: dist("ratelimit.wasm").display().to_string(),
        plugin_config: plugin_config.map(str::to_string),
    });
    (text, listener, admin)
}

/// A change a test makes to the rendered envoy.yaml: `from` (which must
/// occur exactly once) becomes `to`. A test that differs from the shipped
/// file says exactly where.
pub struct Edit<'a> {
    /// The text replaced.
    pub from: &'a str,
    /// What replaces it.
    pub to: &'a str,
}

/// Starts Envoy from envoy.yaml like [`start_from_template`], with the
/// module at `module`, the `edits` applied to the rendered text, and extra
/// command-line `args`.
pub fn start_edited(
    backend: u16,
    webdis: u16,
    module: &std::path::Path,
    plugin_config: &str,
    concurrency: u32,
    edits: &[Edit<'_>],
    args: &[&str],
) -> Result<Envoy, EnvoyFailed> {
    let (listener, admin) = (free_port(), free_port());
    let mut config = render(&EnvoyTemplate {
        listener,
        admin,
        backend,
        webdis,
        module: module.display().to_string(),
        plugin_config: Some(plugin_config.to_string()),
    });
    for e in edits {
        assert_eq!(config.matches(e.from).count(), 1, "envoy.yaml has no single {:?}", e.from);
        config = config.replacen(e.from, e.to, 1);
    }
    Envoy::start_with_args(&config, listener, admin, concurrency, args)
}

/// Why Envoy did not come up.
#[derive(Debug)]
pub struct EnvoyFailed {
    /// Its log.
    pub log: String,
}

static BASE_ID: AtomicU32 = AtomicU32::new(0);

impl Envoy {
    /// Starts Envoy with this config text (which listens on `port` and has
    /// its admin on `admin`) and waits until it is ready.
    pub fn start(config: &str, port: u16, admin: u16, concurrency: u32) -> Result<Envoy, EnvoyFailed> {
        Envoy::start_with_args(config, port, admin, concurrency, &[])
    }

    /// The same with extra command-line arguments (e.g. `--config-yaml`,
    /// which merges a bootstrap fragment into the config as platforms'
    /// agents do).
    pub fn start_with_args(
        config: &str,
        port: u16,
        admin: u16,
        concurrency: u32,
        args: &[&str],
    ) -> Result<Envoy, EnvoyFailed> {
        Envoy::start_with_env(config, port, admin, concurrency, args, &[])
    }

    /// The same with these environment variables set for Envoy (which
    /// hands a VM those its `vm_config.environment_variables` names).
    pub fn start_with_env(
        config: &str,
        port: u16,
        admin: u16,
        concurrency: u32,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Envoy, EnvoyFailed> {
        let dir = TempDir::new("envoy");
        let path = dir.path().join("envoy.yaml");
        std::fs::write(&path, config).unwrap();
        let base_id = std::process::id() * 100 + BASE_ID.fetch_add(1, Ordering::Relaxed);
        let mut cmd = Command::new(envoy());
        cmd.arg("-c")
            .arg(&path)
            .args(["--concurrency", &concurrency.to_string(), "--disable-hot-restart"])
            .args(["--base-id", &base_id.to_string(), "--file-flush-interval-msec", "200"])
            .args(["--log-level", "info"])
            .args(args)
            .envs(env.iter().copied());
        let log = dir.path().join("envoy.log");
        let mut process = Guard::spawn("envoy", cmd, &log);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if !process.running() {
                return Err(EnvoyFailed { log: std::fs::read_to_string(&log).unwrap_or_default() });
            }
            if admin_get(admin, "/ready").is_some_and(|s| s.trim() == "LIVE") {
                return Ok(Envoy { port, admin, process, dir });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("envoy not ready in 30 s:\n{}", std::fs::read_to_string(&log).unwrap_or_default());
    }

    /// Envoy's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("envoy.log")).unwrap_or_default()
    }

    /// A stat's value (`name` exactly as /stats prints it), 0 if absent.
    pub fn stat(&self, name: &str) -> u64 {
        let text = admin_get(self.admin, &format!("/stats?filter=^{}$", name.replace('.', "\\."))).unwrap_or_default();
        text.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
    }

    /// GET `path` on the admin interface (e.g. `/stats/prometheus`,
    /// `/config_dump`); empty if it does not answer.
    pub fn admin(&self, path: &str) -> String {
        admin_get(self.admin, path).unwrap_or_default()
    }

    /// Downstream connections each worker accepted so far (listener
    /// `port`'s per-worker counters), by worker index.
    pub fn connections_per_worker(&self) -> Vec<u64> {
        let text = self.stats("downstream_cx_total");
        let mut per_worker: Vec<(u64, u64)> = text
            .lines()
            .filter(|l| l.starts_with("listener.") && l.contains(&format!("_{}.worker_", self.port)))
            .filter_map(|l| {
                let (name, n) = l.split_once(": ")?;
                let worker = name.split(".worker_").nth(1)?.split('.').next()?.parse().ok()?;
                Some((worker, n.trim().parse().ok()?))
            })
            .collect();
        per_worker.sort_unstable();
        per_worker.into_iter().map(|(_, n)| n).collect()
    }

    /// All stats whose names match `filter` (a regex), as text.
    pub fn stats(&self, filter: &str) -> String {
        admin_get(self.admin, &format!("/stats?filter={filter}")).unwrap_or_default()
    }
}

/// GET on the admin interface.
fn admin_get(admin: u16, path: &str) -> Option<String> {
    let agent = crate::http::agent(Duration::from_secs(2));
    let mut resp = agent.get(&format!("http://127.0.0.1:{admin}{path}")).call().ok()?;
    resp.body_mut().read_to_string().ok()
}
