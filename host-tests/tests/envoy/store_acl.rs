//! A least-privilege store: the shipped webdis.json refuses every command
//! but the filter's (EVALSHA, SCRIPT, INFO, SMEMBERS), and those without its basic-auth
//! credential, leaving Redis untouched; docs/store-security.md's Redis ACL user closes what
//! webdis cannot (SCRIPT is enabled whole). Through both, the filter in real
//! Envoy decides exactly, and reloads the script after a SCRIPT FLUSH.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use host_tests::backend::Backend;
use host_tests::bench::redis_info::command_stat;
use host_tests::envoy::{config_text, render_on_fresh_ports, start_from_template, Envoy};
use host_tests::http::{agent, send};
use host_tests::redis_server::RedisServer;
use host_tests::stack::Stack;
use host_tests::store_acl::{allowed_commands, readme_rules, script_commands, set_user};
use host_tests::webdis::{credential, Webdis};
use ratelimit::script::{sha1_hex, SCRIPT};
use ratelimit::secret::Secret;
use serde_norway::Value as Yaml;

use crate::plugin_config;

/// Commands an attacker would send through webdis, as webdis takes them:
/// (method, path, body). The `t:` keys are the test domain's.
const ATTACKS: &[(&str, &str, &str)] = &[
    ("GET", "/EVAL/return%20redis.call('KEYS'%2C'*')/0", ""),
    ("GET", "/eval/return%20redis.call('SET'%2C't%3Aevil'%2C'1')/0", ""),
    ("POST", "/", "EVAL/return%20redis.call('FLUSHALL')/0"),
    ("GET", "/SET/t%3Aevil/1", ""),
    ("PUT", "/SET/t%3Aevil", "1"),
    ("GET", "/GET/t%3Acanary", ""),
    ("GET", "/DEL/t%3Acanary", ""),
    ("GET", "/KEYS/*", ""),
    ("GET", "/FLUSHALL", ""),
    // webdis's database prefix: a connection of its own, same ACL.
    ("GET", "/0/FLUSHALL", ""),
    ("GET", "/FLUSHDB", ""),
    ("GET", "/CONFIG/SET/maxmemory/1", ""),
    ("GET", "/CONFIG/GET/*", ""),
];

/// Enabled with the credential: webdis enables SCRIPT whole.
const SCRIPT_FLUSH: (&str, &str, &str) = ("GET", "/SCRIPT/FLUSH", "");
/// One of the filter's own commands.
const INFO: (&str, &str, &str) = ("GET", "/INFO", "");

/// The filter's poll of the index of overrides.
const SMEMBERS: (&str, &str, &str) = ("POST", "/", "SMEMBERS/t%3Aoverrides");

/// Commands whose call counts must not move while the attacks run.
const NEVER_RUN: &[&str] = &["eval", "set", "get", "del", "keys", "flushall", "flushdb", "config|set", "script|flush"];

/// One fixed-window rule, fail closed (a store error is a 503, never a 200),
/// keyed by a header so a test can start a fresh client.
fn config(limit: u32) -> String {
    plugin_config(&format!(
        r#"{{"name":"api","match":{{"path_prefix":"/api"}},"key":["header:x-client"],"failure_mode":"closed",
            "limits":[{{"algorithm":"fixed_window","limit":{limit},"window":"1h"}}]}}"#
    ))
}

/// The shipped credential as the filter sends it, or a wrong one.
fn basic(password: Option<&str>) -> String {
    let (user, shipped) = credential();
    let auth = ratelimit::store::webdis::authorization(&user, &Secret::new(password.unwrap_or(&shipped)));
    auth.unwrap().expose().to_string()
}

/// Sends `(method, path, body)` straight to webdis.
fn to_webdis(port: u16, (method, path, body): (&str, &str, &str), auth: Option<&str>) -> (u16, String) {
    let agent = agent(Duration::from_secs(10));
    let mut req = ureq::http::Request::builder().method(method).uri(format!("http://127.0.0.1:{port}{path}"));
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    let mut resp = agent.run(req.body(body.as_bytes().to_vec()).unwrap()).unwrap();
    (resp.status().as_u16(), resp.body_mut().read_to_string().unwrap_or_default())
}

/// Every key with its DUMP (value and type; SCAN, so `keys` stays uncalled).
fn keys_and_values(c: &mut redis::Connection) -> BTreeMap<String, Vec<u8>> {
    let keys: Vec<String> = redis::cmd("SCAN")
        .cursor_arg(0)
        .arg("COUNT")
        .arg(10_000)
        .clone()
        .iter(c)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    keys.into_iter().map(|k| (k.clone(), redis::cmd("DUMP").arg(&k).query(c).unwrap())).collect()
}

