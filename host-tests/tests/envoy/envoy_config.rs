//! The shipped Envoy configuration keeps its promises.

use host_tests::envoy::template_text;
use host_tests::paths::root;

#[test]
fn the_rate_limiter_is_the_first_http_filter() {
    let text = template_text();
    let filters = text.split("http_filters:").nth(1).unwrap();
    let first = filters.lines().find(|l| l.trim_start().starts_with("- name:")).unwrap();
    assert_eq!(first.trim(), "- name: envoy.filters.http.wasm");
}

#[test]
fn the_route_never_retries_a_429() {
    let text = template_text();
    let retry_on = text.lines().find_map(|l| l.trim().strip_prefix("retry_on:")).unwrap().trim();
    for cond in retry_on.split(',') {
        assert!(
            ["connect-failure", "refused-stream", "reset"].contains(&cond),
            "retry_on {cond} could retry a response the upstream or the limiter sent"
        );
    }
    assert!(!text.contains("retriable_status_codes"));
}

#[test]
fn docker_compose_runs_the_same_envoy_config() {
    let compose = std::fs::read_to_string(root().join("envoy-config/docker-compose.yaml")).unwrap();
    assert!(compose.contains("./envoy.yaml:/etc/envoy/envoy.yaml"), "{compose}");
    assert!(compose.contains("./webdis.json:"), "{compose}");
    assert!(compose.contains("ratelimit.wasm:/etc/envoy/ratelimit.wasm"), "{compose}");
    assert!(compose.contains("envoyproxy/envoy:v1.40"), "{compose}");
}

#[test]
fn every_shipped_connection_manager_normalizes_paths_before_the_filter() {
    for file in ["envoy.yaml", "envoy-remote.yaml", "llm-gateway.yaml"] {
        let v: serde_norway::Value = serde_norway::from_str(&host_tests::envoy::config_text(file)).unwrap();
        let hcm = &v["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
        assert_eq!(hcm["normalize_path"].as_bool(), Some(true), "{file}");
        assert_eq!(hcm["merge_slashes"].as_bool(), Some(true), "{file}");
        assert_eq!(hcm["path_with_escaped_slashes_action"].as_str(), Some("REJECT_REQUEST"), "{file}");
    }
}

#[test]
fn every_shipped_admin_listens_on_loopback_only_and_compose_publishes_none() {
    // The admin's /config_dump shows the plugin configuration, a store
    // password included, to whoever reaches it.
    for file in ["envoy.yaml", "envoy-remote.yaml", "llm-gateway.yaml", "redis-cluster-proxy.yaml"] {
        let v: serde_norway::Value = serde_norway::from_str(&host_tests::envoy::config_text(file)).unwrap();
        let address = v["admin"]["address"]["socket_address"]["address"].as_str();
        assert_eq!(address, Some("127.0.0.1"), "{file}");
    }
    let compose: serde_norway::Value =
        serde_norway::from_str(&host_tests::envoy::config_text("docker-compose.yaml")).unwrap();
    let ports: Vec<&str> =
        compose["services"]["envoy"]["ports"].as_sequence().unwrap().iter().filter_map(|p| p.as_str()).collect();
    assert_eq!(ports, ["10000:10000"], "only the API is published");
}
