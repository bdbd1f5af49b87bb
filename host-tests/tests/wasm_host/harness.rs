//! The host itself: a trap fails the test with its message, a missing
//! artifact fails fast saying how to build it, a refused configuration is
//! visible, and a call the host refuses to dispatch is a store error.

use std::panic::{catch_unwind, AssertUnwindSafe};

use host_tests::wasm_host::{Artifact, Fault, Host, Request};

use crate::fixture::{assert_unavailable, rule, Kind, Servers};

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload.downcast_ref::<String>().cloned().or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string())).unwrap()
}

#[test]
fn a_trap_fails_the_test_with_its_message() {
    // The filter cannot be made to trap any more: a probe module that traps
    // on demand stands in for a regression.
    let mut host = Host::builder(Artifact::Probe, "{}").start();
    assert_eq!(host.send(0, Request::get("/")).status, 200, "no trap asked for");
    let text = panic_text(
        catch_unwind(AssertUnwindSafe(|| host.send(0, Request::get("/").header("x-probe-trap", "1")))).unwrap_err(),
    );
    assert!(text.starts_with("the module trapped in VM 0 during proxy_on_request_headers (context 3):"), "{text}");
    assert!(text.contains("wasm `unreachable` instruction executed"), "{text}");
}

#[test]
fn a_missing_artifact_fails_fast_saying_how_to_build_it() {
    let text = panic_text(catch_unwind(|| host_tests::paths::dist("no-such.wasm")).unwrap_err());
    assert!(text.ends_with("dist/no-such.wasm is missing: run `make build` first"), "{text}");
}

#[test]
fn a_refused_configuration_lets_everything_through_and_says_why() {
    let config = Kind::Redis.config(&rule("api", "/api", "closed", "fixed_window", 5, "1h"));
    let mut host = Host::builder(Artifact::Webdis, &config).vms(2).start();
    assert!(!host.configured(0) && !host.configured(1));
    let refused: Vec<String> = host.logs_containing("configuration refused");
    let line = r#"ratelimit: configuration refused: store.transport: "redis" needs the Redis-call build (ratelimit-redis.wasm); this module speaks webdis"#;
    assert_eq!(refused, [line, line]);
    let r = host.send(0, Request::get("/api"));
    assert_eq!((r.status, r.local, r.header("x-ratelimit-limit")), (200, false, None));
    assert!(host.calls().is_empty());
}

#[test]
fn a_call_the_host_refuses_is_a_store_error() {
    let servers = Servers::start(Kind::Webdis);
    let config = Kind::Webdis.config(&rule("api", "/api", "closed", "fixed_window", 5, "1h"));
    let mut host = servers.host(&config, 1).start();
    host.faults([Fault::DispatchStatus(2), Fault::DispatchStatus(10)]);
    assert_unavailable(&host.send(0, Request::get("/api")));
    assert_unavailable(&host.send(0, Request::get("/api")));
    assert!(host.calls().is_empty(), "nothing was dispatched");
    // Once per 10 s per worker: the second error waits for the next line.
    assert_eq!(
        host.logs_containing("store errors"),
        ["ratelimit: store call could not be dispatched (1 store errors on this worker since the last such line)"]
    );
    // A cluster Envoy does not know is refused the same way.
    let mut lost = Host::builder(Artifact::Webdis, &config).start();
    assert_unavailable(&lost.send(0, Request::get("/api")));
    assert_eq!(lost.counter("ratelimit.api.store_errors"), 1);
}

#[test]
fn the_webdis_call_is_what_webdis_expects() {
    let servers = Servers::start(Kind::Webdis);
    let config = Kind::Webdis.config(&rule("api", "/api", "closed", "fixed_window", 5, "1h"));
    let mut host = servers.host(&config, 1).start();
    let r = host.send(0, Request::get("/api").from("192.0.2.7:5555"));
    assert_eq!((r.status, r.header("x-ratelimit-remaining")), (200, Some("4")), "decided by the store");
    let call = &host.calls()[0];
    assert_eq!(call.token % 4, 0, "HTTP-call tokens are 0 mod 4");
    assert_eq!(call.deadline_ms - call.dispatched_ms, 25);
    assert_eq!(call.cluster, "store");
    let host_tests::wasm_host::calls::Request::Http { headers, .. } = &call.request else { panic!() };
    let get = |n: &str| headers.text(n);
    assert_eq!((get(":method"), get(":path"), get(":authority")), (Some("POST"), Some("/"), Some("store")));
    // The shipped webdis.json's credential, as basic auth (webdis answered: it matched).
    let (user, password) = host_tests::webdis::credential();
    let basic = ratelimit::store::webdis::authorization(&user, &ratelimit::secret::Secret::new(password)).unwrap();
    assert_eq!(get("authorization"), Some(basic.expose()));
    let args = call.request.args();
    // Protocol v3: one key; now, one spec (fw, 5, 1 h, burst 5), one shape
    // of one limit: spec 1, use 1, offset 0; one decision of shape 1.
    assert_eq!(
        args[1..],
        [
            "1",
            "t:{192.0.2.7}:api:fw:3600000:472222",
            "1700000000000",
            "1",
            "fw",
            "5",
            "3600000",
            "5",
            "1",
            "1",
            "1",
            "u",
            "1",
            "0",
            "1",
            "1"
        ]
    );
}
