//! Envoy downloading the module itself (`vm_config.code.remote`, the file
//! envoy-config/envoy-remote.yaml): the right sha256 loads it and requests
//! go through the limiter; a wrong one is refused.

use std::time::{Duration, Instant};

use host_tests::backend::Backend;
use host_tests::envoy::{Envoy, EnvoyTemplate};
use host_tests::file_server::FileServer;
use host_tests::http::{agent, send, Answer};
use host_tests::oci::sha256_hex;
use host_tests::paths::dist;
use host_tests::process::free_port;
use host_tests::redis_server::RedisServer;
use host_tests::stack::command_calls;
use host_tests::webdis::Webdis;

use crate::render_remote;

/// One rule every request matches, with a limit no test reaches.
const PLUGIN_CONFIG: &str = r#"{"domain":"t","store":{"transport":"webdis","cluster":"ratelimit_store","authority":"webdis","timeout_ms":250},
  "rules":[{"name":"all","match":{"path_prefix":"/"},"key":["client_ip"],"limits":[{"limit":1000,"window":"1m"}]}]}"#;

/// Everything envoy-remote.yaml needs, with Envoy told to expect `sha256`.
struct RemoteStack {
    envoy: Envoy,
    source: FileServer,
    backend: Backend,
    redis: RedisServer,
    _webdis: Webdis,
}

impl RemoteStack {
    fn start(sha256: &str) -> RemoteStack {
        let redis = RedisServer::start();
        let webdis = Webdis::start(redis.port);
        let backend = Backend::start();
        let source = FileServer::start(std::fs::read(dist("ratelimit.wasm")).unwrap());
        let (listener, admin) = (free_port(), free_port());
        let t = EnvoyTemplate {
            listener,
            admin,
            backend: backend.port,
            webdis: webdis.port,
            module: String::new(),
            plugin_config: Some(PLUGIN_CONFIG.to_string()),
        };
        let envoy = Envoy::start(&render_remote(&t, source.port, sha256), listener, admin, 1)
            .unwrap_or_else(|e| panic!("envoy refused to start:\n{}", e.log));
        RemoteStack { envoy, source, backend, redis, _webdis: webdis }
    }

    fn get(&self, path: &str) -> Answer {
        send(&agent(Duration::from_secs(10)), "GET", &format!("http://127.0.0.1:{}{path}", self.envoy.port), &[])
    }

    /// Waits until Envoy's log holds `line` (it is flushed every 200 ms).
    fn wait_for_log(&self, line: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.envoy.log().contains(line) {
            assert!(Instant::now() < deadline, "no {line:?} in Envoy's log:\n{}", self.envoy.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn the_right_sha256_loads_the_module_and_requests_go_through_the_limiter() {
    let wasm = std::fs::read(dist("ratelimit.wasm")).unwrap();
    let stack = RemoteStack::start(&sha256_hex(&wasm));
    let a = stack.get("/api/items");
    assert_eq!((a.status, a.body.as_str()), (200, "ok\n"));
    // The limiter decided, in Redis, and said so in its headers.
    assert_eq!(a.header("x-ratelimit-limit"), Some("1000"));
    assert_eq!(a.header("x-ratelimit-remaining"), Some("999"));
    let before = command_calls(&stack.redis, "evalsha");
    assert_eq!(stack.get("/api/items").header("x-ratelimit-remaining"), Some("998"));
    assert_eq!(command_calls(&stack.redis, "evalsha") - before, 1, "one store call per request");
    assert_eq!(stack.source.requests(), 1, "Envoy downloads the module once");
    stack.wait_for_log("Wasm remote code fetch is unstable and may cause a crash");
}

#[test]
fn a_wrong_sha256_is_refused_envoy_stays_up_and_answers_503() {
    let mut stack = RemoteStack::start(&sha256_hex(b"not the module"));
    // Envoy downloads, finds other bytes, retries (num_retries: 3), gives up,
    // and still comes up: the listener answers, fail-closed, without the module.
    let a = stack.get("/api/items");
    assert_eq!((a.status, a.body.as_str()), (503, ""));
    stack.wait_for_log("Retry limit exceeded for fetching data from remote data source.");
    stack.wait_for_log("Plugin ratelimit failed to load");
    stack.wait_for_log("Plugin configured to fail closed failed to load");
    assert_eq!(stack.source.requests(), 4, "one download and three retries");
    assert_eq!(stack.backend.served.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(command_calls(&stack.redis, "evalsha"), 0);
    assert!(stack.envoy.process.running(), "Envoy must stay up");
    assert_eq!(stack.get("/").status, 503);
}
