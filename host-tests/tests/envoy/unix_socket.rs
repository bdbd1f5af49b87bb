//! A listener on a Unix socket: its clients have no IP address, and a
//! `client_ip` rule still applies to them (once, it silently did not).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use host_tests::backend::Backend;
use host_tests::envoy::{render, Envoy, EnvoyTemplate};
use host_tests::paths::dist;
use host_tests::process::{free_port, TempDir};
use host_tests::redis_server::RedisServer;
use host_tests::webdis::Webdis;
use host_tests::windows::{start_clear_of_boundary, HOUR};

use crate::plugin_config;

/// The status of one GET on a fresh connection to the socket at `path`.
fn get(path: &std::path::Path) -> u16 {
    let mut conn = UnixStream::connect(path).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    conn.write_all(b"GET /api/items HTTP/1.1\r\nhost: local\r\nconnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

#[test]
fn a_client_ip_rule_applies_to_clients_of_a_unix_socket_listener() {
    let rules = r#"{"name":"per-ip","key":["client_ip"],"failure_mode":"closed",
        "limits":[{"algorithm":"fixed_window","limit":2,"window":"1h"}]}"#;
    // All three requests in one hour's window.
    start_clear_of_boundary(HOUR, Duration::from_secs(30));
    let redis = RedisServer::start();
    let webdis = Webdis::start(redis.port);
    let backend = Backend::start();
    let dir = TempDir::new("uds");
    let socket = dir.path().join("envoy.sock");
    let t = EnvoyTemplate {
        listener: free_port(),
        admin: free_port(),
        backend: backend.port,
        webdis: webdis.port,
        module: dist("ratelimit.wasm").display().to_string(),
        plugin_config: Some(plugin_config(rules)),
    };
    let tcp = format!("socket_address: {{ address: 127.0.0.1, port_value: {} }}", t.listener);
    let config = render(&t);
    assert_eq!(config.matches(&tcp).count(), 1);
    let config = config.replace(&tcp, &format!("pipe: {{ path: {} }}", socket.display()));
    let envoy = Envoy::start(&config, t.listener, t.admin, 1).unwrap_or_else(|e| panic!("{}", e.log));
    let statuses: Vec<u16> = (0..3).map(|_| get(&socket)).collect();
    assert_eq!(statuses, [200, 200, 429], "the socket's clients are one client");
    assert_eq!(envoy.stat("wasmcustom.ratelimit.per-ip.allowed"), 2);
}
