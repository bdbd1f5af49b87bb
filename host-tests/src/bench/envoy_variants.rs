//! The Envoy configurations compared in the proxy-cost figure, all rendered
//! from the one template `envoy-config/envoy.yaml`; the three without this
//! filter have its block removed or replaced in the rendered text.

use crate::envoy::{render, EnvoyTemplate};

/// How the allowed variants batch their store calls (`store.batch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batching {
    /// The default: 2 calls in flight, up to 32 decisions a call.
    On,
    /// 8 calls in flight, up to 32 decisions: smaller batches, for the split.
    Small,
    /// One decision per call, calls never wait: `{"max_in_flight":1024,"max_decisions":1}`.
    Off,
}

impl Batching {
    /// The `store.batch` field, if not the default.
    fn field(self) -> &'static str {
        match self {
            Batching::On => "",
            Batching::Small => r#","batch":{"max_in_flight":8,"max_decisions":32}"#,
            Batching::Off => r#","batch":{"max_in_flight":1024,"max_decisions":1}"#,
        }
    }

    /// The name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Batching::On => "batching on",
            Batching::Small => "8 in flight × 32",
            Batching::Off => "batching off",
        }
    }
}

/// One configuration of the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The template without the wasm filter: the baseline.
    NoFilter,
    /// Envoy's native local_ratelimit in its place, never denying.
    LocalRateLimit,
    /// Envoy's native ext_authz in its place, calling an HTTP authorization
    /// server (another Envoy answering 200): the native price of a callout.
    ExtAuthz,
    /// This filter with a rule no request matches.
    NoRuleMatched,
    /// This filter admitting every request: a rule keyed by `x-api-key`.
    Allowed(Batching),
    /// The same rule with leases (`max_units` 1000, `max_age` 1 s),
    /// batching on: hot clients decided in the proxy.
    Leased,
    /// `Allowed(On)` with operators' overrides on (none set, their index
    /// empty: polled, nothing read): the cost of overrides for a client
    /// without one. (The label says "read": before the index, every
    /// decision read its client's overrides.)
    Overrides,
    /// This filter denying every request from its deny cache.
    DenyCacheHit,
    /// This filter with the store unreachable, admitting through the local
    /// fallback bucket (failing open, breaker open).
    Fallback,
}

impl Variant {
    /// Every variant, one Envoy each, baseline first.
    pub const ALL: [Variant; 11] = [
        Variant::NoFilter,
        Variant::LocalRateLimit,
        Variant::ExtAuthz,
        Variant::NoRuleMatched,
        Variant::Allowed(Batching::On),
        Variant::Allowed(Batching::Small),
        Variant::Allowed(Batching::Off),
        Variant::Leased,
        Variant::Overrides,
        Variant::DenyCacheHit,
        Variant::Fallback,
    ];

    /// The name in tables.
    pub fn name(self) -> String {
        match self {
            Variant::NoFilter => "no filter (baseline)".into(),
            Variant::LocalRateLimit => "native local_ratelimit".into(),
            Variant::ExtAuthz => "native ext_authz (HTTP callout)".into(),
            Variant::NoRuleMatched => "filter, no rule matched".into(),
            Variant::Allowed(b) => format!("filter, allowed, {}", b.name()),
            Variant::Leased => "filter, allowed, leases on".into(),
            Variant::Overrides => "filter, allowed, overrides read (none set)".into(),
            Variant::DenyCacheHit => "filter, denied (deny-cache hit)".into(),
            Variant::Fallback => "filter, store down (fallback)".into(),
        }
    }

