//! Where the project's files and tools are.

use std::path::PathBuf;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The benchmark report `make bench` and `make soak` write, from the root
/// (its plots, `BENCHMARKS-<figure>.png`, sit beside it).
pub const BENCHMARKS: &str = "docs/BENCHMARKS.md";

/// A file under `dist/` (or under `$RATELIMIT_DIST`: the builds of
/// another commit, e.g. to see the simulator find a bug fixed since), or
/// a clear failure telling how to build it.
pub fn dist(name: &str) -> PathBuf {
    let dir = std::env::var_os("RATELIMIT_DIST").map_or_else(|| root().join("dist"), PathBuf::from);
    let path = dir.join(name);
    assert!(path.is_file(), "{} is missing: run `make build` first", path.display());
    path
}

/// The project's Envoy binary (installed by `make setup`).
pub fn envoy() -> PathBuf {
    let path = root().join(".venv/bin/envoy");
    assert!(path.exists(), "{} is missing: run `make setup` first", path.display());
    path
}

/// A program from the machine (installed by `make setup`).
pub fn program(name: &str) -> PathBuf {
    for dir in ["/usr/bin", "/usr/sbin", "/usr/local/bin"] {
        let p = PathBuf::from(dir).join(name);
        if p.exists() {
            return p;
        }
    }
    panic!("{name} is not installed: run `make setup` first")
}
