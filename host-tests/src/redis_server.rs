//! A real redis-server on a free loopback port.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::paths::program;
use crate::process::{free_cluster_port, free_port, Guard, TempDir};
use crate::store_clock::StoreClock;

/// A running redis-server, stopped on drop.
pub struct RedisServer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// The process.
    pub process: Guard,
    dir: TempDir,
    /// Extra environment (a clock the test moves).
    env: Vec<(String, String)>,
}

impl RedisServer {
    /// Starts a server with no persistence.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra `--name value` settings.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        RedisServer::start_on(free_port, extra, Vec::new())
    }

    /// Starts a server whose clock is `clock` (see `store_clock`).
    pub fn start_on_clock(clock: &StoreClock) -> RedisServer {
        RedisServer::start_on(free_port, &[], clock.env())
    }

    /// Starts a Redis Cluster node (its cluster-bus port, +10000, free too).
    pub fn start_cluster_node(extra: &[&str]) -> RedisServer {
        RedisServer::start_on(free_cluster_port, extra, Vec::new())
    }

    /// Starts a server on a port from `claim`; on another if a process of
    /// another test binary took that port first (ports are unique only
    /// within one test process).
    fn start_on(claim: fn() -> u16, extra: &[&str], env: Vec<(String, String)>) -> RedisServer {
        for _ in 0..5 {
            let port = claim();
            let dir = TempDir::new("redis");
            let mut process = spawn(port, &dir, extra, &env);
            if answers_as(port, &mut process) {
                return RedisServer { port, process, dir, env };
            }
        }
        panic!("redis-server did not start on any of 5 free ports");
    }

    /// Starts the same server again on the same port (after `stop`), empty.
    pub fn restart(&mut self, extra: &[&str]) {
        self.process.stop();
        self.process = spawn(self.port, &self.dir, extra, &self.env);
        assert!(answers_as(self.port, &mut self.process), "redis-server did not start again on port {}", self.port);
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A new connection.
    pub fn connect(&self) -> redis::Connection {
        redis::Client::open(self.url()).unwrap().get_connection().unwrap()
    }

    /// The working directory (config, logs).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

/// Waits until the server on `port` answers and is `process` (not another
/// test process's server on the same port); false once `process` exited.
fn answers_as(port: u16, process: &mut Guard) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    let url = format!("redis://127.0.0.1:{port}/");
    let ours = format!("process_id:{}\r", process.pid());
    while Instant::now() < deadline {
        if !process.running() {
            return false;
        }
        if let Ok(mut c) = redis::Client::open(url.as_str()).and_then(|c| c.get_connection()) {
            if redis::cmd("INFO").arg("server").query::<String>(&mut c).is_ok_and(|info| info.contains(&ours)) {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("redis-server on port {port} did not answer within 10 s");
}

fn spawn(port: u16, dir: &TempDir, extra: &[&str], env: &[(String, String)]) -> Guard {
    let mut cmd = Command::new(program("redis-server"));
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir.path())
        .args(extra);
    Guard::spawn("redis-server", cmd, &dir.path().join(format!("redis-{port}.log")))
}
