//! docs/store-security.md's Redis ACL user of the `redis` transport, on a real
//! redis-server: the Redis-call build decides every algorithm exactly as
//! that user, NOSCRIPT included (it sends EVAL with the script), and the
//! user can do nothing else: no FLUSHALL, KEYS, CONFIG, no Lua reaching
//! another command or another domain's keys.

use host_tests::store_acl::{allowed_commands, readme_rules, script_commands, set_user};
use host_tests::wasm_host::{Host, Request};
use ratelimit::script::SCRIPT;

use crate::fixture::{Kind, Servers};

/// The password the documented user gets here.
const PASSWORD: &str = "acl-test-password";

/// The five algorithms, fail closed (a store error is a 503, never a 200).
const RULES: &str = r#"
  {"name":"fw","match":{"path_prefix":"/fw"},"key":["client_ip"],"failure_mode":"closed","limits":[{"algorithm":"fixed_window","limit":3,"window":"1h"}]},
  {"name":"sw","match":{"path_prefix":"/sw"},"key":["client_ip"],"failure_mode":"closed","limits":[{"algorithm":"sliding_window","limit":3,"window":"1h"}]},
  {"name":"tb","match":{"path_prefix":"/tb"},"key":["client_ip"],"failure_mode":"closed","limits":[{"algorithm":"token_bucket","limit":3,"window":"1h"}]},
  {"name":"gc","match":{"path_prefix":"/gc"},"key":["client_ip"],"failure_mode":"closed","limits":[{"algorithm":"gcra","limit":3,"window":"1h","burst":3}]},
  {"name":"sl","match":{"path_prefix":"/sl"},"key":["client_ip"],"failure_mode":"closed","limits":[{"algorithm":"sliding_log","limit":3,"window":"1h"}]}"#;

/// Five requests of `client` on each rule's path: each gets exactly 3.
fn decides_exactly(host: &mut Host, client: &str) {
    for path in ["/fw", "/sw", "/tb", "/gc", "/sl"] {
        let got: Vec<u32> = (0..5).map(|_| host.send(0, Request::get(path).from(client)).status).collect();
        // What the module logged at warn or above says why, if it fails.
        let warnings: Vec<String> = host.logs().into_iter().filter(|l| l.level >= 3).map(|l| l.message).collect();
        assert_eq!(got, [200, 200, 200, 429, 429], "{path} for {client}; the module's warnings: {warnings:?}");
    }
}

/// Redis's error reply to `cmd` (`NOPERM …`, `ERR …`); fails if it was allowed.
fn refusal(cmd: &redis::Cmd, c: &mut redis::Connection) -> String {
    match cmd.query::<redis::Value>(c) {
        Ok(v) => panic!("{:?} was allowed: {v:?}", cmd.args_iter().collect::<Vec<_>>()),
        Err(e) => format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")),
    }
}

#[test]
fn readmes_redis_transport_user_decides_exactly_and_can_do_nothing_else() {
    let servers = Servers::start_empty(Kind::Redis);
    let mut admin = servers.redis.connect();
    let rules = readme_rules("ratelimit", PASSWORD);
    let mut needed = script_commands(SCRIPT);
    needed.extend(["evalsha", "eval", "info", "smembers"].map(String::from));
    assert_eq!(
        allowed_commands(&rules),
        needed,
        "docs/store-security.md's ratelimit user: exactly what the module and its script run"
    );
    set_user(&mut admin, "ratelimit", &rules);
    // The documented user holds the keys of domain "demo"; no `?db=`, so no SELECT.
    let store = format!(r#","cluster":"store","username":"ratelimit","password":"{PASSWORD}""#);
    let config = Kind::Redis.config_full(RULES, &store, r#","domain":"demo""#);
    let mut host = servers.host(&config, 1).start();

    // The script cache is empty: the first call meets NOSCRIPT and EVALs.
    decides_exactly(&mut host, "10.0.0.1:1");
    assert_eq!(servers.command_calls("eval"), 1);
    let () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut admin).unwrap();
    decides_exactly(&mut host, "10.0.0.2:1");
    assert_eq!(servers.command_calls("eval"), 2);
    assert_eq!(host.counter("ratelimit.sl.store_errors"), 0);

    // The user itself, straight to Redis.
    let url = format!("redis://ratelimit:{PASSWORD}@127.0.0.1:{}/", servers.redis.port);
    let mut user = redis::Client::open(url).unwrap().get_connection().unwrap();
    let keys: u64 = redis::cmd("DBSIZE").query(&mut admin).unwrap();
    assert!(keys > 0);
    for cmd in [
        redis::cmd("FLUSHALL"),
        redis::cmd("KEYS").arg("*").clone(),
        redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("1").clone(),
        redis::cmd("SCRIPT").arg("FLUSH").clone(),
        redis::cmd("SELECT").arg(1).clone(),
        redis::cmd("DEL").arg("other:key").clone(),
        redis::cmd("SET").arg("other:key").arg("1").clone(),
        redis::cmd("EVAL").arg("return redis.call('SET', KEYS[1], '1')").arg(1).arg("other:key").clone(),
    ] {
        let text = refusal(&cmd, &mut user);
        assert!(text.starts_with("NOPERM"), "{text}");
    }
    // EVAL runs any Lua, but the Lua runs as this user.
    for (script, why) in [
        ("return redis.call('FLUSHALL')", "can't run this command"),
        ("return redis.call('KEYS', '*')", "can't run this command"),
        ("return redis.call('DEL', 'other:key')", "can't access at least one of the keys"),
        ("return redis.call('SET', 'other:key', '1')", "can't access at least one of the keys"),
    ] {
        let text = refusal(redis::cmd("EVAL").arg(script).arg(0), &mut user);
        assert!(text.contains(&format!("The user executing the script {why}")), "{script}: {text}");
    }
    assert_eq!(redis::cmd("DBSIZE").query::<u64>(&mut admin).unwrap(), keys);
    let maxmemory: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("maxmemory").query(&mut admin).unwrap();
    assert_eq!(maxmemory, ["maxmemory", "0"]);
}
