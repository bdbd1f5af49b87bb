//! The decision script's cost in instructions: redis-server under
//! valgrind's callgrind, counting only inside EVALSHA, runs batches of 16
//! one-limit sliding_window decisions (the batches section's call) on keys
//! it holds, and the same batches of the floor's script. Timed runs on this
//! shared machine vary by ±15% from run to run; an instruction count is the
//! same to within 1% every time, so a change to `lua/` can be weighed closely
//! (BENCH_SCRIPT=<file> puts another script in the built one's place).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::report::{table, Section};
use super::store_calls::{now_ms, script_under_test, Kind, BATCH_FLOOR_SCRIPT};
use super::store_cost::LIMIT;
use crate::paths::program;
use crate::process::{free_port, Guard, TempDir};

/// Decisions per call (the batches section's target size).
const SIZE: u64 = 16;
/// Calls per pass: 640 decisions, on 640 identities.
const CALLS: u64 = 40;
/// Passes counted, on the keys one pass created: each count is raised from
/// 1 to 9, past 8 once, as a hot key's raises pass a multiple of 8 once in
/// 8 (where the script checks the count's TTL: TTL_CHECK in driver.lua).
const RAISES: u64 = 8;

/// A redis-server under callgrind that counts only inside EVALSHA.
struct Counted {
    process: Guard,
    dir: TempDir,
    conn: redis::Connection,
}

impl Counted {
    fn start() -> Counted {
        let dir = TempDir::new("callgrind");
        let port = free_port();
        let mut cmd = Command::new(program("valgrind"));
        cmd.arg("--tool=callgrind")
            .arg("--toggle-collect=evalShaCommand")
            .arg(format!("--callgrind-out-file={}/callgrind.out.%p", dir.path().display()))
            .arg(program("redis-server"))
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]);
        let process = Guard::spawn("valgrind redis-server", cmd, &dir.path().join("valgrind.log"));
        // Under valgrind the server takes seconds to start.
        let deadline = Instant::now() + Duration::from_secs(60);
        let url = format!("redis://127.0.0.1:{port}/");
        loop {
            if let Ok(conn) = redis::Client::open(url.as_str()).and_then(|c| c.get_connection()) {
                return Counted { process, dir, conn };
            }
            assert!(Instant::now() < deadline, "redis-server under valgrind did not answer within 60 s");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Instructions counted since the last dump (callgrind_control -d
    /// writes them and starts again from zero).
    fn dump(&self) -> u64 {
        let before = dumps(self.dir.path()).len();
        let out = Command::new(program("callgrind_control"))
            .args(["-d", &self.process.pid().to_string()])
            .output()
            .expect("callgrind_control runs");
        assert!(out.status.success(), "callgrind_control -d failed: {out:?}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let files = dumps(self.dir.path());
            if files.len() > before {
                if let Some(total) = files.last().and_then(|f| totals(f)) {
                    return total;
                }
            }
            assert!(Instant::now() < deadline, "callgrind wrote no dump within 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The numbered dumps in `dir`, in order (`callgrind.out.<pid>.<n>`).
fn dumps(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            let n = name.strip_prefix("callgrind.out.")?.split_once('.')?.1.parse().ok()?;
            Some((n, p))
        })
        .collect();
    files.sort();
    files.into_iter().map(|(_, p)| p).collect()
}

/// The `totals:` (or `summary:`) line of a complete dump.
fn totals(file: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("totals: ").or_else(|| l.strip_prefix("summary: ")))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Instructions inside EVALSHA per decision of `kind` (a batch or its
/// floor) running `script`, on keys held: one pass creates the keys, the
/// next `RAISES`, counted, raise them.
fn per_decision(kind: Kind, script: &str) -> f64 {
    let mut server = Counted::start();
    let sha: String = redis::cmd("SCRIPT").arg("LOAD").arg(script).query(&mut server.conn).expect("SCRIPT LOAD");
    // One instant for both passes: the same windows, so the same keys.
    let now = now_ms();
    let pass = |server: &mut Counted| {
        for c in 0..CALLS {
            let reply: redis::Value =
                kind.command(&sha, LIMIT, c * SIZE, now).query(&mut server.conn).expect("EVALSHA");
            assert!(super::store_calls::allowed(&reply), "{}: a call denied or failed: {reply:?}", kind.name());
        }
    };
    pass(&mut server);
    server.dump();
    for _ in 0..RAISES {
        pass(&mut server);
    }
    let counted = server.dump();
    counted as f64 / (CALLS * SIZE * RAISES) as f64
}

/// The section: the script and its floor, in instructions per decision.
pub fn run() -> Section {
    let script = script_under_test();
    let floor = per_decision(Kind::BatchFloor(SIZE), BATCH_FLOOR_SCRIPT);
    eprintln!("  instructions: floor {floor:.0} per decision");
    let decided = per_decision(Kind::Batch(SIZE), &script);
    eprintln!("  instructions: script {decided:.0} per decision");
    let rows = vec![
        vec![
            "floor (MGET, one write per decision, its keys expiring)".to_string(),
            format!("{floor:.0}"),
            "1.00".into(),
        ],
        vec!["decision script".to_string(), format!("{decided:.0}"), format!("{:.2}", decided / floor)],
    ];
    let body = format!(
        "redis-server (the version above) under valgrind's callgrind, counting only inside EVALSHA (`--toggle-collect=evalShaCommand`): \
         {CALLS} calls of {SIZE} decisions (the batches section's call: one sliding_window limit per decision, a \
         different identity each), once to create the keys, then {RAISES} times more, counted, on the keys held \
         (each count raised from 1 to {}: past a multiple of 8 once, where the script checks a count's TTL, as a \
         hot key's raises do once in 8); a fresh server for each script. The same to within 1% from run to run (the clock in the call moves the numbers a little), where the timed ratio of the batches section varies by \
         ±15%: the measure to weigh a change of `lua/` by (`BENCH_ONLY=instructions BENCH_SCRIPT=<file>`). \
         Instructions are not time: the timed ratio of the same calls came out lower in every run so \
         far (2026-12-03: 1.35× timed against 1.39× counted, in the 14:05 sitting).\n\n{}",
        RAISES + 1,
        table(&["script", "instructions per decision", "× floor"], &rows),
    );
    Section {
        title: "Script instructions (callgrind)".into(),
        body,
        figures: serde_json::json!({"floor": floor, "script": decided}),
        targets: Vec::new(),
    }
}