    /// The plugin configuration of the filter variants (its store is the
    /// cluster `ratelimit_store`).
    pub fn plugin_config(self) -> Option<String> {
        // A generous store timeout: on this shared 2-core machine a 25 ms
        // timeout would turn some allow-path calls into fallback decisions.
        let store = |batch: &str| {
            format!(
                r#""store":{{"transport":"webdis","cluster":"ratelimit_store","authority":"webdis","timeout_ms":1000{batch}}}"#
            )
        };
        let (matcher, key, limit, batch) = match self {
            Variant::NoFilter | Variant::LocalRateLimit | Variant::ExtAuthz => return None,
            Variant::NoRuleMatched => (r#""match":{"path_prefix":"/never-matched/"},"#, "client_ip", 100, ""),
            Variant::DenyCacheHit => ("", "client_ip", 1, ""),
            Variant::Fallback => ("", "client_ip", 100_000_000, ""),
            Variant::Allowed(b) => ("", "header:x-api-key", 100_000_000, b.field()),
            Variant::Leased | Variant::Overrides => ("", "header:x-api-key", 100_000_000, ""),
        };
        let lease = if self == Variant::Leased { r#""lease":{"max_units":1000,"max_age":"1s"},"# } else { "" };
        let overrides = if self == Variant::Overrides { r#""overrides":{},"# } else { "" };
        Some(format!(
            r#"{{"domain":"bench",{},{overrides}"rules":[{{"name":"api",{matcher}"key":["{key}"],"failure_mode":"open",{lease}
                "limits":[{{"algorithm":"sliding_window","limit":{limit},"window":"1h"}}]}}]}}"#,
            store(batch)
        ))
    }

    /// The Envoy configuration text on these ports; `authz` is the port of
    /// the authorization server (used by `ExtAuthz` only).
    pub fn config(self, t: &EnvoyTemplate, authz: u16) -> String {
        let rendered = render(&EnvoyTemplate { plugin_config: self.plugin_config(), module: t.module.clone(), ..*t });
        let rendered = access_log(&rendered, std::env::var_os("BENCH_ACCESS_LOG").is_some());
        match self {
            Variant::NoFilter => replace_wasm_block(&rendered, ""),
            Variant::LocalRateLimit => replace_wasm_block(&rendered, LOCAL_RATELIMIT),
            Variant::ExtAuthz => replace_wasm_block(&rendered, EXT_AUTHZ) + &authz_cluster(authz),
            _ => rendered,
        }
    }
}

/// Envoy's native token bucket, large enough never to deny.
const LOCAL_RATELIMIT: &str = r#"- name: envoy.filters.http.local_ratelimit
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
    stat_prefix: local_rate_limiter
    token_bucket: { max_tokens: 1000000000, tokens_per_fill: 1000000000, fill_interval: 1s }
    filter_enabled:
      runtime_key: local_rate_limit_enabled
      default_value: { numerator: 100, denominator: HUNDRED }
    filter_enforced:
      runtime_key: local_rate_limit_enforced
      default_value: { numerator: 100, denominator: HUNDRED }
"#;

/// Envoy's native HTTP ext_authz: one call per request, refusing when the
/// authorization server fails.
const EXT_AUTHZ: &str = r#"- name: envoy.filters.http.ext_authz
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
    http_service:
      server_uri: { uri: "http://authz", cluster: authz, timeout: 1s }
    failure_mode_allow: false
"#;

/// The `authz` cluster, appended to the template's cluster list (its last
/// block), shaped like the store's: HTTP/1.1 with the same limits.
fn authz_cluster(port: u16) -> String {
    format!(
        r#"  - name: authz
    type: STATIC
    connect_timeout: 0.25s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http_protocol_options: {{}}
    circuit_breakers:
      thresholds:
      - max_connections: 1024
        max_pending_requests: 1024
        max_requests: 4096
    load_assignment:
      cluster_name: authz
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {{ address: 127.0.0.1, port_value: {port} }}
"#
    )
}

