#!/usr/bin/env python3
"""Writes a proxy-wasm module as an OCI image layout, without a Docker engine.

    .ci/oci_image.py dist/ratelimit.wasm dist/oci/ratelimit

The image is the "compat" variant of the Wasm image spec, the one Istio,
Envoy Gateway and Higress all extract: ONE manifest (never an index in the
registry) whose ONE layer is a gzip tar holding `plugin.wasm` at its root,
annotated `module.wasm.image/variant=compat`.

The same module and the same commit give the same bytes, so the same
manifest digest: fixed tar metadata (mtime, owner, mode), gzip mtime 0, JSON
with sorted keys and no whitespace, no "created" time. (gzip output may
differ between zlib versions, so compare digests on one machine only.)

Prints the two sha256 values consumers ask for: the manifest digest (Istio
`sha256`, Envoy Gateway `image.sha256`, Higress `sha256`) and the raw wasm
sha256 (Envoy `vm_config.code.remote.sha256`, Envoy Gateway `http.sha256`).
"""

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
# The name every consumer looks for inside the layer.
WASM_NAME = "plugin.wasm"
# Any fixed time would do; 0 says plainly that it is not a build time.
FIXED_MTIME = 0


def canonical_json(value):
    """The one byte form of a JSON value: sorted keys, no spaces."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def layer_tar(wasm):
    """An uncompressed tar whose only member is plugin.wasm, with fixed metadata."""
    info = tarfile.TarInfo(WASM_NAME)
    info.size = len(wasm)
    info.mode = 0o644
    info.mtime = FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    buf = io.BytesIO()
    # USTAR: no PAX headers, whose content could vary with the environment.
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(wasm))
    return buf.getvalue()


def workspace_package():
    """[workspace.package] of Cargo.toml: version, repository, license."""
    with open(ROOT / "Cargo.toml", "rb") as f:
        return tomllib.load(f)["workspace"]["package"]


def source_revision():
    """The commit the module was built from, or "unknown" outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def build(wasm_path, out_dir, package, revision):
    """Writes the layout to out_dir; returns (tag, manifest digest, wasm sha256)."""
    wasm = Path(wasm_path).read_bytes()
    name = Path(wasm_path).stem
    blobs = {}

    def blob(media_type, data):
        digest = "sha256:" + sha256(data)
        blobs[digest] = data
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    tar = layer_tar(wasm)
    layer = blob(LAYER_TYPE, gzip.compress(tar, compresslevel=9, mtime=0))
    labels = {
        "org.opencontainers.image.title": name,
        "org.opencontainers.image.version": package["version"],
        "org.opencontainers.image.revision": revision,
        "org.opencontainers.image.source": package["repository"],
        "org.opencontainers.image.licenses": package["license"],
    }
    config = blob(
        CONFIG_TYPE,
        canonical_json(
            {
                "architecture": "wasm",
                "os": "wasip1",
                "config": {"Labels": labels},
                # diff_ids name the UNcompressed layer, as the image spec asks.
                "rootfs": {"type": "layers", "diff_ids": ["sha256:" + sha256(tar)]},
            }
        ),
    )
    manifest_bytes = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": config,
            "layers": [layer],
            "annotations": {"module.wasm.image/variant": "compat", **labels},
        }
    )
    manifest = blob(MANIFEST_TYPE, manifest_bytes)
    tag = package["version"]
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX_TYPE,
        # The layout's index only says where the manifest is; it is never pushed.
        "manifests": [{**manifest, "annotations": {"org.opencontainers.image.ref.name": tag}}],
    }

    # Write beside the target, then swap: never a half-written layout.
    out = Path(out_dir)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "blobs" / "sha256").mkdir(parents=True)
    for digest, data in blobs.items():
        (tmp / "blobs" / "sha256" / digest.removeprefix("sha256:")).write_bytes(data)
    (tmp / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))
    (tmp / "index.json").write_bytes(canonical_json(index))
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return tag, manifest["digest"], sha256(wasm)


def main(argv):
    if len(argv) != 3:
        print(f"usage: {argv[0]} MODULE.wasm LAYOUT_DIR", file=sys.stderr)
        return 2
    wasm_path, out_dir = argv[1], argv[2]
    tag, manifest_digest, wasm_sha256 = build(wasm_path, out_dir, workspace_package(), source_revision())
    print(f"{out_dir} (oci:{out_dir}:{tag})")
    print(f"  manifest digest: {manifest_digest}  (Istio/Higress sha256, Envoy Gateway image.sha256)")
    print(f"  wasm sha256:     {wasm_sha256}  (Envoy code.remote.sha256, Envoy Gateway http.sha256)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
