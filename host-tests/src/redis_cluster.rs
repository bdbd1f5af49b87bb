//! A Redis Cluster of real redis-server processes on loopback.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::paths::program;
use crate::redis_server::RedisServer;

/// Masters (and replicas) started by the test, stopped on drop.
pub struct RedisCluster {
    /// Every node; the first `masters` are the masters at creation.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `masters` masters with `replicas` replicas each and waits until
    /// the cluster state is ok.
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        RedisCluster::start_with(masters, replicas, &[])
    }

    /// The same, every node with extra `--name value` settings.
    pub fn start_with(masters: usize, replicas: usize, extra: &[&str]) -> RedisCluster {
        let mut args =
            vec!["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"];
        args.extend_from_slice(extra);
        let nodes: Vec<RedisServer> =
            (0..masters * (1 + replicas)).map(|_| RedisServer::start_cluster_node(&args)).collect();
        let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let status = Command::new(program("redis-cli"))
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "redis-cli --cluster create failed");
        let cluster = RedisCluster { nodes };
        cluster.wait_ok(Duration::from_secs(20));
        // cluster_state:ok says nothing of replication: a replica may still
        // be loading its first copy of its master.
        for master in &cluster.nodes[..masters] {
            cluster.wait_replicas_online(master, replicas, Duration::from_secs(60));
        }
        cluster
    }

    /// Waits until `master` has `count` replicas with their link up.
    pub fn wait_replicas_online(&self, master: &RedisServer, count: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let info = replication_info(master);
            if replicas(&info).iter().filter(|r| r.online).count() >= count {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{count} replicas of {} not online in {timeout:?}:\n{info}",
                master.port
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until a replica of `master` has acknowledged every write the
    /// master had taken when this was called (its replication offset), so
    /// that killing the master loses nothing. Replicas acknowledge once a
    /// second; a loaded machine may take longer, hence `timeout`.
    pub fn wait_replicated(&self, master: &RedisServer, timeout: Duration) {
        let target = master_offset(&replication_info(master));
        let deadline = Instant::now() + timeout;
        loop {
            let info = replication_info(master);
            if replicas(&info).iter().any(|r| r.online && r.offset >= target) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no replica of {} acknowledged offset {target} in {timeout:?}:\n{info}",
                master.port
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until every node reports `cluster_state:ok`.
    pub fn wait_ok(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        'outer: while Instant::now() < deadline {
            for n in &self.nodes {
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut n.connect()).unwrap_or_default();
                if !info.contains("cluster_state:ok") {
                    std::thread::sleep(Duration::from_millis(100));
                    continue 'outer;
                }
            }
            return;
        }
        panic!("the cluster did not reach cluster_state:ok");
    }

    /// The node that serves `key`'s slot as master.
    pub fn owner_of(&self, key: &str) -> &RedisServer {
        let mut c = self.nodes[0].connect();
        let slot: i64 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query(&mut c).unwrap();
        let slots: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut c).unwrap();
        for range in slots {
            let redis::Value::Array(parts) = range else {
                continue;
            };
            let (Some(redis::Value::Int(lo)), Some(redis::Value::Int(hi))) = (parts.first(), parts.get(1)) else {
                continue;
            };
            if (*lo..=*hi).contains(&slot) {
                let Some(redis::Value::Array(master)) = parts.get(2) else {
                    continue;
                };
                let Some(redis::Value::Int(port)) = master.get(1) else {
                    continue;
                };
                return self.nodes.iter().find(|n| i64::from(n.port) == *port).unwrap();
            }
        }
        panic!("no master owns slot {slot}");
    }
}

/// `INFO replication` of a node.
fn replication_info(node: &RedisServer) -> String {
    redis::cmd("INFO").arg("replication").query(&mut node.connect()).unwrap()
}

/// `master_repl_offset` of a master's `INFO replication`.
fn master_offset(info: &str) -> u64 {
    info.lines().find_map(|l| l.strip_prefix("master_repl_offset:")).and_then(|v| v.trim().parse().ok()).unwrap()
}

/// A replica as its master's `INFO replication` lists it
/// (`slave0:ip=...,port=...,state=online,offset=...,lag=...`).
struct Replica {
    online: bool,
    offset: u64,
}

fn replicas(info: &str) -> Vec<Replica> {
    info.lines()
        .filter(|l| l.starts_with("slave") && l.contains(":ip="))
        .map(|l| {
            let field = |name: &str| l.split([':', ',']).find_map(|kv| kv.strip_prefix(name)).unwrap_or("");
            Replica { online: field("state=") == "online", offset: field("offset=").parse().unwrap_or(0) }
        })
        .collect()
}
