//! The Envoy configurations of envoy-config/ pass `envoy --mode validate`:
//! envoy.yaml and envoy-remote.yaml rendered to loopback, envoy-remote.yaml
//! as shipped, and the cluster Envoy Gateway's EnvoyPatchPolicy adds.

use std::process::Command;

use host_tests::envoy::{config_text, render, EnvoyTemplate};
use host_tests::oci::{run, sha256_hex};
use host_tests::paths::{dist, envoy};
use host_tests::process::{free_port, TempDir};
use serde_norway::Value;

use crate::render_remote;

fn template() -> EnvoyTemplate {
    EnvoyTemplate {
        listener: free_port(),
        admin: free_port(),
        backend: free_port(),
        webdis: free_port(),
        module: dist("ratelimit.wasm").display().to_string(),
        // Each example keeps its own plugin configuration, as shipped.
        plugin_config: None,
    }
}

/// Runs `envoy --mode validate` on `config`; its output.
fn validate(config: &str) -> String {
    let dir = TempDir::new("validate");
    let path = dir.path().join("envoy.yaml");
    std::fs::write(&path, config).unwrap();
    let out = run(Command::new(envoy()).args(["--mode", "validate", "--disable-hot-restart", "-c"]).arg(&path));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains(&format!("configuration '{}' OK", path.display())), "{stdout}");
    stdout
}

#[test]
fn envoy_yaml_and_envoy_remote_yaml_rendered_to_loopback_are_valid() {
    let t = template();
    validate(&render(&t));
    validate(&render_remote(&t, free_port(), &sha256_hex(&std::fs::read(dist("ratelimit.wasm")).unwrap())));
}

#[test]
fn envoy_remote_yaml_as_shipped_is_valid() {
    validate(&config_text("envoy-remote.yaml"));
}

#[test]
fn the_prometheus_stats_tags_fragment_is_valid_envoy_config() {
    validate(&config_text("prometheus-stats-tags.yaml"));
}

#[test]
fn both_envoy_files_reload_a_failed_vm() {
    for file in ["envoy.yaml", "envoy-remote.yaml"] {
        let v: Value = serde_norway::from_str(&config_text(file)).unwrap();
        let config = &v["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
            ["http_filters"][0]["typed_config"]["config"];
        assert_eq!(config["failure_policy"].as_str(), Some("FAIL_RELOAD"), "{file}");
    }
}

/// A config as YAML, `code` of the wasm filter and the cluster `wasm_source` taken out.
fn without_module_source(text: &str) -> Value {
    let mut v: Value = serde_norway::from_str(text).unwrap();
    let filter = &mut v["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        ["http_filters"][0]["typed_config"]["config"];
    filter["vm_config"].as_mapping_mut().unwrap().remove("code").unwrap();
    let clusters = v["static_resources"]["clusters"].as_sequence_mut().unwrap();
    clusters.retain(|c| c["name"].as_str() != Some("wasm_source"));
    v
}

#[test]
fn envoy_remote_yaml_is_envoy_yaml_with_the_module_fetched_over_http() {
    let t = template();
    let source = free_port();
    let remote_text = render_remote(&t, source, "00");
    assert_eq!(without_module_source(&remote_text), without_module_source(&render(&t)));

    let remote: Value = serde_norway::from_str(&config_text("envoy-remote.yaml")).unwrap();
    let code = &remote["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        ["http_filters"][0]["typed_config"]["config"]["vm_config"]["code"]["remote"];
    assert_eq!(code["http_uri"]["cluster"].as_str(), Some("wasm_source"));
    // Quoted in the file, so whatever hash goes there stays a string.
    assert_eq!(code["sha256"].as_str(), Some("REPLACE-WITH-WASM-SHA256"));
    let clusters = remote["static_resources"]["clusters"].as_sequence().unwrap();
    assert!(clusters.iter().any(|c| c["name"].as_str() == Some("wasm_source")));
}

#[test]
fn the_cluster_envoy_gateway_adds_is_valid_envoy_config() {
    let text = config_text("envoy-gateway.yaml");
    let patch = serde_norway::Deserializer::from_str(&text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .find(|d| d["kind"].as_str() == Some("EnvoyPatchPolicy"))
        .unwrap();
    let cluster = serde_json::to_value(&patch["spec"]["jsonPatches"][0]["operation"]["value"]).unwrap();
    let bootstrap = serde_json::json!({ "static_resources": { "clusters": [cluster] } });
    validate(&bootstrap.to_string());
}

#[test]
fn the_llm_gateway_is_valid_and_its_plugin_configuration_loads() {
    let text = config_text("llm-gateway.yaml");
    let module = dist("ratelimit.wasm").display().to_string();
    validate(&text.replace("/etc/envoy/ratelimit.wasm", &module));
    let v: Value = serde_norway::from_str(&text).unwrap();
    let filters = v["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        ["http_filters"]
        .as_sequence()
        .unwrap();
    let names: Vec<&str> = filters.iter().filter_map(|f| f["name"].as_str()).collect();
    // The compressor before the limiter (it reads the client's
    // Accept-Encoding first, and compresses after the limiter read the
    // usage), the router last.
    assert_eq!(names, ["envoy.filters.http.compressor", "envoy.filters.http.wasm", "envoy.filters.http.router"]);
    let config = &filters[1]["typed_config"]["config"];
    assert_eq!(config["failure_policy"].as_str(), Some("FAIL_RELOAD"));
    let plugin = config["configuration"]["value"].as_str().unwrap();
    let loaded = ratelimit::config::load(plugin.as_bytes()).unwrap();
    let rule = &loaded.rules[0];
    assert!(rule.cost.after_response(), "tokens are charged after the response");
    assert!(rule.cost.reservation().is_some(), "each request's worst case reserved at admission");
    assert_eq!(config["allow_on_headers_stop_iteration"].as_bool(), Some(true), "the body reaches the filter");
    // Requests a minute, tokens an hour, and completions in flight at once.
    let algorithms: Vec<&str> = rule.limits.iter().map(|l| l.spec.algorithm.name()).collect();
    assert_eq!(algorithms, ["sliding_window", "token_bucket", "concurrency"]);
    assert_eq!(rule.limits[2].spec.limit, 8);
    assert!(v["stats_config"]["stats_tags"][0]["tag_name"].as_str() == Some("rule"));
}
