//! A store gateway that fails after its headers — a body cut short, a
//! stall past the timeout, a 64 MB body — is a store error for the rule's
//! policy, for decisions and for the INFO poll alike; the module never
//! traps (the SDK panicked reading such a body: "unexpected status: 2").

use std::time::Duration;

use host_tests::backend::Backend;
use host_tests::envoy::{start_from_template, Envoy};
use host_tests::fake_store::{FakeStore, Misbehavior};
use host_tests::http::{agent, send};

const CONFIG: &str = r#"{"domain":"t","store":{"transport":"webdis","cluster":"ratelimit_store","authority":"webdis",
  "timeout_ms":300,"stats_interval":"100ms","circuit_breaker":{"failures":1000,"open":"1s"}},"rules":[
  {"name":"open","match":{"path_prefix":"/open"},"key":["client_ip"],"failure_mode":"open",
   "limits":[{"limit":1000,"window":"1h"}]},
  {"name":"closed","match":{"path_prefix":"/closed"},"key":["client_ip"],"failure_mode":"closed",
   "limits":[{"limit":1000,"window":"1h"}]}]}"#;

fn assert_no_trap(envoy: &Envoy) {
    let log = envoy.log();
    for sign in ["panicked", "Uncaught RuntimeError", "unreachable", "vm_reload"] {
        assert!(!log.contains(sign), "a VM failed ({sign}):\n{log}");
    }
}

fn survives(how: Misbehavior) {
    let store = FakeStore::start(how);
    let backend = Backend::start();
    let envoy = start_from_template(backend.port, store.port, Some(CONFIG), 2).unwrap();
    let http = agent(Duration::from_secs(30));
    let url = |path: &str| format!("http://127.0.0.1:{}{path}", envoy.port);
    // No traffic: only the INFO poll meets the store, every 100 ms on each
    // worker: four of its answers, whatever they are, and no VM failed.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while store.served.load(std::sync::atomic::Ordering::Relaxed) < 4 {
        assert!(std::time::Instant::now() < deadline, "the INFO poll never reached the store 4 times");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_no_trap(&envoy);
    for _ in 0..5 {
        let open = send(&http, "GET", &url("/open"), &[]);
        assert_eq!(
            (open.status, open.header("x-ratelimit-limit")),
            (200, Some("1000")),
            "{how:?}: the fallback admits"
        );
        let closed = send(&http, "GET", &url("/closed"), &[]);
        assert_eq!(closed.status, 503, "{how:?}");
        assert_eq!(closed.body, r#"{"error":"rate_limiter_unavailable"}"#);
    }
    assert_eq!(envoy.stat("wasmcustom.ratelimit.open.store_errors"), 5);
    assert_eq!(envoy.stat("wasmcustom.ratelimit.closed.store_errors"), 5);
    assert_eq!(envoy.stat("wasmcustom.ratelimit.open.fallback_allowed"), 5);
    assert_no_trap(&envoy);
    assert_eq!(envoy.stat("wasm.ratelimit.vm_reload_success"), 0);
}

#[test]
fn a_body_cut_short_is_a_store_error() {
    survives(Misbehavior::CutShort);
}

#[test]
fn a_stall_after_the_headers_past_the_timeout_is_a_store_error() {
    survives(Misbehavior::StallAfterHeaders(1_000));
}

#[test]
fn a_64_megabyte_body_is_a_store_error() {
    survives(Misbehavior::Huge);
}
