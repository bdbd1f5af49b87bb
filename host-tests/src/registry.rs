//! A local OCI registry: Debian's `docker-registry` (the Distribution
//! server) with a config of our own: 127.0.0.1 on a free port, storage in a
//! temporary directory, no authentication. (The packaged default config
//! listens on all interfaces with htpasswd: never used here.)

use std::process::Command;
use std::time::Duration;

use crate::paths::program;
use crate::process::{free_port, wait_for_port, Guard, TempDir};

/// The media types a consumer (Istio, Envoy Gateway, Higress) accepts when
/// it asks for a manifest; the registry answers with the stored one.
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
    application/vnd.oci.image.index.v1+json, \
    application/vnd.docker.distribution.manifest.v2+json, \
    application/vnd.docker.distribution.manifest.list.v2+json";

/// A running registry, stopped on drop.
pub struct Registry {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// The process.
    pub process: Guard,
    _dir: TempDir,
}

/// A manifest as the registry serves it.
#[derive(Debug)]
pub struct ServedManifest {
    /// The Content-Type header.
    pub content_type: String,
    /// The Docker-Content-Digest header (`sha256:<hex>`).
    pub digest: String,
    /// The bytes.
    pub body: Vec<u8>,
}

impl Registry {
    /// Starts a registry and waits until it answers `/v2/`.
    pub fn start() -> Registry {
        let dir = TempDir::new("registry");
        let port = free_port();
        let storage = dir.path().join("storage");
        std::fs::create_dir_all(&storage).unwrap();
        let config = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
             http:\n  addr: 127.0.0.1:{port}\n",
            storage.display()
        );
        let path = dir.path().join("config.yml");
        std::fs::write(&path, config).unwrap();
        let mut cmd = Command::new(program("docker-registry"));
        cmd.arg("serve").arg(&path);
        let process = Guard::spawn("docker-registry", cmd, &dir.path().join("registry.log"));
        wait_for_port(port, "docker-registry", Duration::from_secs(10));
        let registry = Registry { port, process, _dir: dir };
        let status = crate::http::send(&crate::http::agent(Duration::from_secs(5)), "GET", &registry.url("/v2/"), &[]);
        assert_eq!(status.status, 200, "registry /v2/: {status:?}");
        registry
    }

    /// `127.0.0.1:<port>`, the host part of image references.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// An http URL on the registry.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// GET /v2/<repository>/manifests/<reference>, as a consumer asks for it.
    pub fn manifest(&self, repository: &str, reference: &str) -> ServedManifest {
        let agent = crate::http::agent(Duration::from_secs(5));
        let url = self.url(&format!("/v2/{repository}/manifests/{reference}"));
        let mut resp = agent.get(&url).header("accept", MANIFEST_ACCEPT).call().unwrap();
        assert_eq!(resp.status().as_u16(), 200, "GET {url}");
        let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let (content_type, digest) = (header("content-type"), header("docker-content-digest"));
        let body = resp.body_mut().read_to_vec().unwrap();
        ServedManifest { content_type, digest, body }
    }

    /// GET /v2/<repository>/blobs/<digest>.
    pub fn blob(&self, repository: &str, digest: &str) -> Vec<u8> {
        let agent = crate::http::agent(Duration::from_secs(5));
        let url = self.url(&format!("/v2/{repository}/blobs/{digest}"));
        let mut resp = agent.get(&url).call().unwrap();
        assert_eq!(resp.status().as_u16(), 200, "GET {url}");
        resp.body_mut().with_config().limit(64 << 20).read_to_vec().unwrap()
    }
}
