//! Where and with what the benchmark ran: the machine, the versions, how
//! busy the machine was when it started.

use std::process::Command;

use crate::paths::{dist, envoy, program};

/// The facts at the top of BENCHMARKS.md.
#[derive(Clone, Debug)]
pub struct Machine {
    /// (name, value) rows.
    pub rows: Vec<(String, String)>,
    /// Size of dist/ratelimit.wasm in bytes.
    pub module_bytes: u64,
    /// Whether the machine was quiet at the start (load < 0.5, no compiler).
    pub quiet: bool,
}

fn output(cmd: &mut Command) -> String {
    cmd.output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default()
}

fn proc_field(file: &str, name: &str) -> String {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.trim() == name).map(|(_, v)| v.trim().to_string()))
        .unwrap_or_default()
}

/// Processes named cargo or rustc running now (other people's builds).
pub fn compilers() -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    dir.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("comm")).ok())
        .filter(|c| matches!(c.trim(), "cargo" | "rustc"))
        .count()
}

impl Machine {
    /// Reads everything now.
    pub fn read() -> Machine {
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        let mem_kb: f64 = proc_field("/proc/meminfo", "MemTotal").trim_end_matches(" kB").parse().unwrap_or(0.0);
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let load: Vec<&str> = load.split_whitespace().take(3).collect();
        let one_minute: f64 = load.first().and_then(|l| l.parse().ok()).unwrap_or(9.9);
        let busy = compilers();
        let quiet = one_minute < 0.5 && busy == 0;
        let envoy_version = output(Command::new(envoy()).arg("--version"));
        let envoy_version = envoy_version.split("version: ").nth(1).unwrap_or(&envoy_version).to_string();
        let redis = output(Command::new(program("redis-server")).arg("--version"));
        let redis = redis.split_whitespace().find_map(|w| w.strip_prefix("v=")).unwrap_or(&redis).to_string();
        let webdis = output(Command::new("dpkg-query").args(["-W", "-f", "${Version}", "webdis"]));
        let wrk = output(Command::new("dpkg-query").args(["-W", "-f", "${Version}", "wrk"]));
        let module_bytes = std::fs::metadata(dist("ratelimit.wasm")).map_or(0, |m| m.len());
        let rows = vec![
            (
                "machine".into(),
                format!(
                    "{cores} cores, {}, {:.1} GiB RAM",
                    proc_field("/proc/cpuinfo", "model name"),
                    mem_kb / 1048576.0
                ),
            ),
            (
                "load when started".into(),
                format!(
                    "load average {} (1, 5, 15 min); {busy} cargo/rustc processes running — {}",
                    load.join(" "),
                    if quiet { "quiet" } else { "NOT quiet: other work shared the cores, figures are noisier" }
                ),
            ),
            ("Envoy".into(), envoy_version),
            ("Redis".into(), redis),
            ("webdis".into(), format!("{webdis} (Debian package)")),
            ("wrk".into(), format!("{wrk} (Debian package)")),
            ("rustc".into(), output(Command::new("rustc").arg("--version"))),
            ("module".into(), format!("`dist/ratelimit.wasm`, {module_bytes} bytes")),
            ("date".into(), output(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]))),
        ];
        Machine { rows, module_bytes, quiet }
    }
}
