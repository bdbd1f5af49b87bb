//! Two plugin configurations on one `vm_id` (one VM, two root contexts):
//! each keeps its own breaker, deny cache, fallback shares and lease table
//! in shared data, so a store that fails for one never shuts the other.

use host_tests::backend::Backend;
use host_tests::envoy::{render_on_fresh_ports, Envoy};
use host_tests::http::{agent, send};
use host_tests::process::free_port;
use host_tests::redis_server::RedisServer;
use host_tests::webdis::{with_credential, Webdis};

use crate::plugin_config;

/// The rendered wasm filter, whole, from its `- name:` line to the line
/// before the next filter.
fn wasm_filter(config: &str) -> String {
    let start = config.find("          - name: envoy.filters.http.wasm").unwrap();
    let end = start + config[start..].find("          # Authentication filters").unwrap();
    config[start..end].to_string()
}

#[test]
fn a_failing_store_of_one_plugin_never_opens_the_breaker_of_another_on_the_same_vm() {
    let redis = RedisServer::start();
    let webdis = Webdis::start(redis.port);
    let backend = Backend::start();
    // `a` fails closed on a healthy store; `b` calls a store nobody serves.
    let a = plugin_config(
        r#"{"name":"a","match":{"path_prefix":"/a"},"key":["client_ip"],"failure_mode":"closed",
            "limits":[{"algorithm":"fixed_window","limit":100,"window":"1h"}]}"#,
    );
    let b = plugin_config(
        r#"{"name":"b","match":{"path_prefix":"/b"},"key":["client_ip"],"failure_mode":"closed",
            "limits":[{"algorithm":"fixed_window","limit":100,"window":"1h"}]}"#,
    )
    .replace(r#""domain":"t""#, r#""domain":"u""#)
    .replace(r#""cluster":"ratelimit_store""#, r#""cluster":"dead_store""#);
    let (config, listener, admin) = render_on_fresh_ports(backend.port, webdis.port, Some(&a));
    // The second filter: the same VM (vm_id, runtime, code), another plugin.
    let first = wasm_filter(&config);
    let value_at = first.find("value: '").unwrap();
    let value_end = value_at + first[value_at..].find('\n').unwrap();
    let escaped = with_credential(&b).replace('\'', "''").replace('\n', " ");
    let second = format!("{}value: '{escaped}'{}", &first[..value_at], &first[value_end..])
        .replace("name: ratelimit\n", "name: ratelimit_b\n")
        .replace("root_id: ratelimit\n", "root_id: ratelimit_b\n");
    assert!(second.contains("vm_id: ratelimit"), "{second}");
    let config = config.replacen(&first, &format!("{first}{second}"), 1);
    let dead = format!(
        "\n  - name: dead_store\n    type: STATIC\n    connect_timeout: 0.25s\n    load_assignment:\n      cluster_name: dead_store\n      endpoints:\n      - lb_endpoints:\n        - endpoint:\n            address:\n              socket_address: {{ address: 127.0.0.1, port_value: {} }}\n",
        free_port()
    );
    let config = format!("{}{dead}", config.trim_end());
    let envoy = Envoy::start(&config, listener, admin, 1).unwrap_or_else(|e| panic!("{}", e.log));
    let http = agent(std::time::Duration::from_secs(10));
    let get = |path: &str| send(&http, "GET", &format!("http://127.0.0.1:{listener}{path}"), &[]).status;
    // b's store refuses every call: b fails closed, and its breaker opens.
    let b_statuses: Vec<u16> = (0..5).map(|_| get("/b")).collect();
    assert_eq!(b_statuses, [503; 5]);
    assert!(envoy.stat("wasmcustom.ratelimit.b.fail_closed") >= 5);
    // a's store is healthy: decided there, never 503.
    let a_statuses: Vec<u16> = (0..5).map(|_| get("/a")).collect();
    assert_eq!(a_statuses, [200; 5], "{}", envoy.log());
    assert_eq!(envoy.stat("wasmcustom.ratelimit.a.store_errors"), 0);
    assert_eq!(envoy.stat("wasmcustom.ratelimit.a.allowed"), 5);
}
