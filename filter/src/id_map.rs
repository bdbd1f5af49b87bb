//! Maps keyed by numbers the host chooses (context ids, call tokens),
//! hashed with FxHash: no client picks these keys, so they need neither a
//! random seed (which would import WASI's `random_get` into every VM) nor
//! resistance to crafted collisions. Not std's SipHash: these maps are read
//! on every request, and SipHash was about 2,700 of the 6,900 wasm
//! instructions of a request no rule matches (docs/contributing.md, "Dependencies").

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// A map keyed by host-chosen ids.
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<rustc_hash::FxHasher>>;
