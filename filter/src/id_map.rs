//! Maps keyed by numbers the host chooses (context ids, call tokens),
//! hashed with aHash's fixed keys: no client picks these keys, so nothing
//! is gained by a random seed, which would import WASI's `random_get` into
//! every VM. aHash, not std's SipHash: the maps are read on every request,
//! and SipHash was 6% of a leased request's work in the module.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// A map keyed by host-chosen ids.
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<rustc_hash::FxHasher>>;
