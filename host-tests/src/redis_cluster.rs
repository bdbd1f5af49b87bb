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
        cluster
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
