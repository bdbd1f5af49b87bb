//! The Kubernetes examples of envoy-config/ (Istio, Envoy Gateway, Higress
//! and the store they share) parse, use only their CRDs' fields, carry a
//! plugin configuration the filter accepts, and name clusters that exist.

use host_tests::envoy::config_text;
use ratelimit::config::Config;
use ratelimit::store::Transport;
use serde_norway::Value;

use crate::crds::{Crd, EG_EXTENSION_POLICY, EG_PATCH_POLICY, HIGRESS_WASM_PLUGIN, ISTIO_WASM_PLUGIN};
use crate::{build, VERSION};

/// What the examples hold where the user puts the image's manifest digest.
const PLACEHOLDER: &str = "REPLACE-WITH-MANIFEST-DIGEST";

/// The documents of an example, the placeholder replaced by `digest` (hex).
fn documents(file: &str, digest: &str) -> Vec<Value> {
    let text = config_text(file).replace(PLACEHOLDER, digest);
    serde_norway::Deserializer::from_str(&text).map(|d| serde::Deserialize::deserialize(d).unwrap()).collect()
}

/// (apiVersion, kind, namespace/name) of each document.
fn identities(docs: &[Value]) -> Vec<(String, String, String)> {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    docs.iter()
        .map(|d| {
            let m = &d["metadata"];
            (s(&d["apiVersion"]), s(&d["kind"]), format!("{}/{}", s(&m["namespace"]), s(&m["name"])))
        })
        .collect()
}

/// The one document of `crd`'s kind in `docs`.
fn one<'a>(docs: &'a [Value], crd: &Crd) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| crd.is(d)).collect();
    assert_eq!(found.len(), 1, "one {} expected", crd.kind);
    found[0]
}

/// A module configuration (a YAML mapping) parsed by the filter itself.
fn filter_config(value: &Value) -> Result<Config, String> {
    let json = serde_json::to_vec(value).unwrap();
    Config::parse(&json).map_err(|e| e.to_string())
}

/// The manifest digest of a fresh image, hex without `sha256:`.
fn digest_hex() -> String {
    build().layout.manifest_digest().strip_prefix("sha256:").unwrap().to_string()
}

#[test]
fn each_example_holds_exactly_its_resources() {
    let d = digest_hex();
    let ids = |file: &str| identities(&documents(file, &d));
    let id = |a: &str, k: &str, n: &str| (a.to_string(), k.to_string(), n.to_string());
    assert_eq!(ids("istio.yaml"), [id("extensions.istio.io/v1alpha1", "WasmPlugin", "istio-system/ratelimit")]);
    assert_eq!(
        ids("envoy-gateway.yaml"),
        [
            id("gateway.envoyproxy.io/v1alpha1", "EnvoyExtensionPolicy", "default/ratelimit"),
            id("gateway.envoyproxy.io/v1alpha1", "EnvoyPatchPolicy", "default/ratelimit-store"),
        ]
    );
    assert_eq!(ids("higress.yaml"), [id("extensions.higress.io/v1alpha1", "WasmPlugin", "higress-system/ratelimit")]);
    assert_eq!(
        ids("kubernetes-store.yaml"),
        [
            id("v1", "Namespace", "/ratelimit"),
            id("v1", "ConfigMap", "ratelimit/webdis"),
            id("apps/v1", "Deployment", "ratelimit/redis"),
            id("v1", "Service", "ratelimit/redis"),
            id("apps/v1", "Deployment", "ratelimit/webdis"),
            id("v1", "Service", "ratelimit/webdis"),
        ]
    );
}

#[test]
fn the_custom_resources_use_only_their_crd_fields() {
    let d = digest_hex();
    for (file, crd) in [
        ("istio.yaml", &ISTIO_WASM_PLUGIN),
        ("envoy-gateway.yaml", &EG_EXTENSION_POLICY),
        ("envoy-gateway.yaml", &EG_PATCH_POLICY),
        ("higress.yaml", &HIGRESS_WASM_PLUGIN),
    ] {
        let docs = documents(file, &d);
        let problems = crd.problems(one(&docs, crd));
        assert!(problems.is_empty(), "{file}: {problems:#?}");
    }
}

