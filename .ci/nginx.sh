#!/usr/bin/env bash
# make nginx: NGINX with Kong's ngx_wasm_module on Wasmtime 26, built once
# into a cache outside the clone (a second run, CI's included, takes
# seconds). Prints the path of the nginx binary on its last line.
#
# Sources: NGINX_SRC and NGX_WASM_SRC (a .tar.gz or a directory); by default
# ../shared/vendor/ when present (see its README), else the upstream
# releases. The Wasmtime C API comes from crates.io (host-tests/nginx-runtime).
set -euo pipefail

cd "$(dirname "$0")/.."
NGINX_VERSION=1.27.4
NGX_WASM_COMMIT=3bed27836bb402143c6cbde17994b1d11a1084bc
VENDOR=../shared/vendor
CACHE=${RATELIMIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ratelimit}/nginx

say() { printf 'nginx: %s\n' "$*" >&2; }
fail() { printf 'nginx: ERROR: %s\n' "$*" >&2; exit 1; }

# A source: the variable's value, else the vendored archive, else a download.
source_of() {
  local given=$1 vendored=$2 url=$3 name=$4
  if [ -n "$given" ]; then
    [ -e "$given" ] || fail "$name: $given does not exist"
    realpath "$given"
  elif [ -f "$VENDOR/$vendored" ]; then
    realpath "$VENDOR/$vendored"
  else
    mkdir -p "$CACHE/downloads"
    local file="$CACHE/downloads/$vendored"
    if [ ! -f "$file" ]; then
      say "downloading $url"
      curl -fsSL "$url" -o "$file.part" || fail "$name: cannot download $url (set ${name})"
      mv "$file.part" "$file"
    fi
    echo "$file"
  fi
}

nginx_src=$(source_of "${NGINX_SRC:-}" "nginx-$NGINX_VERSION.tar.gz" \
  "https://github.com/nginx/nginx/archive/refs/tags/release-$NGINX_VERSION.tar.gz" NGINX_SRC)
wasm_src=$(source_of "${NGX_WASM_SRC:-}" "ngx_wasm_module-${NGX_WASM_COMMIT:0:7}.tar.gz" \
  "https://github.com/Kong/ngx_wasm_module/archive/$NGX_WASM_COMMIT.tar.gz" NGX_WASM_SRC)

# The build's key: its inputs. A directory source is keyed by its path and
# the newest mtime in it (a developer's checkout).
fingerprint() {
  if [ -d "$1" ]; then
    printf '%s %s' "$1" "$(find "$1" -type f -printf '%T@\n' | sort -n | tail -n1)"
  else
    sha256sum "$1" | cut -d' ' -f1
  fi
}
key=$( { fingerprint "$nginx_src"; fingerprint "$wasm_src"; cat host-tests/nginx-runtime/Cargo.toml host-tests/nginx-runtime/Cargo.lock "$0"; } | sha256sum | cut -c1-16)
prefix="$CACHE/$key"
if [ -x "$prefix/sbin/nginx" ]; then
  say "present ($prefix)"
  echo "$prefix/sbin/nginx"
  exit 0
fi

for tool in cmake cc make; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool not found (make setup installs it)"
done

# 1. Wasmtime's C API as a static library (a few minutes, once).
say "building the Wasmtime C API (host-tests/nginx-runtime)"
target="$CACHE/wasmtime-target"
cargo build -q --release --locked --manifest-path host-tests/nginx-runtime/Cargo.toml --target-dir "$target"
lib="$target/release/libratelimit_nginx_runtime.a"
include=$(ls -d "$target"/release/build/wasmtime-c-api-impl-*/out/include 2>/dev/null | head -n1)
[ -f "$lib" ] && [ -n "$include" ] || fail "the Wasmtime C API build left no library or headers under $target"

# 2. The sources, unpacked afresh.
work="$prefix.build"
rm -rf "$work" && mkdir -p "$work"
unpack() {
  local src=$1 dest=$2
  mkdir -p "$dest"
  if [ -d "$src" ]; then
    cp -a "$src/." "$dest/"
  else
    tar -xzf "$src" -C "$dest" --strip-components=1
  fi
}
unpack "$nginx_src" "$work/nginx"
unpack "$wasm_src" "$work/ngx_wasm_module"

# 3. NGINX with the module. Its build script leaves WAT out of conf.h:
#    ngx_wasm_module needs wasmtime_wat2wasm.
say "configuring and building NGINX $NGINX_VERSION with ngx_wasm_module"
cd "$work/nginx"
configure=auto/configure
[ -x "$configure" ] || configure=./configure
NGX_WASM_RUNTIME=wasmtime "$configure" \
  --prefix="$prefix" \
  --add-module="$work/ngx_wasm_module" \
  --with-cc-opt="-I$include -DWASMTIME_FEATURE_WAT -O2" \
  --with-ld-opt="$lib -ldl -lm -lpthread" \
  >"$work/configure.log" 2>&1 || fail "configure failed: see $work/configure.log"
make -j"$(nproc)" >"$work/make.log" 2>&1 || fail "make failed: see $work/make.log"
make install >>"$work/make.log" 2>&1 || fail "make install failed: see $work/make.log"
cd - >/dev/null
rm -rf "$work"
say "built ($prefix)"
echo "$prefix/sbin/nginx"
