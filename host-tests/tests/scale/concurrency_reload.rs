//! A VM reloaded while its streams hold concurrency slots, in the wasmtime
//! host with a real webdis and Redis: Envoy reloads the filter's VM only
//! after a trap (`FAIL_RELOAD`, see tests/envoy/vm_failure.rs), which the
//! filter cannot be made to do on demand; `Host::reload_vm` replaces the VM
//! as Envoy does. The old VM's slots (one of a stream it let through, one
//! taken by a decision whose answer it never read) are released by nobody:
//! they expire after `max_hold` on Redis's clock, while the host's own
//! clock (the proxy's) only moves as the test says.

use std::time::{Duration, Instant};

use host_tests::redis_server::RedisServer;
use host_tests::wasm_host::{Artifact, Host, Request, Response, State};
use host_tests::webdis::{with_credential, Webdis};
use ratelimit::identity::digest;

use crate::concurrency_limits::REFUSED_BODY;

const MAX_HOLD_MS: u64 = 1_000;

/// Rule `cc`: two streams per `x-user`, slots living 1 s.
fn config() -> String {
    with_credential(
        r#"{"domain":"t","store":{"transport":"webdis","cluster":"store","timeout_ms":1000},
            "deny_cache":{"enabled":false},
            "rules":[{"name":"cc","key":["header:x-user"],"failure_mode":"closed",
                      "limits":[{"algorithm":"concurrency","limit":2,"max_hold":"1s"}]}]}"#,
    )
}

fn as_user() -> Request {
    Request::get("/cc").header("x-user", "u")
}

fn assert_refused(r: &Response) {
    assert_eq!((r.status, r.body.as_str(), r.local), (429, REFUSED_BODY, true), "{r:?}");
    assert_eq!(r.header("retry-after"), Some("1"), "{r:?}");
}

fn redis_now_ms(c: &mut redis::Connection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(c).unwrap();
    s * 1000 + us / 1000
}

fn members(c: &mut redis::Connection, key: &str) -> Vec<String> {
    redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).query(c).unwrap()
}

#[test]
fn a_reloaded_vms_slots_expire_within_max_hold_and_none_is_released_twice() {
    let redis = RedisServer::start();
    let webdis = Webdis::start(redis.port);
    let mut c = redis.connect();
    let key = format!("t:{{{}}}:cc:cc", digest("u"));
    let mut host = Host::builder(Artifact::Webdis, &config()).http_cluster("store", webdis.port).start();
    let counter = |host: &Host, name: &str| host.counter(&format!("ratelimit.cc.{name}"));

    let before = redis_now_ms(&mut c);
    let held = host.begin(0, as_user());
    host.run_until_idle();
    assert_eq!(host.state(held), State::Continued);
    // Its decision ran in the store when sent; its answer waits.
    let _unanswered = host.begin(0, as_user());
    let old = members(&mut c, &key);
    assert_eq!(old.len(), 2, "both slots taken");
    host.reload_vm(0);
    host.run_until_idle();

    // The fresh VM meets both slots held.
    assert_refused(&host.send(0, as_user()));
    let start = Instant::now();
    let mut fresh = Vec::new();
    while fresh.len() < 2 {
        assert!(start.elapsed() < Duration::from_secs(6), "the old slots still held after {:?}", start.elapsed());
        let id = host.begin(0, as_user());
        host.run_until_idle();
        if host.state(id) == State::Continued {
            let now = redis_now_ms(&mut c);
            assert!(now >= before + MAX_HOLD_MS, "admitted at {now}, before the old slots' max_hold from {before}");
            fresh.push(id);
        } else {
            assert_refused(&host.finish(id));
        }
        std::thread::sleep(Duration::from_millis(50));
        host.advance(50);
    }
    eprintln!("the old VM's slots expired {:?} after the reload", start.elapsed());
    let now_held = members(&mut c, &key);
    assert_eq!(now_held.len(), 2);
    assert!(now_held.iter().all(|m| !old.contains(m)), "old {old:?}, now {now_held:?}");
    assert_refused(&host.send(0, as_user()));

    // The fresh streams end; long after, each was released once and the
    // old slots by nobody.
    for id in fresh {
        assert_eq!(host.finish(id).status, 200);
    }
    host.run_until_idle();
    host.advance(10 * MAX_HOLD_MS);
    let exists: u64 = redis::cmd("EXISTS").arg(&key).query(&mut c).unwrap();
    assert_eq!(exists, 0);
    assert_eq!(counter(&host, "slots_released"), 2);
    assert_eq!((counter(&host, "slots_expired"), counter(&host, "slot_store_errors")), (0, 0));
    // Counted by the VM that read the store's answer: the old VM's held
    // stream and the two fresh ones, not the answer the old VM never read.
    assert_eq!(counter(&host, "slots_taken"), 3);
}
