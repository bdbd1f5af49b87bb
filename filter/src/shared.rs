//! proxy-wasm shared data: one byte store for every worker VM of a plugin,
//! with compare-and-swap. Keys are never deleted, so users of it keep a
//! fixed number of slots.

/// The host's shared data.
pub trait SharedData {
    /// The value and its CAS token, if the key exists.
    fn get(&self, key: &str) -> Option<(Vec<u8>, u32)>;
    /// Writes `value` if the key is still at `cas` (`None`: unconditionally).
    /// False when another worker wrote first.
    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool;
}

/// Compare-and-swap attempts before a read-modify-write gives way
/// (other workers kept writing first): its caller then does what is safe
/// without it (asks the store, refuses, or leaves the entry as it is).
pub const CAS_ATTEMPTS: usize = 8;

/// What a read-modify-write makes of the value it read.
pub enum Change<T> {
    /// Write this value (if nobody wrote the key since the read), then
    /// return `T`.
    Put(Vec<u8>, T),
    /// Write nothing; return `T`.
    Leave(T),
}

/// The one read-modify-write of shared data: reads `key`, lets `change`
/// decide from its value (`None`: never written) and writes what it says
/// with the read's CAS token, so another worker's write in between is
/// never lost; on such a write, reads again and decides afresh, at most
/// `CAS_ATTEMPTS` times. `None` when every attempt lost.
pub fn update<S, T>(shared: &S, key: &str, mut change: impl FnMut(Option<&[u8]>) -> Change<T>) -> Option<T>
where
    S: SharedData + ?Sized,
{
    for _ in 0..CAS_ATTEMPTS {
        let got = shared.get(key);
        let (bytes, cas) = match &got {
            Some((bytes, cas)) => (Some(bytes.as_slice()), Some(*cas)),
            None => (None, None),
        };
        match change(bytes) {
            Change::Leave(out) => return Some(out),
            Change::Put(value, out) => {
                if shared.set(key, &value, cas) {
                    return Some(out);
                }
            }
        }
    }
    None
}

/// Little-endian u64 fields of a shared-data value.
pub fn read_u64s<const N: usize>(bytes: &[u8]) -> Option<[u64; N]> {
    if bytes.len() != N * 8 {
        return None;
    }
    let mut out = [0u64; N];
    for (o, chunk) in out.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        *o = u64::from_le_bytes(b);
    }
    Some(out)
}

/// Encodes u64 fields for `read_u64s`.
pub fn write_u64s<const N: usize>(fields: [u64; N]) -> Vec<u8> {
    fields.iter().flat_map(|f| f.to_le_bytes()).collect()
}

#[cfg(test)]
pub(crate) mod fake {
    //! Shared data in a map, with CAS, for tests.
    use std::cell::{Cell, RefCell};
    use std::collections::HashMap;

    use super::SharedData;

    /// A single-threaded shared-data store.
    #[derive(Default)]
    pub struct FakeShared {
        map: RefCell<HashMap<String, (Vec<u8>, u32)>>,
        reads: Cell<u64>,
    }

    impl FakeShared {
        /// Number of keys written.
        pub fn len(&self) -> usize {
            self.map.borrow().len()
        }

        /// Number of reads so far.
        pub fn reads(&self) -> u64 {
            self.reads.get()
        }
    }

    impl SharedData for FakeShared {
        fn get(&self, key: &str) -> Option<(Vec<u8>, u32)> {
            self.reads.set(self.reads.get() + 1);
            self.map.borrow().get(key).cloned()
        }
        fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
            let mut map = self.map.borrow_mut();
            let current = map.get(key).map(|(_, c)| *c);
            if let (Some(want), Some(have)) = (cas, current) {
                if want != have {
                    return false;
                }
            }
            map.insert(key.to_string(), (value.to_vec(), current.unwrap_or(0) + 1));
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn u64_fields_round_trip_and_wrong_sizes_are_refused() {
        let bytes = write_u64s([1, u64::MAX, 42]);
        assert_eq!(read_u64s::<3>(&bytes), Some([1, u64::MAX, 42]));
        assert_eq!(read_u64s::<2>(&bytes), None);
        assert_eq!(read_u64s::<1>(&[1, 2, 3]), None);
    }
}
