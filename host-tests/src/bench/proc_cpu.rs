//! CPU time a process has used, from /proc/<pid>/stat: what a proxy (or the
//! store) pays per request, independent of how the 2 cores are shared.

use std::process::Command;
use std::sync::OnceLock;

/// utime + stime of every thread of `pid`, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_else(|e| panic!("/proc/{pid}/stat: {e}"));
    // The command name is in parentheses and may hold spaces: count after it.
    let after = &stat[stat.rfind(')').expect("/proc stat format") + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 (utime) and 15 (stime) of proc(5); `after` starts at field 3.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / clock_ticks()
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 on Linux).
fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_used_some_cpu() {
        let spin = std::time::Instant::now();
        while spin.elapsed().as_millis() < 50 {}
        assert!(cpu_seconds(std::process::id()) > 0.0);
    }
}
