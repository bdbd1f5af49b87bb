//! The image through a real registry: pushed with `.ci/oci_push.sh` (what
//! `make push` runs), served as the consumers fetch it, pulled back with
//! skopeo, every byte kept.

use host_tests::oci::{inspect_raw, layer_members, pull, push, sha256_hex, Layout, MANIFEST_TYPE};
use host_tests::process::TempDir;
use host_tests::registry::Registry;

use crate::{build, VERSION};

#[test]
fn push_serve_and_pull_keep_the_manifest_digest_and_the_module_bytes() {
    let built = build();
    let digest = built.layout.manifest_digest();
    let registry = Registry::start();
    let prefix = format!("{}/acme", registry.host());

    let out = push(&prefix, &built.layout.dir);
    assert_eq!(out, format!("pushed {prefix}/ratelimit:{VERSION}\n  manifest digest: {digest}\n"));

    // What Istio, Envoy Gateway and Higress get when they resolve the tag:
    // a single OCI manifest (not an index), the very bytes of the layout.
    let local_manifest = built.layout.blob(&digest);
    for reference in [VERSION, digest.as_str()] {
        let served = registry.manifest("acme/ratelimit", reference);
        assert_eq!(served.content_type, MANIFEST_TYPE);
        assert_eq!(served.digest, digest);
        assert!(served.body == local_manifest, "the registry serves other manifest bytes for {reference}");
    }
    assert!(inspect_raw(&format!("{prefix}/ratelimit:{VERSION}")) == local_manifest);

    // The consumers' extraction, on the registry's own blob: the last (and
    // only) layer, gunzipped, untarred, plugin.wasm.
    let manifest = built.layout.manifest();
    let layer_digest = manifest["layers"][0]["digest"].as_str().unwrap();
    let members = layer_members(&registry.blob("acme/ratelimit", layer_digest));
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].path, "plugin.wasm");
    assert!(members[0].bytes == built.wasm, "the registry's layer does not hold dist/ratelimit.wasm");

    // Pulled back into a fresh layout: same digest, same module.
    let dir = TempDir::new("oci-pull");
    pull(&format!("{prefix}/ratelimit:{VERSION}"), dir.path(), VERSION);
    let pulled = Layout::open(dir.path());
    assert_eq!(pulled.manifest_digest(), digest);
    let pulled_layer = pulled.blob(pulled.manifest()["layers"][0]["digest"].as_str().unwrap());
    let members = layer_members(&pulled_layer);
    assert!(members.len() == 1 && members[0].bytes == built.wasm, "the pulled image does not hold dist/ratelimit.wasm");
    assert_eq!(sha256_hex(&members[0].bytes), sha256_hex(&built.wasm));
}
