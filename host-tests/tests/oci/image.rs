//! The layout `make image` writes is the compat variant Istio, Envoy
//! Gateway and Higress extract, and it is reproducible.

use std::process::Command;

use host_tests::oci::{layer_members, sha256_hex, TarMember, CONFIG_TYPE, LAYER_TYPE, MANIFEST_TYPE};
use serde_json::json;

use crate::{build, VERSION};

fn git_head() -> String {
    let out = Command::new("git").args(["rev-parse", "HEAD"]).current_dir(host_tests::paths::root()).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn one_manifest_one_gzip_tar_layer_holding_only_plugin_wasm() {
    let built = build();
    let layout = &built.layout;
    assert_eq!(std::fs::read_to_string(layout.dir.join("oci-layout")).unwrap(), r#"{"imageLayoutVersion":"1.0.0"}"#);
    let descriptor = layout.descriptor();
    assert_eq!(descriptor["mediaType"], MANIFEST_TYPE, "a manifest, never an index");
    assert_eq!(layout.tag(), VERSION);

    let manifest = layout.manifest();
    let labels = json!({
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.revision": git_head(),
        "org.opencontainers.image.source": "https://github.com/envoy-ratelimit-wasm/envoy-ratelimit-wasm",
        "org.opencontainers.image.title": "ratelimit",
        "org.opencontainers.image.version": VERSION,
    });
    let mut annotations = labels.clone();
    annotations["module.wasm.image/variant"] = "compat".into();
    assert_eq!(manifest["schemaVersion"], 2);
    assert_eq!(manifest["mediaType"], MANIFEST_TYPE);
    assert_eq!(manifest["annotations"], annotations);
    assert_eq!(manifest["config"]["mediaType"], CONFIG_TYPE);

    // Exactly one layer, gzip tar: the consumers read only the last one and
    // refuse any other media type.
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{layers:?}");
    assert_eq!(layers[0]["mediaType"], LAYER_TYPE);
    let gzipped = layout.blob(layers[0]["digest"].as_str().unwrap());
    assert_eq!(layers[0]["size"], gzipped.len());
    assert_eq!(
        layer_members(&gzipped),
        [TarMember {
            path: "plugin.wasm".into(),
            regular: true,
            mode: 0o644,
            mtime: 0,
            uid: 0,
            gid: 0,
            bytes: built.wasm.clone()
        }],
        "the layer's tar must hold plugin.wasm at its root and nothing else"
    );

    let config: serde_json::Value =
        serde_json::from_slice(&layout.blob(manifest["config"]["digest"].as_str().unwrap())).unwrap();
    let mut tar = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gzipped[..]), &mut tar).unwrap();
    assert_eq!(
        config,
        json!({
            "architecture": "wasm",
            "os": "wasip1",
            "config": { "Labels": labels },
            "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{}", sha256_hex(&tar))] },
        })
    );
}

#[test]
fn the_script_prints_the_manifest_digest_and_the_raw_wasm_sha256() {
    let built = build();
    let out = built.layout.dir.display();
    assert_eq!(
        built.stdout,
        format!(
            "{out} (oci:{out}:{VERSION})\n  manifest digest: {}  (Istio/Higress sha256, Envoy Gateway image.sha256)\n  \
             wasm sha256:     {}  (Envoy code.remote.sha256, Envoy Gateway http.sha256)\n",
            built.layout.manifest_digest(),
            sha256_hex(&built.wasm),
        )
    );
}

#[test]
fn two_builds_are_byte_identical() {
    let (a, b) = (build(), build());
    assert_eq!(a.layout.manifest_digest(), b.layout.manifest_digest());
    let (fa, fb) = (a.layout.files(), b.layout.files());
    let names: Vec<&str> = fa.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(names.len(), 5, "oci-layout, index.json and three blobs: {names:?}");
    assert!(fa == fb, "two builds of one module differ");
}

#[test]
fn the_gzip_header_carries_no_time_and_no_name() {
    let built = build();
    let manifest = built.layout.manifest();
    let gzipped = built.layout.blob(manifest["layers"][0]["digest"].as_str().unwrap());
    assert_eq!(gzipped[..3], [0x1f, 0x8b, 8], "gzip, deflate");
    assert_eq!(gzipped[3], 0, "no FNAME or other optional header fields");
    assert_eq!(gzipped[4..8], [0, 0, 0, 0], "MTIME 0");
}
