//! Readings from a Redis server's INFO: its main thread's CPU time, the
//! per-command statistics and memory in use.

/// INFO `section` as (name, value) pairs.
pub fn info(conn: &mut redis::Connection, section: &str) -> Vec<(String, String)> {
    let text: String = redis::cmd("INFO").arg(section).query(conn).unwrap();
    text.lines().filter_map(|l| l.split_once(':')).map(|(k, v)| (k.to_string(), v.trim().to_string())).collect()
}

fn field(pairs: &[(String, String)], name: &str) -> Option<String> {
    pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

/// Seconds of CPU the main thread (the one running commands) has used,
/// user plus system.
pub fn main_thread_cpu(conn: &mut redis::Connection) -> f64 {
    let cpu = info(conn, "cpu");
    let get =
        |n: &str| field(&cpu, n).and_then(|v| v.parse::<f64>().ok()).unwrap_or_else(|| panic!("INFO cpu: no {n}"));
    get("used_cpu_user_main_thread") + get("used_cpu_sys_main_thread")
}

/// One command's statistics since the last CONFIG RESETSTAT.
#[derive(Clone, Copy, Debug, Default)]
pub struct CommandStat {
    /// Calls.
    pub calls: u64,
    /// Microseconds per call, inside Redis (execution only, no I/O).
    pub usec_per_call: f64,
}

/// `cmdstat_<command>` (lower case), zero if never called.
pub fn command_stat(conn: &mut redis::Connection, command: &str) -> CommandStat {
    let stats = info(conn, "commandstats");
    let Some(v) = field(&stats, &format!("cmdstat_{command}")) else { return CommandStat::default() };
    let get = |n: &str| v.split(',').find_map(|kv| kv.strip_prefix(&format!("{n}="))).and_then(|x| x.parse().ok());
    CommandStat { calls: get("calls").map_or(0, |c: f64| c as u64), usec_per_call: get("usec_per_call").unwrap_or(0.0) }
}

/// `used_memory` in bytes.
pub fn used_memory(conn: &mut redis::Connection) -> u64 {
    field(&info(conn, "memory"), "used_memory").and_then(|v| v.parse().ok()).expect("INFO memory: used_memory")
}

/// Empties the server and its statistics, keeping the script cache.
pub fn reset(conn: &mut redis::Connection) {
    let _: () = redis::cmd("FLUSHALL").arg("SYNC").query(conn).unwrap();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(conn).unwrap();
}
