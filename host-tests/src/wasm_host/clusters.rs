//! Envoy clusters the module may name, and where they lead on this machine.

use std::collections::BTreeMap;

/// One cluster's upstream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cluster {
    /// A webdis (or any HTTP server) on 127.0.0.1.
    Http {
        /// Its port.
        port: u16,
    },
    /// A redis-server on 127.0.0.1, for the Redis-call hostcalls.
    Redis {
        /// Its port.
        port: u16,
    },
}

/// Clusters by name.
pub type Clusters = BTreeMap<String, Cluster>;

/// A Redis cluster string as the module passes it: `name?db=N&...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisTarget {
    /// The Envoy cluster name.
    pub name: String,
    /// The database to SELECT on each new connection (`db=`), if any.
    pub db: Option<u32>,
}

impl RedisTarget {
    /// Parses `name?db=N&buffer_flush_timeout=0&...`; an error for a `db`
    /// that is not a number.
    pub fn parse(s: &str) -> Result<RedisTarget, String> {
        let (name, query) = s.split_once('?').unwrap_or((s, ""));
        let mut db = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if k == "db" {
                db = Some(v.parse().map_err(|_| format!("db={v} is not a database number"))?);
            }
        }
        Ok(RedisTarget { name: name.to_string(), db })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_string_may_carry_a_db() {
        assert_eq!(RedisTarget::parse("redis").unwrap(), RedisTarget { name: "redis".into(), db: None });
        let t = RedisTarget::parse("outbound|6379||redis.static?db=3&buffer_flush_timeout=0").unwrap();
        assert_eq!(t, RedisTarget { name: "outbound|6379||redis.static".into(), db: Some(3) });
        assert!(RedisTarget::parse("r?db=x").is_err());
    }
}
