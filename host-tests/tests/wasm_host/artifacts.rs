//! What each build imports: stock Envoy refuses a module that imports an
//! unknown function, so the default build must not import the Redis calls,
//! and the Redis build must import them and export their callback.

use host_tests::wasm_host::artifact::{function_exports, function_imports};
use host_tests::wasm_host::Artifact;

const REDIS_IMPORTS: [&str; 2] = ["env.proxy_redis_init", "env.proxy_redis_call"];

#[test]
fn the_default_build_imports_no_redis_call() {
    let imports = function_imports(Artifact::Webdis);
    assert!(imports.contains(&"env.proxy_http_call".to_string()));
    let redis: Vec<&String> = imports.iter().filter(|i| i.contains("redis")).collect();
    assert!(redis.is_empty(), "{redis:?}");
    assert!(!function_exports(Artifact::Webdis).contains(&"proxy_on_redis_call_response".to_string()));
    // Only what wasm32-wasip1's std needs from WASI, and entropy (seeding
    // concurrency slot ids): nothing that touches the machine.
    let mut wasi: Vec<&String> = imports.iter().filter(|i| i.starts_with("wasi_snapshot_preview1.")).collect();
    wasi.sort();
    assert_eq!(
        wasi,
        [
            "wasi_snapshot_preview1.environ_get",
            "wasi_snapshot_preview1.environ_sizes_get",
            "wasi_snapshot_preview1.fd_write",
            "wasi_snapshot_preview1.proc_exit",
            "wasi_snapshot_preview1.random_get"
        ]
    );
}

#[test]
fn the_redis_build_imports_the_redis_calls_and_exports_their_callback() {
    let imports = function_imports(Artifact::Redis);
    for name in REDIS_IMPORTS {
        assert!(imports.contains(&name.to_string()), "{name} missing from {imports:?}");
    }
    assert!(function_exports(Artifact::Redis).contains(&"proxy_on_redis_call_response".to_string()));
}

/// A `&str` cut where the cut may panic (`&s[a..b]`, `str::split_at`, a
/// search for a `&str` pattern) links core's char-boundary panic, whose
/// message prints a char with `Debug`: 10 KB of Unicode tables the module
/// has no other use for (docs/BENCHMARKS.md, "Room in the module"). Cut
/// bytes, or use `get`, `split_at_checked`, `strip_prefix`.
#[test]
fn neither_build_links_the_char_boundary_panic() {
    for artifact in [Artifact::Webdis, Artifact::Redis] {
        let module = std::fs::read(artifact.path()).unwrap();
        let panic_text = b"is not a char boundary";
        assert!(!module.windows(panic_text.len()).any(|w| w == panic_text), "{} links it", artifact.file_name());
    }
}
