//! The filter shipped as an OCI wasm image and as ready-to-apply
//! deployment examples: the image's format as the consumers read it, its
//! round trip through a real registry, Envoy fetching and verifying the
//! module itself, and every example of envoy-config/ validated.

// A test crate: a failed step in a helper is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod crds;
mod envoy_examples;
mod image;
mod kubernetes;
mod registry;
mod remote_fetch;

use std::path::PathBuf;

use host_tests::oci::{build_image, Layout};
use host_tests::paths::dist;
use host_tests::process::TempDir;

/// The workspace version: the image's tag and version label.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// An image of dist/ratelimit.wasm, freshly built into a temporary directory.
pub struct Built {
    /// The layout, named like `make image` names it (`.../ratelimit`).
    pub layout: Layout,
    /// What the script printed.
    pub stdout: String,
    /// The module's bytes.
    pub wasm: Vec<u8>,
    _dir: TempDir,
}

/// Builds the image of dist/ratelimit.wasm the way `make image` does.
pub fn build() -> Built {
    let dir = TempDir::new("oci");
    let out: PathBuf = dir.path().join("ratelimit");
    let stdout = build_image(&dist("ratelimit.wasm"), &out);
    let wasm = std::fs::read(dist("ratelimit.wasm")).unwrap();
    Built { layout: Layout::open(&out), stdout, wasm, _dir: dir }
}

/// Fills envoy-config/envoy-remote.yaml: the common markers from `t`, the
/// module fetched from `http://127.0.0.1:<source>/ratelimit.wasm` and
/// checked against `sha256`.
pub fn render_remote(t: &host_tests::envoy::EnvoyTemplate, source: u16, sha256: &str) -> String {
    host_tests::envoy::render_text(
        &host_tests::envoy::config_text("envoy-remote.yaml"),
        t,
        &[
            ("module-uri", format!("uri: http://127.0.0.1:{source}/ratelimit.wasm")),
            ("module-sha256", format!("sha256: \"{sha256}\"")),
            ("module-source", format!("socket_address: {{ address: 127.0.0.1, port_value: {source} }}")),
        ],
    )
}
