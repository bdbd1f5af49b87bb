//! The field names of the custom resources the examples use, written down
//! from the upstream definitions (Istio api `extensions/v1alpha1/wasm.proto`
//! and its generated CRD; Envoy Gateway `api/v1alpha1/wasm_types.go`,
//! `envoyextensionypolicy_types.go`, `policy_helpers.go`,
//! `envoypatchpolicy_types.go`; Higress `api/extensions/v1alpha1/wasmplugin.proto`
//! and its generated CRD), and a check of a resource against them.
//!
//! A path names a leaf: `spec.url`, `spec.targetRefs[].kind` (`[]`: any
//! item of a list), `spec.pluginConfig.*` (anything below: a free-form
//! field, such as the module's own configuration).

use serde_norway::Value;

/// What a custom resource may hold.
pub struct Crd {
    /// `group/version`.
    pub api_version: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Every path the resource may use under `spec`.
    pub fields: &'static [&'static str],
    /// Paths that must be there.
    pub required: &'static [&'static str],
    /// Enumerations: path, allowed values.
    pub enums: &'static [(&'static str, &'static [&'static str])],
}

const PHASES: &[&str] = &["UNSPECIFIED_PHASE", "AUTHN", "AUTHZ", "STATS"];
const PULL_POLICIES: &[&str] = &["UNSPECIFIED_POLICY", "IfNotPresent", "Always"];

/// Istio `WasmPlugin`.
pub const ISTIO_WASM_PLUGIN: Crd = Crd {
    api_version: "extensions.istio.io/v1alpha1",
    kind: "WasmPlugin",
    fields: &[
        "spec.selector.matchLabels.*",
        "spec.targetRef.group",
        "spec.targetRef.kind",
        "spec.targetRef.name",
        "spec.targetRef.namespace",
        "spec.targetRefs[].group",
        "spec.targetRefs[].kind",
        "spec.targetRefs[].name",
        "spec.targetRefs[].namespace",
        "spec.url",
        "spec.sha256",
        "spec.imagePullPolicy",
        "spec.imagePullSecret",
        "spec.verificationKey",
        "spec.pluginConfig.*",
        "spec.pluginName",
        "spec.phase",
        "spec.priority",
        "spec.failStrategy",
        "spec.vmConfig.env[].name",
        "spec.vmConfig.env[].value",
        "spec.vmConfig.env[].valueFrom",
        "spec.match[].mode",
        "spec.match[].ports[].number",
        "spec.type",
    ],
    required: &["spec.url"],
    enums: &[
        ("spec.phase", PHASES),
        ("spec.imagePullPolicy", PULL_POLICIES),
        ("spec.failStrategy", &["FAIL_CLOSE", "FAIL_OPEN", "FAIL_RELOAD"]),
        ("spec.type", &["UNSPECIFIED_PLUGIN_TYPE", "HTTP", "NETWORK"]),
        ("spec.vmConfig.env[].valueFrom", &["INLINE", "HOST"]),
        ("spec.match[].mode", &["UNDEFINED", "CLIENT", "SERVER", "CLIENT_AND_SERVER"]),
    ],
};

/// Envoy Gateway `EnvoyExtensionPolicy` (its wasm part in full; the other
/// extension kinds, unused here, as free-form subtrees).
pub const EG_EXTENSION_POLICY: Crd = Crd {
    api_version: "gateway.envoyproxy.io/v1alpha1",
    kind: "EnvoyExtensionPolicy",
    fields: &[
        "spec.targetRef.group",
        "spec.targetRef.kind",
        "spec.targetRef.name",
        "spec.targetRef.sectionName",
        "spec.targetRefs[].group",
        "spec.targetRefs[].kind",
        "spec.targetRefs[].name",
        "spec.targetRefs[].sectionName",
        "spec.targetSelectors[].*",
        "spec.mergeType",
        "spec.wasm[].name",
        "spec.wasm[].rootID",
        "spec.wasm[].code.type",
        "spec.wasm[].code.http.url",
        "spec.wasm[].code.http.sha256",
        "spec.wasm[].code.http.tls.caCertificateRef.*",
        "spec.wasm[].code.image.url",
        "spec.wasm[].code.image.sha256",
        "spec.wasm[].code.image.pullSecretRef.*",
        "spec.wasm[].code.image.tls.caCertificateRef.*",
        "spec.wasm[].code.pullPolicy",
        "spec.wasm[].config.*",
        "spec.wasm[].failOpen",
        "spec.wasm[].env.hostKeys[]",
        "spec.extProc[].*",
        "spec.lua[].*",
        "spec.dynamicModule[].*",
    ],
    required: &["spec.wasm[].code.type"],
    enums: &[
        ("spec.wasm[].code.type", &["HTTP", "Image", "ConfigMap"]),
        ("spec.wasm[].code.pullPolicy", &["IfNotPresent", "Always"]),
    ],
};

