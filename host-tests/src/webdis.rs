//! webdis (Debian 0.1.9) in front of a Redis, configured from the project's
//! `envoy-config/webdis.json` with only the addresses changed.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::paths::{program, root};
use crate::process::{free_port, wait_for_port, Guard, TempDir};

/// A running webdis, stopped on drop.
pub struct Webdis {
    /// Its HTTP port on 127.0.0.1.
    pub port: u16,
    /// The process.
    pub process: Guard,
    config: std::path::PathBuf,
    dir: TempDir,
}

impl Webdis {
    /// Starts webdis talking to the Redis on `redis_port`.
    pub fn start(redis_port: u16) -> Webdis {
        let dir = TempDir::new("webdis");
        let port = free_port();
        let text = std::fs::read_to_string(root().join("envoy-config/webdis.json")).unwrap();
        let mut config: Value = serde_json::from_str(&text).unwrap();
        config["redis_host"] = "127.0.0.1".into();
        config["redis_port"] = redis_port.into();
        config["http_host"] = "127.0.0.1".into();
        config["http_port"] = port.into();
        // webdis writes its log to its working directory unless told.
        config["logfile"] = dir.path().join("webdis.log").display().to_string().into();
        let path = dir.path().join("webdis.json");
        std::fs::write(&path, config.to_string()).unwrap();
        let process = spawn(&path, &dir);
        wait_for_port(port, "webdis", Duration::from_secs(10));
        Webdis { port, process, config: path, dir }
    }

    /// Starts it again after `process.stop()`, on the same port.
    pub fn restart(&mut self) {
        self.process.stop();
        self.process = spawn(&self.config, &self.dir);
        wait_for_port(self.port, "webdis", Duration::from_secs(10));
    }
}

fn spawn(config: &std::path::Path, dir: &TempDir) -> Guard {
    let mut cmd = Command::new(program("webdis"));
    cmd.arg(config);
    Guard::spawn("webdis", cmd, &dir.path().join("webdis.log"))
}
