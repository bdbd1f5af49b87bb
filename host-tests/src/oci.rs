//! The OCI wasm image: built by `.ci/oci_image.py`, pushed by
//! `.ci/oci_push.sh`, pulled back with skopeo, read the way the consumers
//! (Istio, Envoy Gateway, Higress) read it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::paths::{program, root};

/// The manifest media type of the image (and of what the registry serves).
pub const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The config media type.
pub const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// The only layer media type the consumers' compat extraction takes (OCI).
pub const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// Lower-case hex sha256 of `bytes` (the filter's own implementation, not
/// the script's hashlib: two implementations agreeing).
pub fn sha256_hex(bytes: &[u8]) -> String {
    ratelimit::digest::sha256(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs a command, failing the test with its output if it fails.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `.ci/oci_image.py WASM OUT` (what `make image` runs); its stdout.
pub fn build_image(wasm: &Path, out: &Path) -> String {
    let output = run(Command::new(root().join(".ci/oci_image.py")).arg(wasm).arg(out));
    String::from_utf8(output.stdout).unwrap()
}

/// Runs `INSECURE=1 .ci/oci_push.sh REGISTRY LAYOUT` (what `make push` runs); its stdout.
pub fn push(registry: &str, layout: &Path) -> String {
    let output = run(Command::new(root().join(".ci/oci_push.sh")).env("INSECURE", "1").arg(registry).arg(layout));
    String::from_utf8(output.stdout).unwrap()
}

/// Pulls `docker://<reference>` over plain HTTP into the layout `dir` as `tag`.
pub fn pull(reference: &str, dir: &Path, tag: &str) {
    run(Command::new(program("skopeo"))
        .args(["copy", "--quiet", "--src-tls-verify=false"])
        .args([format!("docker://{reference}"), format!("oci:{}:{tag}", dir.display())]));
}

/// The raw manifest bytes a registry serves for `docker://<reference>`.
pub fn inspect_raw(reference: &str) -> Vec<u8> {
    run(Command::new(program("skopeo"))
        .args(["inspect", "--raw", "--tls-verify=false"])
        .arg(format!("docker://{reference}")))
    .stdout
}

/// An OCI image layout directory holding one tagged manifest.
pub struct Layout {
    /// The directory.
    pub dir: PathBuf,
}

impl Layout {
    /// Opens a layout directory.
    pub fn open(dir: &Path) -> Layout {
        Layout { dir: dir.to_path_buf() }
    }

    /// index.json, parsed.
    pub fn index(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.dir.join("index.json")).unwrap()).unwrap()
    }

    /// The one manifest descriptor of index.json (fails if there are several).
    pub fn descriptor(&self) -> Value {
        let index = self.index();
        let manifests = index["manifests"].as_array().unwrap();
        assert_eq!(manifests.len(), 1, "index.json of {} lists {manifests:?}", self.dir.display());
        manifests[0].clone()
    }

    /// The manifest digest, `sha256:<hex>`.
    pub fn manifest_digest(&self) -> String {
        self.descriptor()["digest"].as_str().unwrap().to_string()
    }

    /// The tag (`org.opencontainers.image.ref.name`).
    pub fn tag(&self) -> String {
        self.descriptor()["annotations"]["org.opencontainers.image.ref.name"].as_str().unwrap().to_string()
    }

    /// A blob's bytes, checked against its digest.
    pub fn blob(&self, digest: &str) -> Vec<u8> {
        let hex = digest.strip_prefix("sha256:").unwrap();
        let bytes = std::fs::read(self.dir.join("blobs/sha256").join(hex)).unwrap();
        assert_eq!(sha256_hex(&bytes), hex, "blob {digest} of {} is corrupt", self.dir.display());
        bytes
    }

    /// The manifest, parsed.
    pub fn manifest(&self) -> Value {
        serde_json::from_slice(&self.blob(&self.manifest_digest())).unwrap()
    }

    /// All files of the layout, relative path and bytes, sorted.
    pub fn files(&self) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        collect(&self.dir, &self.dir, &mut out);
        out.sort();
        out
    }
}

fn collect(base: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(base, &path, out);
        } else {
            let rel = path.strip_prefix(base).unwrap().display().to_string();
            out.push((rel, std::fs::read(&path).unwrap()));
        }
    }
}

/// One member of a layer's tar.
#[derive(Debug, PartialEq, Eq)]
pub struct TarMember {
    /// Its path in the archive.
    pub path: String,
    /// Whether it is a regular file.
    pub regular: bool,
    /// Permission bits.
    pub mode: u32,
    /// Modification time (seconds since 1970).
    pub mtime: u64,
    /// Owner.
    pub uid: u64,
    /// Group.
    pub gid: u64,
    /// Its contents.
    pub bytes: Vec<u8>,
}

/// The members of a gzip-compressed tar layer, in archive order.
pub fn layer_members(gzipped: &[u8]) -> Vec<TarMember> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(gzipped));
    let mut out = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().display().to_string();
        let header = entry.header();
        let regular = header.entry_type().is_file();
        let (mode, mtime) = (header.mode().unwrap(), header.mtime().unwrap());
        let (uid, gid) = (header.uid().unwrap(), header.gid().unwrap());
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        out.push(TarMember { path, regular, mode, mtime, uid, gid, bytes });
    }
    out
}