/// Envoy Gateway `EnvoyPatchPolicy`.
pub const EG_PATCH_POLICY: Crd = Crd {
    api_version: "gateway.envoyproxy.io/v1alpha1",
    kind: "EnvoyPatchPolicy",
    fields: &[
        "spec.type",
        "spec.jsonPatches[].type",
        "spec.jsonPatches[].name",
        "spec.jsonPatches[].operation.op",
        "spec.jsonPatches[].operation.path",
        "spec.jsonPatches[].operation.jsonPath",
        "spec.jsonPatches[].operation.from",
        "spec.jsonPatches[].operation.value.*",
        "spec.targetRef.group",
        "spec.targetRef.kind",
        "spec.targetRef.name",
        "spec.priority",
    ],
    required: &["spec.type", "spec.targetRef.kind", "spec.targetRef.name"],
    enums: &[
        ("spec.type", &["JSONPatch"]),
        (
            "spec.jsonPatches[].type",
            &[
                "type.googleapis.com/envoy.config.listener.v3.Listener",
                "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
                "type.googleapis.com/envoy.config.cluster.v3.Cluster",
                "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
                "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
            ],
        ),
        ("spec.jsonPatches[].operation.op", &["add", "remove", "replace", "move", "copy", "test"]),
    ],
};

/// Higress `WasmPlugin`.
pub const HIGRESS_WASM_PLUGIN: Crd = Crd {
    api_version: "extensions.higress.io/v1alpha1",
    kind: "WasmPlugin",
    fields: &[
        "spec.url",
        "spec.sha256",
        "spec.imagePullPolicy",
        "spec.imagePullSecret",
        "spec.verificationKey",
        "spec.pluginConfig.*",
        "spec.pluginName",
        "spec.phase",
        "spec.priority",
        "spec.failStrategy",
        "spec.vmConfig.env[].name",
        "spec.vmConfig.env[].value",
        "spec.vmConfig.env[].valueFrom",
        "spec.defaultConfig.*",
        "spec.defaultConfigDisable",
        "spec.matchRules[].ingress[]",
        "spec.matchRules[].domain[]",
        "spec.matchRules[].service[]",
        "spec.matchRules[].config.*",
        "spec.matchRules[].configDisable",
        "spec.matchRules[].routeType",
    ],
    required: &["spec.url"],
    enums: &[
        ("spec.phase", PHASES),
        ("spec.imagePullPolicy", PULL_POLICIES),
        ("spec.failStrategy", &["FAIL_CLOSE", "FAIL_OPEN"]),
        ("spec.vmConfig.env[].valueFrom", &["INLINE", "HOST"]),
        ("spec.matchRules[].routeType", &["HTTP", "GRPC"]),
    ],
};

/// Every leaf of `value` as a path with its scalar value (None for an empty map or list).
pub fn leaves(value: &Value, prefix: &str, out: &mut Vec<(String, Option<String>)>) {
    match value {
        Value::Mapping(m) if !m.is_empty() => {
            for (k, v) in m {
                let key = k.as_str().unwrap_or_else(|| panic!("{prefix}: a key that is not a string: {k:?}"));
                leaves(v, &format!("{prefix}.{key}"), out);
            }
        }
        Value::Sequence(s) if !s.is_empty() => s.iter().for_each(|v| leaves(v, &format!("{prefix}[]"), out)),
        Value::String(s) => out.push((prefix.to_string(), Some(s.clone()))),
        Value::Bool(b) => out.push((prefix.to_string(), Some(b.to_string()))),
        Value::Number(n) => out.push((prefix.to_string(), Some(n.to_string()))),
        Value::Tagged(t) => panic!("{prefix}: a YAML tag {:?} no Kubernetes field takes", t.tag),
        _ => out.push((prefix.to_string(), None)),
    }
}

/// Whether the CRD path `field` covers the leaf `path`.
fn covers(field: &str, path: &str) -> bool {
    match field.strip_suffix(".*") {
        Some(base) => {
            path == base || path.strip_prefix(base).is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
        }
        None => field == path,
    }
}

impl Crd {
    /// Whether `doc` is of this CRD's kind.
    pub fn is(&self, doc: &Value) -> bool {
        doc["apiVersion"].as_str() == Some(self.api_version) && doc["kind"].as_str() == Some(self.kind)
    }

    /// Checks `doc` (of this kind): every spec field known, required ones
    /// there, enumerations respected; a list of what is wrong, empty if nothing.
    pub fn problems(&self, doc: &Value) -> Vec<String> {
        let mut all = Vec::new();
        leaves(&doc["spec"], "spec", &mut all);
        let mut problems = Vec::new();
        for (path, value) in &all {
            if !self.fields.iter().any(|f| covers(f, path)) {
                problems.push(format!("{path}: not a field of {} {}", self.api_version, self.kind));
            }
            if let Some((_, allowed)) = self.enums.iter().find(|(p, _)| p == path) {
                if !value.as_deref().is_some_and(|v| allowed.contains(&v)) {
                    problems.push(format!("{path}: {value:?} is not one of {allowed:?}"));
                }
            }
        }
        for r in self.required {
            if !all.iter().any(|(p, _)| p == r) {
                problems.push(format!("{r}: required"));
            }
        }
        problems
    }
}
