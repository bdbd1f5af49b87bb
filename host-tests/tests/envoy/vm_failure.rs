//! A wasm VM that fails at run time (a trap: a Rust panic, `unreachable`),
//! under the shipped `failure_policy: FAIL_RELOAD` and, for contrast,
//! without it. One Envoy worker, so every request meets the same VM.
//!
//! Envoy offers no way to make a VM fail on demand, so the deterministic
//! tests run the shipped envoy.yaml with the probe module (a few lines of
//! WebAssembly text compiled by the test; it traps when a request carries
//! `x-probe-trap`); the filter's own test sends a request that made the
//! filter panic when this test was written, and holds whether or not that
//! bug is fixed.

use std::time::{Duration, Instant};

use host_tests::backend::Backend;
use host_tests::envoy::{start_edited, Edit, Envoy};
use host_tests::http::{agent, send, Answer};
use host_tests::probe_module::write_probe;
use host_tests::process::{free_port, TempDir};
use host_tests::raw_http::RawRequest;
use host_tests::stack::Stack;

use crate::plugin_config;

/// The line of envoy.yaml that sets the policy.
const POLICY: &str = "failure_policy: FAIL_RELOAD";
/// What Envoy logs when a VM traps.
const TRAP_LOG: &str = "Uncaught RuntimeError: unreachable";
/// Longer than Envoy's reload backoff (1 s base interval) many times over.
const RECOVERY: Duration = Duration::from_secs(30);

fn get(envoy: &Envoy, headers: &[(&str, &str)]) -> Answer {
    send(&agent(Duration::from_secs(10)), "GET", &format!("http://127.0.0.1:{}/", envoy.port), headers)
}

/// The shipped envoy.yaml with the probe module, one worker, and `edits`.
fn probe_envoy(backend: &Backend, dir: &TempDir, edits: &[Edit<'_>]) -> Envoy {
    let module = write_probe(dir.path());
    start_edited(backend.port, free_port(), &module, "{}", 1, edits, &[])
        .unwrap_or_else(|e| panic!("envoy refused the probe module:\n{}", e.log))
}

/// Envoy's answer to a request whose VM trapped: a 503 of its own, empty.
fn assert_vm_failure(a: &Answer) {
    assert_eq!((a.status, a.body.as_str()), (503, ""), "{a:?}");
}

#[test]
fn the_shipped_config_reloads_a_vm_that_trapped_and_serves_again() {
    let backend = Backend::start();
    let dir = TempDir::new("probe");
    let envoy = probe_envoy(&backend, &dir, &[]);
    assert!(envoy.admin("/config_dump").contains(r#""failure_policy": "FAIL_RELOAD""#), "policy not loaded");
    assert_eq!(get(&envoy, &[]).status, 200);

    assert_vm_failure(&get(&envoy, &[("x-probe-trap", "1")]));
    assert!(envoy.log().contains(TRAP_LOG), "no trap in the log:\n{}", envoy.log());
    // Until the backoff has passed, requests fail like the trapped one (how
    // many depends on the machine's speed); then the reloaded VM serves.
    let deadline = Instant::now() + RECOVERY;
    let mut failed = 0;
    loop {
        let a = get(&envoy, &[]);
        if a.status == 200 {
            break;
        }
        assert_vm_failure(&a);
        failed += 1;
        assert!(Instant::now() < deadline, "no reload within {RECOVERY:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(envoy.stat("wasm.ratelimit.vm_reload_success"), 1);
    assert_eq!(envoy.stat("wasm.ratelimit.vm_reload_backoff"), failed);
    assert_eq!(envoy.stat("wasm.ratelimit.vm_reload_failure"), 0);
    // Two requests reached the upstream: the one before the trap and the first after the reload.
    assert_eq!(backend.served.load(std::sync::atomic::Ordering::Relaxed), 2);
    // The reloaded VM is a fresh one: it traps again on the same request, and recovers again.
    assert_vm_failure(&get(&envoy, &[("x-probe-trap", "1")]));
    let deadline = Instant::now() + RECOVERY;
    while get(&envoy, &[]).status != 200 {
        assert!(Instant::now() < deadline, "no second reload within {RECOVERY:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(envoy.stat("wasm.ratelimit.vm_reload_success"), 2);
}

#[test]
fn without_fail_reload_a_vm_that_trapped_answers_503_until_envoy_restarts() {
    let backend = Backend::start();
    let dir = TempDir::new("probe");
    // Envoy's default policy (UNSPECIFIED) is FAIL_CLOSED.
    let envoy = probe_envoy(&backend, &dir, &[Edit { from: POLICY, to: "" }]);
    assert_eq!(get(&envoy, &[]).status, 200);
    assert_vm_failure(&get(&envoy, &[("x-probe-trap", "1")]));
    // Several times the reload backoff later, still down: nothing reloads it.
    let start = Instant::now();
    let mut answers = 0;
    while start.elapsed() < Duration::from_secs(3) {
        assert_vm_failure(&get(&envoy, &[]));
        answers += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(answers >= 2);
    assert_eq!(envoy.stat("wasm.ratelimit.vm_reload_success"), 0);
    assert_eq!(backend.served.load(std::sync::atomic::Ordering::Relaxed), 1);
}

/// A rule keyed on a header, limit 100: every decision by the store shows
/// `x-ratelimit-limit: 100`.
const KEYED: &str = r#"{"name":"keyed","key":["header:x-api-key"],"limits":[{"limit":100,"window":"1h"}]}"#;

#[test]
fn a_header_value_that_is_not_utf8_is_decided_and_takes_nothing_down() {
    let stack = Stack::try_start(&plugin_config(KEYED), 1).unwrap_or_else(|e| panic!("{}", e.log));
    let decided = |a: &Answer| a.status == 200 && a.header("x-ratelimit-limit") == Some("100");
    assert!(decided(&stack.send("GET", "/", &[("x-api-key", "k")])));

    let odd = RawRequest::new("GET", b"/").header("x-api-key", b"\xff\xfe").send(stack.envoy.port).unwrap();
    // The value is handled like any other request (decided by the store),
    // the VM never failed, and nothing was reloaded.
    assert!(!stack.envoy.log().contains("panicked at"), "{}", stack.envoy.log());
    assert_eq!(odd.status, 200, "{odd:?}");
    assert_eq!(odd.header("x-ratelimit-limit"), Some("100"));
    assert!(decided(&stack.send("GET", "/", &[("x-api-key", "k")])));
    assert_eq!(stack.envoy.stat("wasm.ratelimit.vm_reload_success"), 0);
}
