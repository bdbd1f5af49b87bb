//! Maps keyed by numbers the host chooses (context ids, call tokens),
//! hashed without a random seed: std's default hasher would import WASI's
//! `random_get` for every VM, and no client picks these keys.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// A map keyed by host-chosen ids.
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<DefaultHasher>>;