#[test]
fn the_field_check_catches_a_misspelled_or_misplaced_field() {
    let docs = documents("istio.yaml", &digest_hex());
    let mut doc = one(&docs, &ISTIO_WASM_PLUGIN).clone();
    doc["spec"]["sha"] = doc["spec"]["sha256"].clone();
    doc["spec"]["phase"] = "AUTHENTICATION".into();
    doc["spec"]["selector"]["labels"] = doc["spec"]["selector"]["matchLabels"].clone();
    assert_eq!(
        ISTIO_WASM_PLUGIN.problems(&doc),
        [
            r#"spec.selector.labels.istio: not a field of extensions.istio.io/v1alpha1 WasmPlugin"#,
            r#"spec.phase: Some("AUTHENTICATION") is not one of ["UNSPECIFIED_PHASE", "AUTHN", "AUTHZ", "STATS"]"#,
            r#"spec.sha: not a field of extensions.istio.io/v1alpha1 WasmPlugin"#,
        ]
    );
}

#[test]
fn the_sha256_fields_take_the_manifest_digest_quoted_and_the_urls_this_version() {
    // In the files as shipped: the placeholder, in double quotes.
    for file in ["istio.yaml", "envoy-gateway.yaml", "higress.yaml"] {
        let lines: Vec<String> = config_text(file)
            .lines()
            .filter(|l| l.trim_start().starts_with("sha256:"))
            .map(|l| l.trim().into())
            .collect();
        assert_eq!(lines, [format!("sha256: \"{PLACEHOLDER}\"")], "{file}");
    }
    // An all-digit digest stays a string (unquoted, YAML would read a number),
    // and every filled-in value has the form the CRDs' pattern asks: ^[a-f0-9]{64}$.
    let all_digits = "1".repeat(64);
    let real = digest_hex();
    for digest in [all_digits.as_str(), real.as_str()] {
        let istio = documents("istio.yaml", digest);
        let eg = documents("envoy-gateway.yaml", digest);
        let higress = documents("higress.yaml", digest);
        let values = [
            &one(&istio, &ISTIO_WASM_PLUGIN)["spec"]["sha256"],
            &one(&eg, &EG_EXTENSION_POLICY)["spec"]["wasm"][0]["code"]["image"]["sha256"],
            &one(&higress, &HIGRESS_WASM_PLUGIN)["spec"]["sha256"],
        ];
        for v in values {
            let s = v.as_str().unwrap_or_else(|| panic!("sha256 {v:?} is not a string"));
            assert!(s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')), "{s}");
            assert_eq!(s, digest);
        }
    }
    let istio = documents("istio.yaml", &real);
    let eg = documents("envoy-gateway.yaml", &real);
    let higress = documents("higress.yaml", &real);
    let url = |v: &Value| v.as_str().unwrap().to_string();
    assert_eq!(
        [
            url(&one(&istio, &ISTIO_WASM_PLUGIN)["spec"]["url"]),
            url(&one(&eg, &EG_EXTENSION_POLICY)["spec"]["wasm"][0]["code"]["image"]["url"]),
            url(&one(&higress, &HIGRESS_WASM_PLUGIN)["spec"]["url"]),
        ],
        [
            format!("oci://registry.example.com/ratelimit/ratelimit:{VERSION}"),
            format!("oci://registry.example.com/ratelimit/ratelimit:{VERSION}"),
            format!("oci://registry.example.com/ratelimit/ratelimit-redis:{VERSION}"),
        ]
    );
}

#[test]
fn every_plugin_configuration_is_one_the_filter_accepts() {
    let d = digest_hex();
    let istio = documents("istio.yaml", &d);
    let c = filter_config(&one(&istio, &ISTIO_WASM_PLUGIN)["spec"]["pluginConfig"]).unwrap();
    assert_eq!(c.store.cluster, "outbound|7379||webdis.ratelimit.svc.cluster.local");
    assert_eq!(c.rules.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["login", "api"]);

    let eg = documents("envoy-gateway.yaml", &d);
    let c = filter_config(&one(&eg, &EG_EXTENSION_POLICY)["spec"]["wasm"][0]["config"]).unwrap();
    assert_eq!(c.store.cluster, "ratelimit_store");
    assert_eq!(c.rules.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["login", "api"]);

    // Higress runs the Redis-call build: the default (webdis) build of the
    // configuration code says so, and accepts everything else of it.
    let higress = documents("higress.yaml", &d);
    let spec = &one(&higress, &HIGRESS_WASM_PLUGIN)["spec"];
    assert!(spec.get("matchRules").is_none(), "matchRules would add _rules_, which the filter refuses");
    let mut config = spec["defaultConfig"].clone();
    assert_eq!(config["store"]["transport"].as_str(), Some("redis"));
    match filter_config(&config) {
        // The configuration code built with the "redis" feature (if some
        // other crate of the workspace turns it on) takes it as it is.
        Ok(c) => assert_eq!(c.store.transport, Transport::Redis),
        Err(e) => assert_eq!(
            e,
            r#"store.transport: "redis" needs the Redis-call build (ratelimit-redis.wasm); this module speaks webdis"#
        ),
    }
    config["store"]["transport"] = "webdis".into();
    let c = filter_config(&config).unwrap();
    assert_eq!(c.store.cluster, "outbound|6379||redis.ratelimit.svc.cluster.local");
    assert_eq!(c.rules.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["login", "api"]);
}

/// The (name, port) of each Service, namespace "ratelimit".
fn services(store: &[Value]) -> Vec<(String, u64)> {
    store
        .iter()
        .filter(|d| d["kind"].as_str() == Some("Service"))
        .map(|d| (d["metadata"]["name"].as_str().unwrap().to_string(), d["spec"]["ports"][0]["port"].as_u64().unwrap()))
        .collect()
}

#[test]
fn the_store_clusters_name_the_store_services() {
    let d = digest_hex();
    let store = documents("kubernetes-store.yaml", &d);
    assert_eq!(services(&store), [("redis".to_string(), 6379), ("webdis".to_string(), 7379)]);
    for d in store.iter().filter(|d| d["kind"].as_str() == Some("Service")) {
        let name = d["metadata"]["name"].as_str().unwrap();
        let deployment = store
            .iter()
            .find(|x| x["kind"].as_str() == Some("Deployment") && x["metadata"]["name"].as_str() == Some(name))
            .unwrap();
        assert_eq!(d["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"], "{name}");
        assert_eq!(d["spec"]["selector"], deployment["spec"]["selector"]["matchLabels"], "{name}");
    }
    // webdis's ConfigMap is envoy-config/webdis.json.
    let config_map = store.iter().find(|d| d["kind"].as_str() == Some("ConfigMap")).unwrap();
    let in_map: serde_json::Value = serde_json::from_str(config_map["data"]["webdis.json"].as_str().unwrap()).unwrap();
    let file: serde_json::Value = serde_json::from_str(&config_text("webdis.json")).unwrap();
    assert_eq!(in_map, file);

    // Istio and Higress: outbound|<Service port>||<Service>.<namespace>.svc.cluster.local.
    let istio = documents("istio.yaml", &d);
    let higress = documents("higress.yaml", &d);
    assert_eq!(
        one(&istio, &ISTIO_WASM_PLUGIN)["spec"]["pluginConfig"]["store"]["cluster"].as_str(),
        Some("outbound|7379||webdis.ratelimit.svc.cluster.local")
    );
    assert_eq!(
        one(&higress, &HIGRESS_WASM_PLUGIN)["spec"]["defaultConfig"]["store"]["cluster"].as_str(),
        Some("outbound|6379||redis.ratelimit.svc.cluster.local")
    );
    // Envoy Gateway: the cluster the patch adds is the one the module calls,
    // and it points at the webdis Service.
    let eg = documents("envoy-gateway.yaml", &d);
    let patch = &one(&eg, &EG_PATCH_POLICY)["spec"]["jsonPatches"][0];
    let cluster = &patch["operation"]["value"];
    let called = &one(&eg, &EG_EXTENSION_POLICY)["spec"]["wasm"][0]["config"]["store"]["cluster"];
    assert_eq!([&patch["name"], &cluster["name"], &cluster["load_assignment"]["cluster_name"]], [called; 3]);
    let address =
        &cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"];
    assert_eq!(address["address"].as_str(), Some("webdis.ratelimit.svc.cluster.local"));
    assert_eq!(address["port_value"].as_u64(), Some(7379));
    // Both Envoy Gateway policies attach to the same Gateway.
    let target = &one(&eg, &EG_PATCH_POLICY)["spec"]["targetRef"];
    assert_eq!(&one(&eg, &EG_EXTENSION_POLICY)["spec"]["targetRefs"][0], target);
}
