# Distributed rate limiter for Envoy (proxy-wasm). `make help` lists targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

WASM_TARGET := wasm32-wasip1
RELEASE := target/$(WASM_TARGET)/release
VENV := .venv
# The wasm features rustc enables for wasm32-wasip1 (all supported by Envoy's
# V8 and by wasmtime); wasm-opt must be told, it cannot detect them.
WASM_FEATURES := --enable-bulk-memory --enable-sign-ext --enable-mutable-globals \
  --enable-nontrapping-float-to-int --enable-multivalue --enable-reference-types
WASM_OPT := wasm-opt -O3 --strip-debug --strip-producers $(WASM_FEATURES)
# The project's own tools (envoy, wasm-bindgen-test-runner) come first.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: help setup build nginx image push test unit fmt-check test-native test-wasm clippy demo demo-nginx soak bench sim clean

help: ## List every target with what it does
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

setup: ## Install what is missing (Rust targets, Debian packages, Envoy); idempotent
	@.ci/setup.sh

build: ## Build the release modules: dist/ratelimit.wasm (webdis) and dist/ratelimit-redis.wasm (Higress Redis calls)
	@mkdir -p dist
	cargo build --release --target $(WASM_TARGET) -p ratelimit-filter
	$(WASM_OPT) $(RELEASE)/ratelimit.wasm -o dist/ratelimit.wasm
	cargo build --release --target $(WASM_TARGET) -p ratelimit-filter --features redis --target-dir target/redis
	$(WASM_OPT) target/redis/$(WASM_TARGET)/release/ratelimit.wasm -o dist/ratelimit-redis.wasm
	@# The size is reported, not budgeted: only past 512 KiB is it refused.
	@for m in dist/ratelimit.wasm dist/ratelimit-redis.wasm; do \
	  size=$$(stat -c %s $$m); printf 'module %s: %s bytes (limit 524288)\n' $$m $$size; \
	  [ $$size -le 524288 ] || { echo "$$m is larger than 512 KiB" >&2; exit 1; }; \
	done

image: build ## Write reproducible OCI wasm images to dist/oci/ (no Docker engine); print their digests
	.ci/oci_image.py dist/ratelimit.wasm dist/oci/ratelimit
	@# The Redis-call build is a separate artifact; image it only when it was built.
	@if [ -f dist/ratelimit-redis.wasm ]; then \
	  .ci/oci_image.py dist/ratelimit-redis.wasm dist/oci/ratelimit-redis; \
	else \
	  rm -rf dist/oci/ratelimit-redis; \
	  echo "image: dist/ratelimit-redis.wasm is absent: built only the default image"; \
	fi

push: image ## Push dist/oci/* to REGISTRY=host[:port]/path (INSECURE=1: plain HTTP) with skopeo
	@[ -n "$(REGISTRY)" ] || { echo "push: set REGISTRY, e.g. make push REGISTRY=ghcr.io/acme" >&2; exit 2; }
	INSECURE=$(INSECURE) .ci/oci_push.sh "$(REGISTRY)" dist/oci/*/

nginx: setup ## Build NGINX 1.27.4 with ngx_wasm_module and Wasmtime 26 into a cache outside the clone (minutes once, then seconds)
	@.ci/nginx.sh >/dev/null

test: setup build nginx ## Set up, build, check formatting, lint, and run every test (what CI runs)
	$(MAKE) --no-print-directory fmt-check clippy test-native test-wasm

unit: ## The unit tests only: no root, no servers, no build of the modules (under a minute once compiled)
	cargo test -q -p ratelimit-filter
	cargo test -q -p host-tests --test differential

fmt-check: ## Fail if any file is not as `cargo fmt` writes it (run by make test; `cargo fmt --all` fixes it)
	cargo fmt --all -- --check

clippy: ## Lint under the workspace lints (no unwrap/expect/panic outside tests), both shipped builds
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy -p ratelimit-filter --target $(WASM_TARGET) -- -D warnings
	cargo clippy -p ratelimit-filter --target $(WASM_TARGET) --features redis --target-dir target/redis -- -D warnings

test-native: ## Unit tests natively, and the tests against real servers; the simulator's bounded run prints its seeds
	cargo test --workspace -- --skip fixed_and_fresh_seeds_keep_every_invariant
	cargo test -q -p host-tests --test sim -- --nocapture

test-wasm: ## The filter's pure-logic unit tests inside wasm32 (wasm-bindgen-test)
	CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
	  cargo test -p ratelimit-filter --lib --target wasm32-unknown-unknown

sim: setup build ## Simulate the real module under random schedules and faults for SIM_SECONDS (1800); a violation prints its seed and schedule
	SIM_SECONDS=$${SIM_SECONDS:-1800} cargo test -q -p host-tests --test sim -- --nocapture

demo: setup build ## Run Redis, webdis, Envoy and a backend, send a burst, print the verdicts
	cargo run -q -p host-tests --bin demo

demo-nginx: setup build nginx ## The same demo with NGINX and envoy-config/nginx.conf instead of Envoy
	cargo run -q -p host-tests --bin demo_nginx

soak: setup build ## Two Envoys sharing one Redis under mixed traffic for SOAK_SECONDS (600); figures to docs/BENCHMARKS.md
	cargo run -q -p host-tests --bin soak

# When `make bench` started (build included), for the report.
bench: BENCH_T0 := $(shell date +%s)
bench: setup build nginx ## Measure proxy and store cost, batching, token streams, abuse, accuracy; rewrite docs/BENCHMARKS.md and its plots (~18 min)
	cargo build --profile driver -q -p host-tests --bin bench
	@$(VENV)/bin/python -c 'import matplotlib' 2>/dev/null || $(VENV)/bin/python -m pip install -q matplotlib
	@figures=$$(mktemp -d) && trap 'rm -rf "$$figures"' EXIT && \
	  BENCH_T0=$(BENCH_T0) target/driver/bench "$$figures" && \
	  $(VENV)/bin/python host-tests/bench-plot.py "$$figures/figures.json" docs

clean: ## Remove build outputs
	cargo clean
	rm -rf dist