fn script_cached(c: &mut redis::Connection) -> bool {
    let found: Vec<u8> = redis::cmd("SCRIPT").arg("EXISTS").arg(sha1_hex()).query(c).unwrap();
    found == [1]
}

fn calls(c: &mut redis::Connection, command: &str) -> u64 {
    command_stat(c, command).calls
}

fn never_run_counts(c: &mut redis::Connection) -> Vec<u64> {
    NEVER_RUN.iter().map(|cmd| calls(c, cmd)).collect()
}

/// `n` requests of client `client` to `/api`: their statuses.
fn statuses(stack: &Stack, client: &str, n: usize) -> Vec<u16> {
    (0..n).map(|_| stack.send("GET", "/api/x", &[("x-client", client)]).status).collect()
}

#[test]
fn the_shipped_webdis_acl_lets_only_the_filters_commands_through() {
    let stack = Stack::start(&config(6));
    assert_eq!(statuses(&stack, "a", 3), [200; 3]);
    let mut redis = stack.redis.connect();
    let () = redis::cmd("SET").arg("t:canary").arg("before").query(&mut redis).unwrap();
    assert!(script_cached(&mut redis), "the filter loaded its script through webdis");
    let keys = keys_and_values(&mut redis);
    let config: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("*").query(&mut redis).unwrap();
    let counts = never_run_counts(&mut redis);

    let wrong = basic(Some("not-the-password"));
    let good = basic(None);
    for attack in ATTACKS.iter().copied().chain([SCRIPT_FLUSH]) {
        for auth in [None, Some(wrong.as_str())] {
            assert_eq!(to_webdis(stack.webdis.port, attack, auth).0, 403, "{attack:?} with {auth:?}");
        }
    }
    for attack in ATTACKS.iter().copied() {
        assert_eq!(to_webdis(stack.webdis.port, attack, Some(&good)).0, 403, "{attack:?} with the credential");
    }
    // The filter's own commands: only with the credential.
    let evalsha = ("GET", &*format!("/EVALSHA/{}/0", sha1_hex()), "");
    for own in [INFO, evalsha, SMEMBERS] {
        assert_eq!(to_webdis(stack.webdis.port, own, None).0, 403, "{own:?}");
        assert_eq!(to_webdis(stack.webdis.port, own, Some(&wrong)).0, 403, "{own:?}");
    }
    let (status, body) = to_webdis(stack.webdis.port, INFO, Some(&good));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("redis_version"), "{body}");
    let (status, body) = to_webdis(stack.webdis.port, SMEMBERS, Some(&good));
    assert_eq!((status, body.as_str()), (200, r#"{"SMEMBERS":[]}"#));

    // Nothing reached Redis.
    assert_eq!(keys_and_values(&mut redis), keys);
    assert!(script_cached(&mut redis));
    assert_eq!(redis::cmd("CONFIG").arg("GET").arg("*").query::<Vec<String>>(&mut redis).unwrap(), config);
    assert_eq!(never_run_counts(&mut redis), counts, "{NEVER_RUN:?}");

    // The cache emptied behind the filter's back: it reloads the script
    // through webdis (with its credential) and goes on deciding exactly.
    let loads = calls(&mut redis, "script|load");
    let () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut redis).unwrap();
    assert_eq!(statuses(&stack, "a", 5), [200, 200, 200, 429, 429]);
    assert!(calls(&mut redis, "script|load") > loads, "the script was loaded again");
    assert!(script_cached(&mut redis));
    assert_eq!(statuses(&stack, "b", 8), [200, 200, 200, 200, 200, 200, 429, 429]);
}

