//! NOSCRIPT recovery. webdis: `PUT /SCRIPT/LOAD`, then EVALSHA once more.
//! Redis calls: EVAL with the script and the same keys and arguments. A
//! second NOSCRIPT, or a failed load, is a store error, never a loop.

use host_tests::wasm_host::{Call, Fault, Request};

use crate::both_transports;
use crate::fixture::{assert_unavailable, at, rule, Kind, Servers};

both_transports!(an_empty_script_cache_is_recovered_in_the_same_request, a_script_flush_mid_run_is_invisible);

fn config(kind: Kind) -> String {
    kind.config(&rule("api", "/api", "closed", "fixed_window", 5, "1h"))
}

fn commands(calls: &[Call]) -> Vec<String> {
    calls.iter().map(|c| c.request.command()).collect()
}

/// The calls one request makes when the script is missing.
fn recovery(kind: Kind) -> Vec<&'static str> {
    match kind {
        Kind::Webdis => vec!["EVALSHA", "SCRIPT LOAD", "EVALSHA"],
        Kind::Redis => vec!["EVALSHA", "EVAL"],
    }
}

/// The retried call names the same keys and arguments as the first.
fn assert_same_keys_and_args(kind: Kind, first: &Call, retry: &Call) {
    let (a, b) = (first.request.args(), retry.request.args());
    assert_eq!(a[1..], b[1..], "numkeys, keys and arguments");
    match kind {
        Kind::Webdis => assert_eq!(a[0], b[0], "the same SHA-1"),
        Kind::Redis => assert_eq!(b[0], ratelimit::script::SCRIPT, "EVAL carries the script itself"),
    }
}

fn an_empty_script_cache_is_recovered_in_the_same_request(kind: Kind) {
    let servers = Servers::start_empty(kind);
    let mut host = servers.host(&config(kind), 1).start();
    host.advance_to(at(1_000));
    let r = host.send(0, Request::get("/api"));
    assert_eq!((r.status, r.header("x-ratelimit-remaining")), (200, Some("4")));
    let calls = host.calls();
    assert_eq!(commands(&calls), recovery(kind));
    assert_same_keys_and_args(kind, &calls[0], calls.last().unwrap());
    // Loaded now: one call per request.
    assert_eq!(host.send(0, Request::get("/api")).header("x-ratelimit-remaining"), Some("3"));
    assert_eq!(host.calls().len(), recovery(kind).len() + 1);
    assert_eq!(host.counter("ratelimit.api.store_errors"), 0);
    assert_eq!(host.counter("ratelimit.store_calls"), recovery(kind).len() as i64 + 1);
}

fn a_script_flush_mid_run_is_invisible(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&config(kind), 2).start();
    host.advance_to(at(1_000));
    assert_eq!(host.send(0, Request::get("/api")).header("x-ratelimit-remaining"), Some("4"));
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut servers.redis.connect()).unwrap();
    assert_eq!(host.send(1, Request::get("/api")).header("x-ratelimit-remaining"), Some("3"));
    assert_eq!(host.send(0, Request::get("/api")).header("x-ratelimit-remaining"), Some("2"));
    let mut expected = vec!["EVALSHA".to_string()];
    expected.extend(recovery(kind).iter().map(|c| c.to_string()));
    expected.push("EVALSHA".into());
    assert_eq!(commands(&host.calls()), expected);
    assert_eq!(host.counter("ratelimit.api.store_errors"), 0);
}

const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";

#[test]
fn webdis_a_second_noscript_is_a_store_error() {
    let servers = Servers::start(Kind::Webdis);
    let mut host = servers.host(&config(Kind::Webdis), 1).start();
    host.faults([Fault::Error(NOSCRIPT.into()), Fault::Pass, Fault::Error(NOSCRIPT.into())]);
    assert_unavailable(&host.send(0, Request::get("/api")));
    assert_eq!(commands(&host.calls()), ["EVALSHA", "SCRIPT LOAD", "EVALSHA"]);
    assert_eq!(
        host.logs_containing("store errors"),
        ["ratelimit: script still missing after loading it (1 store errors on this worker since the last such line)"]
    );
    // The next request starts afresh (the script is loaded for real now).
    assert_eq!(host.send(0, Request::get("/api")).status, 200);
}

#[test]
fn webdis_a_failed_script_load_is_a_store_error() {
    let servers = Servers::start(Kind::Webdis);
    let mut host = servers.host(&config(Kind::Webdis), 1).start();
    host.faults([Fault::Error(NOSCRIPT.into()), Fault::Error("ERR Error compiling script".into())]);
    assert_unavailable(&host.send(0, Request::get("/api")));
    assert_eq!(commands(&host.calls()), ["EVALSHA", "SCRIPT LOAD"]);
    assert_eq!(
        host.logs_containing("store errors"),
        ["ratelimit: redis error: ERR Error compiling script (1 store errors on this worker since the last such line)"]
    );
    assert_eq!(servers.command_calls("script|load"), 1, "only the fixture's own load reached Redis");
}

#[test]
fn redis_noscript_after_eval_is_a_store_error() {
    let servers = Servers::start(Kind::Redis);
    let mut host = servers.host(&config(Kind::Redis), 1).start();
    host.faults([Fault::Error(NOSCRIPT.into()), Fault::Error(NOSCRIPT.into())]);
    assert_unavailable(&host.send(0, Request::get("/api")));
    assert_eq!(commands(&host.calls()), ["EVALSHA", "EVAL"]);
    assert_eq!(host.counter("ratelimit.api.store_errors"), 1);
}