/// The authorization server: an Envoy whose only route answers 200 itself,
/// so the measured Envoy pays only the calling side of ext_authz.
pub fn authz_server_config(listener: u16, admin: u16) -> String {
    format!(
        r#"admin:
  address:
    socket_address: {{ address: 127.0.0.1, port_value: {admin} }}
static_resources:
  listeners:
  - name: authz
    address:
      socket_address: {{ address: 127.0.0.1, port_value: {listener} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: authz
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                direct_response: {{ status: 200 }}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#
    )
}

/// The template's access log: left out (the figures measure the filter,
/// not Envoy's logger; and a run would write gigabytes), or with `keep`
/// (BENCH_ACCESS_LOG, to weigh the filter's fields for it) written to
/// /dev/null: formatted in full, nothing stored.
pub fn access_log(text: &str, keep: bool) -> String {
    const STDOUT: &str = "          - name: envoy.access_loggers.stdout
            typed_config:
              \"@type\": type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog
";
    const NULL: &str = "          - name: envoy.access_loggers.file
            typed_config:
              \"@type\": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
              path: /dev/null
";
    assert_eq!(text.matches(STDOUT).count(), 1, "the template's access log is not where the bench looks");
    if keep {
        return text.replacen(STDOUT, NULL, 1);
    }
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.iter().position(|l| l.trim() == "access_log:").unwrap_or(lines.len());
    let indent = lines.get(start).map_or(0, |l| l.len() - l.trim_start().len());
    // Its list's items may sit at its own indentation (`- name: ...`).
    let end = (start + 1..lines.len())
        .find(|&i| {
            let (line, at) = (lines[i].trim_start(), lines[i].len() - lines[i].trim_start().len());
            !line.is_empty() && (at < indent || (at == indent && !line.starts_with('-')))
        })
        .unwrap_or(lines.len());
    let mut out: Vec<&str> = lines[..start].to_vec();
    out.extend(&lines[end..]);
    out.join("\n") + "\n"
}

/// Replaces the `- name: envoy.filters.http.wasm` list item (up to the next
/// line at its indentation or less) with `block`, indented to match.
pub fn replace_wasm_block(text: &str, block: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.trim() == "- name: envoy.filters.http.wasm")
        .expect("the template has no wasm filter block");
    let indent = lines[start].len() - lines[start].trim_start().len();
    let end = (start + 1..lines.len())
        .find(|&i| !lines[i].trim().is_empty() && lines[i].len() - lines[i].trim_start().len() <= indent)
        .unwrap_or(lines.len());
    let pad = " ".repeat(indent);
    let mut out: Vec<String> = lines[..start].iter().map(|l| l.to_string()).collect();
    out.extend(block.lines().map(|l| format!("{pad}{l}")));
    out.extend(lines[end..].iter().map(|l| l.to_string()));
    out.join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> EnvoyTemplate {
        EnvoyTemplate { listener: 1, admin: 2, backend: 3, webdis: 4, module: "m.wasm".into(), plugin_config: None }
    }

    #[test]
    fn the_authz_cluster_closes_the_cluster_list() {
        let t = template();
        let text = Variant::ExtAuthz.config(&t, 5);
        assert!(!text.contains("envoy.filters.http.wasm"));
        let clusters = text.find("  clusters:").unwrap();
        assert!(text.rfind("  - name: authz").unwrap() > clusters);
        assert!(text.contains("port_value: 5 }"));
    }

    #[test]
    fn the_allowed_variants_differ_only_in_their_batching() {
        let on = Variant::Allowed(Batching::On).plugin_config().unwrap();
        let off = Variant::Allowed(Batching::Off).plugin_config().unwrap();
        assert!(!on.contains("batch") && on.contains(r#""key":["header:x-api-key"]"#));
        assert_eq!(off.replace(r#","batch":{"max_in_flight":1024,"max_decisions":1}"#, ""), on);
    }

    #[test]
    fn the_access_log_is_left_out_or_written_to_nowhere_and_overrides_are_one_field() {
        let t = template();
        let text = Variant::Allowed(Batching::On).config(&t, 5);
        assert!(!text.contains("access_log") && !text.contains("FILTER_STATE") && text.contains("route_config:"));
        let kept = access_log(&render(&t), true);
        assert!(kept.contains("path: /dev/null") && kept.contains("%FILTER_STATE(wasm.ratelimit_rule:PLAIN)%"));
        let on = Variant::Allowed(Batching::On).plugin_config().unwrap();
        let read = Variant::Overrides.plugin_config().unwrap();
        assert_eq!(read.replace(r#""overrides":{},"#, ""), on);
    }

    #[test]
    fn the_wasm_item_is_cut_up_to_its_next_sibling() {
        let text =
            "a:\n  - name: envoy.filters.http.wasm\n    typed_config: x\n\n    more: y\n  # next\n  - name: router\n";
        assert_eq!(replace_wasm_block(text, ""), "a:\n  # next\n  - name: router\n");
        assert_eq!(
            replace_wasm_block(text, "- name: b\n  c: d\n"),
            "a:\n  - name: b\n    c: d\n  # next\n  - name: router\n"
        );
    }
}
