//! A real redis-server on a free loopback port.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::paths::program;
use crate::process::{free_cluster_port, free_port, Guard, TempDir};

/// A running redis-server, stopped on drop.
pub struct RedisServer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// The process.
    pub process: Guard,
    dir: TempDir,
}

impl RedisServer {
    /// Starts a server with no persistence.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra `--name value` settings.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        RedisServer::start_on(free_port(), extra)
    }

    /// Starts a Redis Cluster node (its cluster-bus port, +10000, free too).
    pub fn start_cluster_node(extra: &[&str]) -> RedisServer {
        RedisServer::start_on(free_cluster_port(), extra)
    }

    fn start_on(port: u16, extra: &[&str]) -> RedisServer {
        let dir = TempDir::new("redis");
        let process = spawn(port, &dir, extra);
        let server = RedisServer { port, process, dir };
        server.wait_ready();
        server
    }

    /// Starts the same server again on the same port (after `stop`), empty.
    pub fn restart(&mut self, extra: &[&str]) {
        self.process.stop();
        self.process = spawn(self.port, &self.dir, extra);
        self.wait_ready();
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

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(mut c) = redis::Client::open(self.url()).and_then(|c| c.get_connection()) {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not answer PING", self.port);
    }
}

fn spawn(port: u16, dir: &TempDir, extra: &[&str]) -> Guard {
    let mut cmd = Command::new(program("redis-server"));
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir.path())
        .args(extra);
    Guard::spawn("redis-server", cmd, &dir.path().join(format!("redis-{port}.log")))
}
