//! The store's health as Redis reports it (`INFO`): memory, evictions and
//! the eviction policy. The silent failure of a rate limiter is Redis
//! evicting live counters under memory pressure: every request then
//! succeeds and the limits are gone. These figures make it loud.

/// What the filter exports from `INFO`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// `used_memory`, bytes.
    pub used_memory: u64,
    /// `maxmemory`, bytes (0 = no limit).
    pub maxmemory: u64,
    /// `evicted_keys` since the server started.
    pub evicted_keys: u64,
    /// `maxmemory_policy`.
    pub policy: String,
    /// `redis_version` (major, minor, patch), when reported.
    pub version: Option<(u32, u32, u32)>,
}

/// The oldest Redis the decision script runs on.
pub const MIN_REDIS: (u32, u32, u32) = (6, 2, 0);

fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let mut parts = v.trim().split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??, parts.next().flatten().unwrap_or(0)))
}

impl StoreStats {
    /// Reads the fields from `INFO` text; `None` if none of them is there
    /// (e.g. a proxy that does not pass INFO through).
    pub fn parse(info: &str) -> Option<StoreStats> {
        let mut stats = StoreStats::default();
        let mut seen = false;
        for line in info.lines() {
            let Some((name, value)) = line.trim_end_matches('\r').split_once(':') else { continue };
            let number = || value.parse::<u64>().unwrap_or(0);
            match name {
                "used_memory" => stats.used_memory = number(),
                "maxmemory" => stats.maxmemory = number(),
                "evicted_keys" => stats.evicted_keys = number(),
                "maxmemory_policy" => stats.policy = value.chars().take(32).collect(),
                "redis_version" => stats.version = parse_version(value),
                _ => continue,
            }
            seen = true;
        }
        seen.then_some(stats)
    }

    /// Whether the policy may evict keys without a TTL-based preference,
    /// i.e. live counters (`allkeys-lru`, `allkeys-lfu`, `allkeys-random`).
    pub fn can_evict_counters(&self) -> bool {
        self.policy.starts_with("allkeys-")
    }

    /// The warning to log, if the server is older than the script needs.
    pub fn version_warning(&self) -> Option<String> {
        let (a, b, c) = self.version?;
        ((a, b, c) < MIN_REDIS).then(|| {
            format!(
                "ratelimit: the store runs Redis {a}.{b}.{c}; this filter needs Redis {}.{}.{} or newer (or Valkey): decisions will fail",
                MIN_REDIS.0, MIN_REDIS.1, MIN_REDIS.2
            )
        })
    }

    /// The warning to log, if the policy can evict live counters.
    pub fn warning(&self) -> Option<String> {
        self.can_evict_counters().then(|| {
            format!(
                "ratelimit: Redis maxmemory-policy is {}: under memory pressure it can evict live counters and silently lift limits; use volatile-ttl",
                self.policy
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    const INFO: &str = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\nmaxmemory:2097152\r\nmaxmemory_policy:allkeys-lru\r\n\r\n# Stats\r\nevicted_keys:42\r\n";

    #[test]
    #[wasm_bindgen_test]
    fn reads_memory_evictions_and_policy() {
        let s = StoreStats::parse(INFO).unwrap();
        assert_eq!(
            s,
            StoreStats {
                used_memory: 1_048_576,
                maxmemory: 2_097_152,
                evicted_keys: 42,
                policy: "allkeys-lru".into(),
                version: None
            }
        );
        assert!(s.can_evict_counters());
        assert_eq!(
            s.warning().unwrap(),
            "ratelimit: Redis maxmemory-policy is allkeys-lru: under memory pressure it can evict live counters and silently lift limits; use volatile-ttl"
        );
    }

    #[test]
    #[wasm_bindgen_test]
    fn ttl_based_policies_are_quiet_and_garbage_is_ignored() {
        let s = StoreStats::parse("maxmemory_policy:volatile-ttl\r\n").unwrap();
        assert_eq!(s.warning(), None);
        assert_eq!(StoreStats::parse("ERR unknown command"), None);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_redis_older_than_6_2_is_named_in_one_line() {
        let old = StoreStats::parse("redis_version:6.0.16\r\n").unwrap();
        assert_eq!(
            old.version_warning().unwrap(),
            "ratelimit: the store runs Redis 6.0.16; this filter needs Redis 6.2.0 or newer (or Valkey): decisions will fail"
        );
        assert_eq!(StoreStats::parse("redis_version:6.2.0\r\n").unwrap().version_warning(), None);
        assert_eq!(StoreStats::parse("redis_version:7.0.15\r\n").unwrap().version_warning(), None);
        assert_eq!(StoreStats::parse("redis_version:garbage\r\n").unwrap().version_warning(), None);
    }
}
