#!/usr/bin/env bash
# Pushes OCI image layouts written by .ci/oci_image.py to a registry (make push).
#
#   .ci/oci_push.sh REGISTRY LAYOUT_DIR...      e.g. .ci/oci_push.sh ghcr.io/acme dist/oci/ratelimit
#   INSECURE=1 .ci/oci_push.sh 127.0.0.1:5000/test dist/oci/*
#
# Each layout goes to REGISTRY/<layout dir name>:<its tag>. --preserve-digests
# makes skopeo refuse to change a byte (no recompression, no format
# conversion), so the pushed manifest digest is the one the layout holds;
# the script checks that and prints it.
set -euo pipefail

[ $# -ge 2 ] || { echo "usage: [INSECURE=1] $0 REGISTRY LAYOUT_DIR..." >&2; exit 2; }
registry=${1%/}
shift
tls=()
[ "${INSECURE:-0}" = 1 ] && tls=(--dest-tls-verify=false)
digestfile=$(mktemp)
trap 'rm -f "$digestfile"' EXIT

for layout in "$@"; do
  layout=${layout%/}
  name=$(basename "$layout")
  # The layout's one manifest: its tag and digest, from index.json.
  read -r tag want < <(python3 -c '
import json, sys
[m] = json.load(open(sys.argv[1] + "/index.json"))["manifests"]
print(m["annotations"]["org.opencontainers.image.ref.name"], m["digest"])' "$layout")
  ref="$registry/$name:$tag"
  skopeo copy --quiet --preserve-digests "${tls[@]}" --digestfile "$digestfile" "oci:$layout:$tag" "docker://$ref"
  got=$(cat "$digestfile")
  if [ "$got" != "$want" ]; then
    echo "push: $ref has manifest digest $got, the layout has $want" >&2
    exit 1
  fi
  echo "pushed $ref"
  echo "  manifest digest: $got"
done
