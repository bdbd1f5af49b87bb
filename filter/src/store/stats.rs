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
            StoreStats { used_memory: 1_048_576, maxmemory: 2_097_152, evicted_keys: 42, policy: "allkeys-lru".into() }
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
}
