//! The Redis-call transport against the documented Higress ABI and a real
//! redis-server: init once per VM, tokens 3 mod 4, one connection per VM
//! with replies matched first in first out, AUTH and SELECT from the
//! configuration, NOAUTH re-initializes once, a timeout closes the
//! connection; and, for both builds, one round trip per identity per request.

use host_tests::wasm_host::vm::RedisInit;
use host_tests::wasm_host::{Fault, Outcome, Request};

use crate::both_transports;
use crate::fixture::{assert_unavailable, at, rule, Kind, Servers};

both_transports!(one_round_trip_per_request);

/// Three rules, two identities: the client's address (two rules) and its API key.
const RULES: &str = r#"
  {"name":"ip","key":["client_ip"],"limits":[{"algorithm":"fixed_window","limit":100,"window":"1h"}]},
  {"name":"ip-burst","key":["client_ip"],"limits":[{"algorithm":"sliding_window","limit":50,"window":"1m"}]},
  {"name":"key","key":["header:x-api-key"],"limits":[{"algorithm":"fixed_window","limit":100,"window":"1h"}]}"#;

fn one_round_trip_per_request(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&kind.config(RULES), 2).start();
    host.advance_to(at(1_000));
    for i in 0..5 {
        let r = host.send(i % 2, Request::get("/x").header("x-api-key", "k1"));
        assert_eq!((r.status, r.header("x-ratelimit-remaining")), (200, Some(&*(49 - i).to_string())));
    }
    // Without the header the key rule does not apply: one identity.
    assert_eq!(host.send(0, Request::get("/x")).status, 200);
    // Both identities' decisions leave together: one call per request.
    assert_eq!(servers.command_calls("evalsha"), 6, "5 requests + 1");
    assert_eq!(servers.command_calls("eval"), 0);
    assert_eq!(host.calls().len(), 6);
}

fn config() -> String {
    Kind::Redis.config(&rule("api", "/api", "closed", "fixed_window", 5, "1h"))
}

#[test]
fn init_once_per_vm_tokens_3_mod_4_one_connection_per_vm() {
    let servers = Servers::start(Kind::Redis);
    let mut host = servers.host(&config(), 3).start();
    for i in 0..9 {
        assert_eq!(host.send(i % 3, Request::get("/api").from(&format!("10.0.0.{i}:1"))).status, 200);
    }
    let init = RedisInit {
        cluster: "store?db=0".into(),
        username: String::new(),
        password: String::new(),
        timeout_ms: 25,
        status: 0,
    };
    for vm in 0..3 {
        assert_eq!(host.redis_inits(vm), std::slice::from_ref(&init), "VM {vm}: init once, at configure");
        assert_eq!(host.redis_connections(vm), 1, "VM {vm}");
        let tokens: Vec<u32> = host.calls().iter().filter(|c| c.vm == vm).map(|c| c.token).collect();
        assert_eq!(tokens, [3, 7, 11], "VM {vm}: 3 mod 4, per VM");
    }
}

#[test]
fn replies_are_matched_first_in_first_out_whatever_the_delivery_order() {
    let servers = Servers::start(Kind::Redis);
    let mut host = servers.host(&config(), 1).start();
    host.advance_to(at(1_000));
    host.faults([Fault::Delay(10), Fault::Pass, Fault::Delay(5)]);
    let ids: Vec<_> = (0..3).map(|_| host.begin(0, Request::get("/api"))).collect();
    host.advance(10);
    let remaining: Vec<String> =
        ids.into_iter().map(|id| host.finish(id).header("x-ratelimit-remaining").unwrap().into()).collect();
    assert_eq!(remaining, ["4", "3", "2"], "each stream got the reply to its own command");
    let delivered: Vec<Outcome> = host.calls().into_iter().map(|c| c.outcome).collect();
    assert_eq!(
        delivered,
        [Outcome::Delivered(at(1_010)), Outcome::Delivered(at(1_000)), Outcome::Delivered(at(1_005))]
    );
}

