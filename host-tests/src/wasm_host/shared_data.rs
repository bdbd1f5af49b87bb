//! Shared data: one key-value store for every VM of the plugin (Envoy's
//! worker threads), with compare-and-swap exactly as proxy-wasm-cpp-host's
//! `SharedData`: every write takes the next CAS token (never 0); a write
//! with a non-zero CAS fails unless the key still has that token; a write
//! with CAS 0, or to a missing key, always succeeds.

use std::collections::BTreeMap;

/// The store.
#[derive(Debug, Default)]
pub struct SharedData {
    entries: BTreeMap<String, (Vec<u8>, u32)>,
    last_cas: u32,
}

/// Why a write was refused.
#[derive(Debug, PartialEq, Eq)]
pub struct CasMismatch;

impl SharedData {
    /// The value and its CAS token.
    pub fn get(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        self.entries.get(key).cloned()
    }

    /// Writes `value` unless `cas` is non-zero and stale.
    pub fn set(&mut self, key: &str, value: &[u8], cas: u32) -> Result<(), CasMismatch> {
        if let Some((_, current)) = self.entries.get(key) {
            if cas != 0 && cas != *current {
                return Err(CasMismatch);
            }
        }
        self.last_cas = self.last_cas.wrapping_add(1).max(1);
        self.entries.insert(key.to_string(), (value.to_vec(), self.last_cas));
        Ok(())
    }

    /// Every key, sorted (shared data never shrinks: tests check bounds).
    pub fn keys(&self) -> Vec<String> {
        self.entries.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cas_guards_writes_like_envoy() {
        let mut s = SharedData::default();
        assert_eq!(s.get("k"), None);
        s.set("k", b"a", 0).unwrap();
        let (_, cas) = s.get("k").unwrap();
        assert_ne!(cas, 0);
        s.set("k", b"b", cas).unwrap();
        assert_eq!(s.set("k", b"c", cas), Err(CasMismatch), "a stale token loses");
        s.set("k", b"d", 0).unwrap();
        assert_eq!(s.get("k").unwrap().0, b"d");
        s.set("new", b"x", 12345).unwrap();
    }
}