#[test]
fn a_wrong_credential_is_a_store_error_whose_log_names_the_acl_and_not_the_password() {
    let password = "wrong-but-secret-9f3k";
    let store = r#""transport":"webdis","cluster":"ratelimit_store""#;
    let config = config(6).replacen(store, &format!(r#"{store},"username":"ratelimit","password":"{password}""#), 1);
    let stack = Stack::start(&config);
    assert_eq!(statuses(&stack, "a", 3), [503; 3], "fail closed: every call refused");
    let line = "store answered HTTP 403: webdis's ACL refused the call (check store.username and store.password)";
    let deadline = Instant::now() + Duration::from_secs(30);
    while !stack.envoy.log().contains(line) {
        assert!(Instant::now() < deadline, "no store-error line naming the ACL:\n{}", stack.envoy.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let sent = basic(Some(password));
    let log = stack.envoy.log();
    for secret in [password, sent.trim_start_matches("Basic ")] {
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
}

#[test]
fn a_password_from_the_vms_environment_decides_and_never_shows_on_the_admin_port() {
    const VAR: &str = "RATELIMIT_STORE_PASSWORD";
    let (user, password) = credential();
    let store = r#""transport":"webdis","cluster":"ratelimit_store""#;
    let config = config(2).replacen(store, &format!(r#"{store},"username":"{user}","password_env":"{VAR}""#), 1);
    let redis = RedisServer::start();
    let webdis = Webdis::start(redis.port);
    let backend = Backend::start();
    let (rendered, listener, admin) = render_on_fresh_ports(backend.port, webdis.port, Some(&config));
    let runtime = "                  runtime: envoy.wasm.runtime.v8\n";
    assert_eq!(rendered.matches(runtime).count(), 1);
    let keys = format!("{runtime}                  environment_variables: {{ host_env_keys: [\"{VAR}\"] }}\n");
    let rendered = rendered.replacen(runtime, &keys, 1);
    // Unset: refused at load, with the line naming the field.
    let refused = Envoy::start(&rendered, listener, admin, 1).err().expect("started without the password");
    let line = format!("store.password_env: {VAR} is not set (or empty) in the plugin's environment");
    assert!(refused.log.contains(&line), "{}", refused.log);
    // Set in Envoy's environment: every call passes webdis's ACL.
    let envoy = Envoy::start_with_env(&rendered, listener, admin, 1, &[], &[(VAR, password.as_str())])
        .unwrap_or_else(|e| panic!("{}", e.log));
    let agent = agent(Duration::from_secs(10));
    let url = format!("http://127.0.0.1:{listener}/api/x");
    let statuses: Vec<u16> = (0..3).map(|_| send(&agent, "GET", &url, &[("x-client", "a")]).status).collect();
    assert_eq!(statuses, [200, 200, 429], "decided by the store, fail closed");
    let dump = envoy.admin("/config_dump");
    assert!(dump.contains(VAR), "the dump shows the variable's name");
    assert!(!dump.contains(&password), "the password is on the admin port");
    assert!(!envoy.log().contains(&password), "the password is in the log");
}

/// The five algorithms, fail closed, keyed by a header: every command of
/// the script runs under the user (sliding_log: the sorted-set ones).
const RULES: &str = r#"
  {"name":"fw","match":{"path_prefix":"/fw"},"key":["header:x-client"],"failure_mode":"closed","limits":[{"algorithm":"fixed_window","limit":3,"window":"1h"}]},
  {"name":"sw","match":{"path_prefix":"/sw"},"key":["header:x-client"],"failure_mode":"closed","limits":[{"algorithm":"sliding_window","limit":3,"window":"1h"}]},
  {"name":"tb","match":{"path_prefix":"/tb"},"key":["header:x-client"],"failure_mode":"closed","limits":[{"algorithm":"token_bucket","limit":3,"window":"1h"}]},
  {"name":"gc","match":{"path_prefix":"/gc"},"key":["header:x-client"],"failure_mode":"closed","limits":[{"algorithm":"gcra","limit":3,"window":"1h","burst":3}]},
  {"name":"sl","match":{"path_prefix":"/sl"},"key":["header:x-client"],"failure_mode":"closed","limits":[{"algorithm":"sliding_log","limit":3,"window":"1h"}]}"#;

/// The password the documented user gets in these tests.
const PASSWORD: &str = "acl-test-password";

/// A connection as `user`.
fn connect_as(redis: &RedisServer, user: &str, password: &str) -> redis::Connection {
    let url = format!("redis://{user}:{password}@127.0.0.1:{}/", redis.port);
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

/// The error code of what `cmd` got from Redis (`NOPERM`, ...).
fn refusal(cmd: &redis::Cmd, c: &mut redis::Connection) -> String {
    match cmd.query::<redis::Value>(c) {
        Ok(v) => panic!("{:?} was allowed: {v:?}", cmd.args_iter().collect::<Vec<_>>()),
        Err(e) => format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")),
    }
}

#[test]
fn readmes_redis_user_lets_webdis_run_the_filters_script_and_nothing_else() {
    let redis = RedisServer::start();
    let mut root = redis.connect();
    set_user(&mut root, "admin", &["on", ">admin-password", "~*", "&*", "+@all"].map(String::from));
    let rules = readme_rules("webdis", PASSWORD);
    // Exactly what the filter and its script need.
    let mut needed = script_commands(SCRIPT);
    needed.extend(["evalsha", "script|load", "info", "smembers"].map(String::from));
    assert_eq!(allowed_commands(&rules), needed, "docs/store-security.md's webdis user");
    // webdis 0.1.9 sends `AUTH <password>` alone: it logs in as `default`.
    set_user(&mut root, "default", &rules);
    drop(root);
    let mut admin = connect_as(&redis, "admin", "admin-password");

    let webdis = Webdis::start_with(redis.port, &[("redis_auth", PASSWORD.into())]);
    let backend = Backend::start();
    // The documented user holds the keys of domain "demo" (envoy.yaml's);
    // overrides on, as shipped.
    let config = plugin_config(RULES).replacen(r#""domain":"t""#, r#""domain":"demo""#, 1).replacen(
        r#""rules":"#,
        r#""overrides":{},"rules":"#,
        1,
    );
    let envoy = start_from_template(backend.port, webdis.port, Some(&config), 2)
        .unwrap_or_else(|e| panic!("envoy refused to start:\n{}", e.log));
    let http = agent(Duration::from_secs(10));
    let decide = |path: &str, client: &str| {
        let url = format!("http://127.0.0.1:{}{path}", envoy.port);
        (0..5).map(|_| send(&http, "GET", &url, &[("x-client", client)]).status).collect::<Vec<u16>>()
    };
    let decide_one = |path: &str| {
        let url = format!("http://127.0.0.1:{}{path}", envoy.port);
        send(&http, "GET", &url, &[("x-client", "b")]).status
    };
    for path in ["/fw", "/sw", "/tb", "/gc", "/sl"] {
        assert_eq!(decide(path, "a"), [200, 200, 200, 429, 429], "{path}");
    }
    assert!(script_cached(&mut admin));

    // SCRIPT passes webdis whole; Redis refuses all of it but LOAD.
    let good = basic(None);
    let (status, body) = to_webdis(webdis.port, SCRIPT_FLUSH, Some(&good));
    assert_eq!(status, 200);
    assert!(body.starts_with(r#"{"SCRIPT":[false,"NOPERM"#), "{body}");
    assert!(script_cached(&mut admin));
    // EVALSHA of the filter's script on a key outside the domain.
    let outside = ("GET", &*format!("/EVALSHA/{}/1/other%3Akey/0", sha1_hex()), "");
    let (status, body) = to_webdis(webdis.port, outside, Some(&good));
    assert_eq!(status, 200);
    assert!(body.starts_with(r#"{"EVALSHA":[false,"NOPERM"#), "{body}");

    let dbsize: u64 = redis::cmd("DBSIZE").query(&mut admin).unwrap();
    // With the credential, any Lua can be loaded and run (SCRIPT LOAD, then
    // EVALSHA): it runs as this user, so it can do no more than the user.
    let lua = "return redis.call('FLUSHALL')";
    let (status, body) = to_webdis(webdis.port, ("PUT", "/SCRIPT/LOAD", lua), Some(&good));
    assert_eq!(status, 200, "{body}");
    let sha: serde_json::Value = serde_json::from_str(&body).unwrap();
    let sha = sha["SCRIPT"].as_str().unwrap();
    let (status, body) = to_webdis(webdis.port, ("GET", &*format!("/EVALSHA/{sha}/0"), ""), Some(&good));
    assert_eq!(status, 200);
    assert!(body.contains("The user executing the script can't run this command"), "{body}");

    // The user itself, straight to Redis.
    let mut user = connect_as(&redis, "default", PASSWORD);
    for cmd in [
        redis::cmd("FLUSHALL"),
        redis::cmd("KEYS").arg("*").clone(),
        redis::cmd("CONFIG").arg("GET").arg("maxmemory").clone(),
        redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("1").clone(),
        redis::cmd("EVAL").arg("return redis.call('FLUSHALL')").arg(0).clone(),
        redis::cmd("SCRIPT").arg("FLUSH").clone(),
        redis::cmd("SET").arg("other:key").arg("1").clone(),
        redis::cmd("SELECT").arg(1).clone(),
        redis::cmd("DEL").arg("other:key").clone(),
    ] {
        assert!(refusal(&cmd, &mut user).starts_with("NOPERM"), "{:?}", cmd.args_iter().collect::<Vec<_>>());
    }
    assert_eq!(redis::cmd("DBSIZE").query::<u64>(&mut admin).unwrap(), dbsize);

    // NOSCRIPT: the filter loads the script again through webdis as this user.
    let loads = calls(&mut admin, "script|load");
    let () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut admin).unwrap();
    for path in ["/fw", "/sw", "/tb", "/gc", "/sl"] {
        assert_eq!(decide(path, "b"), [200, 200, 200, 429, 429], "{path} after SCRIPT FLUSH");
    }
    assert!(calls(&mut admin, "script|load") > loads);
    assert!(script_cached(&mut admin));

    // The documented operator writes overrides and nothing else; the
    // filter's user applies a reset (DEL) of b's counts.
    let op_rules = readme_rules("operator", "operator-password");
    set_user(&mut admin, "operator", &op_rules);
    let mut operator = connect_as(&redis, "operator", "operator-password");
    let b = ratelimit::identity::digest("b");
    for rule in ["fw", "sw", "tb", "gc", "sl"] {
        let key = ratelimit::keys::override_key("demo", &b, rule);
        let () = redis::cmd("SET").arg(&key).arg("reset").arg("PX").arg(60_000).query(&mut operator).unwrap();
        let () = redis::cmd("SADD").arg("demo:overrides").arg(&key).query(&mut operator).unwrap();
    }
    for cmd in [
        redis::cmd("GET").arg(format!("demo:{{{b}}}:fw:3600000:0")).clone(),
        redis::cmd("SET").arg("demo:x").arg("1").clone(),
        redis::cmd("SADD").arg("demo:x").arg("1").clone(),
        redis::cmd("KEYS").arg("*").clone(),
        redis::cmd("FLUSHALL"),
    ] {
        assert!(refusal(&cmd, &mut operator).starts_with("NOPERM"), "{:?}", cmd.args_iter().collect::<Vec<_>>());
    }
    // Within the bound (2 s) b has a fresh window on every rule.
    let deadline = Instant::now() + Duration::from_secs(20);
    for path in ["/fw", "/sw", "/tb", "/gc", "/sl"] {
        while decide_one(path) != 200 {
            assert!(Instant::now() < deadline, "{path}: no reset after 20 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(decide(path, "b"), [200, 200, 429, 429, 429], "{path} after its reset: 3 in all");
    }
}

#[test]
fn every_shipped_webdis_configuration_carries_the_credential_of_webdis_json() {
    let (user, password) = credential();
    // The plugin configuration of the three Envoy files, as JSON text.
    for file in ["envoy.yaml", "envoy-remote.yaml", "llm-gateway.yaml"] {
        let text = config_text(file);
        let doc: Yaml = serde_norway::from_str(&text).unwrap();
        let listener = &doc["static_resources"]["listeners"][0];
        let filters = &listener["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"];
        let wasm =
            filters.as_sequence().unwrap().iter().find(|f| f["name"].as_str() == Some("envoy.filters.http.wasm"));
        let value = wasm.unwrap()["typed_config"]["config"]["configuration"]["value"].as_str().unwrap();
        let json: serde_json::Value = serde_json::from_str(value).unwrap();
        assert_eq!(json["store"]["transport"], "webdis", "{file}");
        assert_eq!(
            (json["store"]["username"].as_str(), json["store"]["password"].as_str()),
            (Some(&*user), Some(&*password)),
            "{file}"
        );
    }
    // The Kubernetes examples that call webdis.
    for (file, path) in
        [("istio.yaml", &["spec", "pluginConfig"][..]), ("envoy-gateway.yaml", &["spec", "wasm", "0", "config"][..])]
    {
        let text = config_text(file);
        let doc = serde_norway::Deserializer::from_str(&text)
            .map(|d| <Yaml as serde::Deserialize>::deserialize(d).unwrap())
            .find(|d| d["kind"].as_str().is_some_and(|k| k.contains("Wasm") || k.contains("Extension")))
            .unwrap();
        let mut at = &doc;
        for step in path {
            at = match step.parse::<usize>() {
                Ok(i) => &at[i],
                Err(_) => &at[*step],
            };
        }
        let store = &at["store"];
        assert_eq!(
            (store["username"].as_str(), store["password"].as_str()),
            (Some(&*user), Some(&*password)),
            "{file}"
        );
    }
}
