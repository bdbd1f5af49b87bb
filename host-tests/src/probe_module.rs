//! A tiny proxy-wasm module, written here in WebAssembly text and compiled
//! by the test that uses it, for questions about Envoy itself that the
//! filter cannot answer: what a VM failure does under each `failure_policy`
//! (it traps on demand, independently of any bug of the filter), and what
//! `proxy_get_property` returns for a property path. It is never shipped:
//! it lives in a test's temporary directory, not in `dist/`.
//!
//! On request headers:
//! - `x-probe-trap` present: the module executes `unreachable` (a trap, as a
//!   Rust panic would).
//! - `x-probe-property: a/b/c` present: it answers the request itself with
//!   the value of property `a.b.c` (path parts separated by `/`) as the body
//!   and status 200, or status 404 with body `no such property`.
//! - otherwise the request continues untouched.

use std::path::{Path, PathBuf};

/// Status of the local reply when the property does not exist.
pub const NOT_FOUND: u16 = 404;

/// Body of that reply.
pub const NOT_FOUND_BODY: &str = "no such property";

const WAT: &str = r#"
(module
  (import "env" "proxy_get_header_map_value"
    (func $header (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_property"
    (func $property (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_send_local_response"
    (func $reply (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  ;; 0..16: out-parameters of host calls; 16: an empty header map (0 pairs).
  (data (i32.const 64) "x-probe-trap")
  (data (i32.const 80) "x-probe-property")
  (data (i32.const 96) "no such property")
  ;; A bump allocator for the host's copies, reset on every request.
  (global $heap (mut i32) (i32.const 65536))
  (func (export "malloc") (param $size i32) (result i32)
    (local $at i32)
    (local.set $at (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get $size)))
    (local.get $at))
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_vm_start") (param i32 i32) (result i32) (i32.const 1))
  (func (export "proxy_on_configure") (param i32 i32) (result i32) (i32.const 1))
  (func (export "proxy_on_request_headers") (param $ctx i32) (param $n i32) (param $eos i32) (result i32)
    (local $path i32) (local $len i32) (local $i i32)
    (global.set $heap (i32.const 65536))
    ;; map type 0: request headers; 0 = Ok.
    (if (i32.eqz (call $header (i32.const 0) (i32.const 64) (i32.const 12) (i32.const 0) (i32.const 4)))
      (then unreachable))
    (if (call $header (i32.const 0) (i32.const 80) (i32.const 16) (i32.const 0) (i32.const 4))
      (then (return (i32.const 0))))
    ;; The property path: '/' becomes the NUL that separates path parts.
    (local.set $path (i32.load (i32.const 0)))
    (local.set $len (i32.load (i32.const 4)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $len)))
        (if (i32.eq (i32.load8_u (i32.add (local.get $path) (local.get $i))) (i32.const 47))
          (then (i32.store8 (i32.add (local.get $path) (local.get $i)) (i32.const 0))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (if (i32.eqz (call $property (local.get $path) (local.get $len) (i32.const 8) (i32.const 12)))
      (then (drop (call $reply (i32.const 200) (i32.const 0) (i32.const 0)
        (i32.load (i32.const 8)) (i32.load (i32.const 12)) (i32.const 16) (i32.const 4) (i32.const -1))))
      (else (drop (call $reply (i32.const 404) (i32.const 0) (i32.const 0)
        (i32.const 96) (i32.const 16) (i32.const 16) (i32.const 4) (i32.const -1)))))
    ;; StopIteration: the local reply answers the request.
    (i32.const 1)))
"#;

/// The module's bytes.
pub fn probe_wasm() -> Vec<u8> {
    let buf = wast::parser::ParseBuffer::new(WAT).unwrap();
    let mut wat: wast::Wat = wast::parser::parse(&buf).unwrap();
    wat.module.encode().unwrap()
}

/// Writes the module to `dir/probe.wasm`; its path.
pub fn write_probe(dir: &Path) -> PathBuf {
    let path = dir.join("probe.wasm");
    std::fs::write(&path, probe_wasm()).unwrap();
    path
}
