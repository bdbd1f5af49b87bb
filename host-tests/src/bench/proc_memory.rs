//! Memory of a running Envoy as the stream bench reads it: its resident set
//! (/proc/<pid>/status), and the wasm VMs' linear memory actually resident
//! (/proc/<pid>/smaps). V8 reserves about 8 GiB of address space per
//! linear memory and makes only its used start read-write, so a VM's
//! memory is the read-write mapping right below each such reservation.

/// Reservations at least this large are taken for a linear memory's.
const RESERVATION: u64 = 7 << 30;

/// One mapping of smaps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `rw-p`, `---p`, ...
    pub perms: String,
    /// Resident bytes.
    pub rss: u64,
}

/// The mappings of an smaps text, in address order.
pub fn parse_smaps(text: &str) -> Vec<Mapping> {
    let mut maps: Vec<Mapping> = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or_default();
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(start), Ok(end)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                let perms = words.next().unwrap_or_default().to_string();
                maps.push(Mapping { start, end, perms, rss: 0 });
                continue;
            }
        }
        if first == "Rss:" {
            if let (Some(m), Some(kb)) = (maps.last_mut(), words.next().and_then(|v| v.parse::<u64>().ok())) {
                m.rss = kb * 1024;
            }
        }
    }
    maps
}

/// Resident bytes of the linear memories: each read-write mapping that ends
/// where an inaccessible reservation of `RESERVATION` or more begins.
pub fn linear_memory(maps: &[Mapping]) -> u64 {
    maps.windows(2)
        .filter(|w| {
            w[0].perms == "rw-p"
                && w[0].end == w[1].start
                && w[1].perms == "---p"
                && w[1].end - w[1].start >= RESERVATION
        })
        .map(|w| w[0].rss)
        .sum()
}

/// Resident linear memory of the VMs in `pid`.
pub fn linear_memory_of(pid: u32) -> u64 {
    linear_memory(&parse_smaps(&std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default()))
}

/// Resident set size of `pid`, bytes (`VmRSS`).
pub fn rss_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next().and_then(|kb| kb.parse::<u64>().ok()))
        .map_or(0, |kb| kb * 1024)
}

/// Envoy's heap in use: `allocated` of the admin `/memory` JSON.
pub fn heap_allocated(memory_json: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(memory_json).ok()?;
    match &v["allocated"] {
        serde_json::Value::String(s) => s.parse().ok(),
        n => n.as_u64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
7f82e57d0000-7f82e58e0000 rw-p 00000000 00:00 0
Size:               1088 kB
Rss:                  48 kB
7f82e58e0000-7f84e57e0000 ---p 00000000 00:00 0
Rss:                   0 kB
7f8500000000-7f8500001000 rw-p 00000000 00:00 0
Rss:                   4 kB
7f8500002000-7f8700000000 ---p 00000000 00:00 0
Rss:                   0 kB
55d0c0000000-55d0c0100000 r-xp 00000000 08:01 123 /usr/bin/envoy
Rss:                1024 kB
";

    #[test]
    fn only_the_mapping_adjoining_a_reservation_counts() {
        let maps = parse_smaps(SMAPS);
        assert_eq!(maps.len(), 5);
        assert_eq!((maps[0].perms.as_str(), maps[0].rss), ("rw-p", 48 * 1024));
        // The second rw-p mapping is not adjacent to its neighbour.
        assert_eq!(linear_memory(&maps), 48 * 1024);
    }

    #[test]
    fn allocated_is_read_from_envoys_memory_json() {
        assert_eq!(heap_allocated(r#"{"allocated": "10818024", "heap_size": "35651584"}"#), Some(10_818_024));
        assert_eq!(heap_allocated("{}"), None);
    }
}
