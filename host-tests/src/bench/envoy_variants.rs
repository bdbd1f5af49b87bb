//! The Envoy configurations compared in the proxy-cost figure, all rendered
//! from the one template `envoy-config/envoy.yaml`; the two without this
//! filter have its block removed or replaced in the rendered text.

use crate::envoy::{render, EnvoyTemplate};

/// One configuration of the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// The template without the wasm filter: the baseline.
    NoFilter,
    /// Envoy's native local_ratelimit in its place, never denying.
    LocalRateLimit,
    /// This filter with a rule no request matches.
    NoRuleMatched,
    /// This filter admitting every request: one store call per request.
    Allowed,
    /// This filter denying every request from its deny cache.
    DenyCacheHit,
    /// This filter with the store unreachable, admitting through the local
    /// fallback bucket (failing open, breaker open).
    Fallback,
}

impl Variant {
    /// Every variant, baseline first.
    pub const ALL: [Variant; 6] = [
        Variant::NoFilter,
        Variant::LocalRateLimit,
        Variant::NoRuleMatched,
        Variant::Allowed,
        Variant::DenyCacheHit,
        Variant::Fallback,
    ];

    /// The name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Variant::NoFilter => "no filter (baseline)",
            Variant::LocalRateLimit => "native local_ratelimit",
            Variant::NoRuleMatched => "filter, no rule matched",
            Variant::Allowed => "filter, allowed (store call)",
            Variant::DenyCacheHit => "filter, denied (deny-cache hit)",
            Variant::Fallback => "filter, store down (fallback)",
        }
    }

    /// The plugin configuration of the filter variants.
    fn plugin_config(self) -> Option<String> {
        let (matcher, limit) = match self {
            Variant::NoFilter | Variant::LocalRateLimit => return None,
            Variant::NoRuleMatched => (r#""match":{"path_prefix":"/never-matched/"},"#, 100),
            Variant::DenyCacheHit => ("", 1),
            Variant::Allowed | Variant::Fallback => ("", 100_000_000),
        };
        // A generous store timeout: on this shared 2-core machine a 25 ms
        // timeout would turn some allow-path calls into fallback decisions.
        Some(format!(
            r#"{{"domain":"bench","store":{{"transport":"webdis","cluster":"ratelimit_store","authority":"webdis",
                "timeout_ms":1000}},"rules":[{{"name":"api",{matcher}"key":["client_ip"],"failure_mode":"open",
                "limits":[{{"algorithm":"sliding_window","limit":{limit},"window":"1h"}}]}}]}}"#
        ))
    }

    /// The Envoy configuration text on these ports.
    pub fn config(self, t: &EnvoyTemplate) -> String {
        let rendered = render(&EnvoyTemplate { plugin_config: self.plugin_config(), module: t.module.clone(), ..*t });
        match self {
            Variant::NoFilter => replace_wasm_block(&rendered, ""),
            Variant::LocalRateLimit => replace_wasm_block(&rendered, LOCAL_RATELIMIT),
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
