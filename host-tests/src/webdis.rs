//! webdis (Debian 0.1.9) in front of a Redis, configured from the project's
//! `envoy-config/webdis.json` with only the addresses changed: its ACL
//! refuses everything but the filter's commands, and those only with the
//! basic-auth credential it names. Every plugin configuration the tests
//! hand to a webdis build gets that credential in one place,
//! [`with_credential`], unless it names one itself.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::paths::{program, root};
use crate::process::{free_port, wait_for_port, Guard, TempDir};
use crate::store_clock::StoreClock;

/// A running webdis, stopped on drop.
pub struct Webdis {
    /// Its HTTP port on 127.0.0.1.
    pub port: u16,
    /// The process.
    pub process: Guard,
    config: std::path::PathBuf,
    dir: TempDir,
    env: Vec<(String, String)>,
}

/// The shipped `envoy-config/webdis.json`.
pub fn shipped_config() -> Value {
    let text = std::fs::read_to_string(root().join("envoy-config/webdis.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The (username, password) of the shipped ACL's one `http_basic_auth`.
pub fn credential() -> (String, String) {
    let config = shipped_config();
    let auths: Vec<&str> =
        config["acl"].as_array().unwrap().iter().filter_map(|a| a["http_basic_auth"].as_str()).collect();
    assert_eq!(auths.len(), 1, "webdis.json names one basic-auth credential");
    let (user, password) = auths[0].split_once(':').unwrap();
    (user.to_string(), password.to_string())
}

/// `plugin_config` with the shipped credential added to its `store`, when
/// that store is webdis's and names no credential itself. Inserted as text
/// after the brace opening `store`, so the rest stays byte for byte (a test
/// of a field given twice keeps it twice); anything else (not JSON, no
/// single `"store": {`) is returned unchanged.
pub fn with_credential(plugin_config: &str) -> String {
    let unchanged = || plugin_config.to_string();
    let Ok(doc) = serde_json::from_str::<Value>(plugin_config) else { return unchanged() };
    let Some(store) = doc.get("store").and_then(Value::as_object) else { return unchanged() };
    let webdis = store.get("transport").is_none_or(|t| t == "webdis");
    if !webdis || store.contains_key("username") || store.contains_key("password") {
        return unchanged();
    }
    let braces: Vec<usize> = plugin_config
        .match_indices("\"store\"")
        .filter_map(|(at, key)| {
            let rest = plugin_config[at + key.len()..].trim_start().strip_prefix(':')?.trim_start();
            rest.starts_with('{').then(|| plugin_config.len() - rest.len())
        })
        .collect();
    let [brace] = braces[..] else { return unchanged() };
    let (user, password) = credential();
    let empty = plugin_config[brace + 1..].trim_start().starts_with('}');
    let fields = format!(
        r#""username":{},"password":{}{}"#,
        Value::from(user),
        Value::from(password),
        if empty { "" } else { "," }
    );
    let mut out = plugin_config.to_string();
    out.insert_str(brace + 1, &fields);
    out
}

impl Webdis {
    /// Starts webdis talking to the Redis on `redis_port`.
    pub fn start(redis_port: u16) -> Webdis {
        Webdis::start_with(redis_port, &[])
    }

    /// The same with top-level fields of webdis.json replaced or added
    /// (e.g. `redis_auth`).
    pub fn start_with(redis_port: u16, fields: &[(&str, Value)]) -> Webdis {
        Webdis::start_in(redis_port, fields, Vec::new())
    }

    /// Starts webdis talking to the Redis on `redis_port`, on the store's
    /// clock `clock` (see `store_clock`).
    pub fn start_on_clock(redis_port: u16, clock: &StoreClock) -> Webdis {
        Webdis::start_in(redis_port, &[], clock.env())
    }

    fn start_in(redis_port: u16, fields: &[(&str, Value)], env: Vec<(String, String)>) -> Webdis {
        let dir = TempDir::new("webdis");
        let port = free_port();
        let mut config = shipped_config();
        config["redis_host"] = "127.0.0.1".into();
        config["redis_port"] = redis_port.into();
        config["http_host"] = "127.0.0.1".into();
        config["http_port"] = port.into();
        // webdis writes its log to its working directory unless told.
        config["logfile"] = dir.path().join("webdis.log").display().to_string().into();
        for (name, value) in fields {
            config[*name] = value.clone();
        }
        let path = dir.path().join("webdis.json");
        std::fs::write(&path, config.to_string()).unwrap();
        let process = spawn(&path, &dir, &env);
        wait_for_port(port, "webdis", Duration::from_secs(10));
        Webdis { port, process, config: path, dir, env }
    }

    /// Starts it again after `process.stop()`, on the same port.
    pub fn restart(&mut self) {
        self.process.stop();
        self.process = spawn(&self.config, &self.dir, &self.env);
        wait_for_port(self.port, "webdis", Duration::from_secs(10));
    }
}

fn spawn(config: &std::path::Path, dir: &TempDir, env: &[(String, String)]) -> Guard {
    let mut cmd = Command::new(program("webdis"));
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    cmd.arg(config);
    Guard::spawn("webdis", cmd, &dir.path().join("webdis.log"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_credential_goes_into_webdis_stores_only() {
        let (user, password) = credential();
        let auth = format!(r#""username":"{user}","password":"{password}""#);
        assert_eq!(
            with_credential(r#"{"domain":"t", "store" : { "cluster":"s"},"rules":[]}"#),
            format!(r#"{{"domain":"t", "store" : {{{auth}, "cluster":"s"}},"rules":[]}}"#)
        );
        assert_eq!(
            with_credential(r#"{"store":{"transport":"webdis"}}"#),
            format!(r#"{{"store":{{{auth},"transport":"webdis"}}}}"#)
        );
        assert_eq!(with_credential(r#"{"store":{ }}"#), format!(r#"{{"store":{{{auth} }}}}"#));
        for kept in [
            r#"{"store":{"transport":"redis","cluster":"s"}}"#,
            r#"{"store":{"cluster":"s","username":"u","password":"p"}}"#,
            r#"{"store":{"cluster":"s","password":"p"}}"#,
            r#"{"store":"s"}"#,
            r#"{"rules":[]}"#,
            r#"{"store":{"cluster":"s"},"store":{"cluster":"t"}}"#,
            "{",
        ] {
            assert_eq!(with_credential(kept), kept);
        }
    }
}
