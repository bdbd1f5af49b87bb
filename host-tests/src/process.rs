//! Child processes stopped by their PID when dropped, and free ports.

use std::collections::BTreeSet;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A process this test started; killed (SIGTERM, then SIGKILL) on drop.
pub struct Guard {
    name: String,
    child: Option<Child>,
}

impl Guard {
    /// Starts `cmd` with its output going to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Guard {
        let out = std::fs::File::create(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let err = out.try_clone().unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        Guard { name: name.to_string(), child: Some(child) }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Sends a signal to the process (e.g. "STOP", "CONT", "KILL"); nothing
    /// if it was stopped already (never `kill 0`, the whole group).
    pub fn signal(&self, sig: &str) {
        if let Some(child) = &self.child {
            signal_pid(child.id(), sig);
        }
    }

    /// Stops the process now and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal_pid(child.id(), "TERM");
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The name given at start.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.signal("CONT"); // a stopped process cannot handle SIGTERM
        self.stop();
    }
}

fn signal_pid(pid: u32, sig: &str) {
    let _ = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).stderr(Stdio::null()).status();
}

/// Ports handed out by this process, never reused by it.
static TAKEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// The first port of `span` ports from `first` where every port at `port +
/// o` for o in `others` is free and new; marks them taken. All below the
/// kernel's ephemeral range (32768 and up), so an outgoing connection
/// (Envoy's to webdis, say) cannot grab one between this check and the
/// server's bind; each test process starts at its own offset.
fn claim(first: u32, span: u32, others: &[u32], counter: &AtomicU32) -> u16 {
    let offset = std::process::id().wrapping_mul(97) % span;
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..span {
        let port = first + (offset + counter.fetch_add(1, Ordering::Relaxed)) % span;
        let ports: Vec<u16> = others.iter().map(|o| (port + o) as u16).collect();
        if ports.iter().all(|p| !taken.contains(p) && TcpListener::bind(("127.0.0.1", *p)).is_ok()) {
            taken.extend(ports);
            return port as u16;
        }
    }
    panic!("no free port in {first}..{}", first + span);
}

/// A port nobody listens on right now, never handed out before by this
/// process.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    claim(22_000, 8_000, &[0], &NEXT)
}

/// A port for a Redis Cluster node: it and its cluster-bus port (+10000)
/// both free.
pub fn free_cluster_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    claim(20_000, 2_000, &[0, 10_000], &NEXT)
}

/// Waits until something accepts connections on `port`, or fails.
pub fn wait_for_port(port: u16, what: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{what} did not listen on 127.0.0.1:{port} within {timeout:?}");
}

/// A fresh temporary directory, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `/tmp/ratelimit-<label>-<pid>-<n>`.
    pub fn new(label: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("ratelimit-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("KEEP_TEST_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