#[test]
fn auth_and_select_come_from_the_configuration() {
    let servers = Servers::start(Kind::Redis);
    let _: () =
        redis::cmd("CONFIG").arg("SET").arg("requirepass").arg("s3cret").query(&mut servers.redis.connect()).unwrap();
    let config = Kind::Redis.config_full(
        &rule("api", "/api", "closed", "fixed_window", 5, "1h"),
        r#","cluster":"store?db=3","username":"default","password":"s3cret""#,
        "",
    );
    let mut host = servers.host(&config, 1).start();
    assert_eq!(host.redis_inits(0)[0].password, "s3cret");
    assert_eq!(host.send(0, Request::get("/api")).header("x-ratelimit-remaining"), Some("4"));
    let url = |db| format!("redis://:s3cret@127.0.0.1:{}/{db}", servers.redis.port);
    let keys = |db| -> Vec<String> {
        let mut c = redis::Client::open(url(db)).unwrap().get_connection().unwrap();
        redis::cmd("KEYS").arg("t:*").query(&mut c).unwrap()
    };
    assert_eq!(keys(3), ["t:{10.0.0.1}:api:fw:3600000:472222"]);
    assert!(keys(0).is_empty());
}

/// A real Redis 7 does not answer NOAUTH to an unauthenticated command of
/// more than 10 arguments (every EVALSHA): it answers a protocol error and
/// closes the connection. So the module's NOAUTH re-initialization never
/// runs there; the request still fails by its rule's policy.
#[test]
fn a_missing_password_is_a_store_error() {
    let servers = Servers::start(Kind::Redis);
    let _: () =
        redis::cmd("CONFIG").arg("SET").arg("requirepass").arg("s3cret").query(&mut servers.redis.connect()).unwrap();
    let mut host = servers.host(&config(), 1).start();
    assert_unavailable(&host.send(0, Request::get("/api")));
    assert_eq!(host.calls().len(), 1);
    assert_eq!(host.redis_inits(0).len(), 1);
    assert_eq!(
        host.logs_containing("store errors"),
        ["ratelimit: redis error: ERR Protocol error: unauthenticated multibulk length (1 store errors on this worker since the last such line)"]
    );
    // Redis closed that connection: the next command fails on it, the one after reconnects.
    assert_unavailable(&host.send(0, Request::get("/api")));
    assert_unavailable(&host.send(0, Request::get("/api")));
    assert_eq!(host.redis_connections(0), 2);
}

#[test]
fn a_noauth_reply_reinitializes_and_retries() {
    let servers = Servers::start(Kind::Redis);
    let mut host = servers.host(&config(), 1).start();
    host.faults([Fault::Error("NOAUTH Authentication required.".into())]);
    assert_eq!(host.send(0, Request::get("/api")).header("x-ratelimit-remaining"), Some("4"));
    assert_eq!(host.redis_inits(0).len(), 2);
    assert_eq!(host.calls().len(), 2);
    assert_eq!(host.counter("ratelimit.api.store_errors"), 0);
}

#[test]
fn a_timeout_closes_the_connection_and_fails_every_command_on_it() {
    let servers = Servers::start(Kind::Redis);
    let mut host = servers.host(&config(), 1).start();
    host.advance_to(at(1_000));
    host.faults([Fault::Delay(30), Fault::Delay(28)]);
    let a = host.begin(0, Request::get("/api"));
    let b = host.begin(0, Request::get("/api").from("10.0.0.2:1"));
    host.advance(25);
    assert_unavailable(&host.finish(a));
    assert_unavailable(&host.finish(b));
    let outcomes: Vec<Outcome> = host.calls().into_iter().map(|c| c.outcome).collect();
    assert_eq!(outcomes, [Outcome::TimedOut(at(1_025)), Outcome::Delivered(at(1_025))], "b failed with the connection");
    // A new connection for the next command; both commands had run.
    assert_eq!(host.send(0, Request::get("/api")).header("x-ratelimit-remaining"), Some("3"));
    assert_eq!(host.redis_connections(0), 2);
}
