//! The filter's stats as Prometheus sees them: with the shipped
//! `stats_config`, every per-rule counter is one family per event with a
//! `rule` label, the global stats keep their names, and every metric the
//! Grafana dashboard queries exists in a real scrape.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use host_tests::envoy::{config_text, template_text, Edit, Envoy};
use host_tests::prometheus::{metric_names, Scrape};
use host_tests::stack::Stack;
use host_tests::windows::{start_clear_of_boundary, DAY};
use serde_norway::Value;

use crate::plugin_config;

/// Names that could trip the tag's regex: `store` (the prefix of the store
/// gauges), `-` and `_` inside a name, a name ending in a digit.
const RULES: &str = r#"
  {"name":"api","match":{"path_prefix":"/api"},"key":["header:x-user"],"limits":[{"limit":2,"window":"1d"}]},
  {"name":"store","match":{"path_prefix":"/store"},"key":["header:x-user"],"limits":[{"limit":5,"window":"1d"}]},
  {"name":"a-b_c","match":{"path_prefix":"/shadow"},"key":["header:x-user"],"shadow":true,
   "limits":[{"limit":1,"window":"1d"}]},
  {"name":"fallback_1","match":{"path_prefix":"/open"},"key":["header:x-user"],"failure_mode":"open","fleet_size":2,
   "limits":[{"limit":2,"window":"1d"}]},
  {"name":"login-2","match":{"path_prefix":"/closed"},"key":["header:x-user"],"failure_mode":"closed",
   "limits":[{"limit":5,"window":"1d"}]}"#;
const RULE_NAMES: [&str; 5] = ["api", "store", "a-b_c", "fallback_1", "login-2"];

/// The per-rule events, as the filter names them.
fn events() -> Vec<&'static str> {
    ratelimit::metrics::Event::ALL.iter().map(|e| e.name()).collect()
}

/// The families the filter's stats become, with their types.
fn expected_families() -> BTreeMap<String, &'static str> {
    let mut f: BTreeMap<String, &str> = events().iter().map(|e| (format!("ratelimit_{e}"), "counter")).collect();
    f.insert("ratelimit_store_calls".into(), "counter");
    f.insert("ratelimit_store_decisions".into(), "counter");
    f.insert("ratelimit_store_latency_ms".into(), "histogram");
    for g in ["evicted_keys", "used_memory_bytes", "maxmemory_bytes", "evicting_policy"] {
        f.insert(format!("ratelimit_store_{g}"), "gauge");
    }
    f
}

/// Checks the names and labels of a scrape; the per-rule families hold
/// exactly one sample per rule, labelled with its name.
fn check_names(scrape: &Scrape) {
    // Exactly these: a rule's name left in a metric name would be one more.
    let families: BTreeMap<String, &str> =
        scrape.families("ratelimit").into_iter().map(|n| (n.clone(), scrape.types[&n].as_str())).collect();
    assert_eq!(families, expected_families(), "the filter's families in /stats/prometheus");
    let rules: BTreeSet<BTreeMap<String, String>> =
        RULE_NAMES.iter().map(|r| BTreeMap::from([("rule".to_string(), r.to_string())])).collect();
    for e in events() {
        let samples = &scrape.samples[&format!("ratelimit_{e}")];
        let labels: BTreeSet<BTreeMap<String, String>> = samples.iter().map(|s| s.labels.clone()).collect();
        assert_eq!((samples.len(), labels), (RULE_NAMES.len(), rules.clone()), "ratelimit_{e}");
    }
    for (name, _) in expected_families().iter().filter(|(_, t)| **t == "gauge") {
        assert_eq!(scrape.samples[name].len(), 1, "{name}");
        assert!(scrape.samples[name][0].labels.is_empty(), "{name} has labels");
    }
    assert!(scrape.samples["ratelimit_store_calls"].iter().all(|s| s.labels.is_empty()));
    assert!(scrape.samples["ratelimit_store_decisions"].iter().all(|s| s.labels.is_empty()));
}

fn scrape(envoy: &Envoy) -> Scrape {
    Scrape::parse(&envoy.admin("/stats/prometheus"))
}

#[test]
fn every_per_rule_event_is_one_family_with_a_rule_label_and_the_dashboard_queries_only_what_exists() {
    // The fallback bucket counts in an aligned day: all of it in one.
    start_clear_of_boundary(DAY, Duration::from_secs(60));
    let stack = Stack::start(&plugin_config(RULES));
    let send = |path: &str, user: &str| stack.send("GET", path, &[("x-user", user)]).status;
    // api: two allowed, a denial by the store, a denial from the deny cache.
    assert_eq!([send("/api", "u"), send("/api", "u"), send("/api", "u"), send("/api", "u")], [200, 200, 429, 429]);
    assert_eq!(send("/store", "u"), 200);
    // Shadow: allowed, a would-be denial by the store, one from the deny cache; never rejected.
    assert_eq!([send("/shadow", "u"), send("/shadow", "u"), send("/shadow", "u")], [200, 200, 200]);
    // webdis gone: the open rule's fallback share (2 / fleet_size 2 = 1), then the closed rule.
    stack.webdis.process.signal("KILL");
    assert_eq!([send("/open", "f"), send("/open", "f"), send("/closed", "f")], [200, 429, 503]);

    // Histograms reach /stats at Envoy's stats flush (every 5 s).
    let deadline = Instant::now() + Duration::from_secs(30);
    let scrape = loop {
        let s = scrape(&stack.envoy);
        if s.value("ratelimit_store_latency_ms_count", &[]).unwrap_or(0.0) > 0.0 {
            break s;
        }
        assert!(Instant::now() < deadline, "no store latency in /stats/prometheus");
        std::thread::sleep(Duration::from_millis(200));
    };
    check_names(&scrape);
    let expected: &[(&str, &str, f64)] = &[
        ("api", "allowed", 2.0),
        ("api", "denied", 2.0),
        ("api", "deny_cache_hits", 1.0),
        ("store", "allowed", 1.0),
        ("a-b_c", "allowed", 1.0),
        ("a-b_c", "shadow_denied", 2.0),
        ("a-b_c", "deny_cache_hits", 1.0),
        ("fallback_1", "store_errors", 2.0),
        ("fallback_1", "fallback_allowed", 1.0),
        ("fallback_1", "fallback_denied", 1.0),
        ("login-2", "store_errors", 1.0),
        ("login-2", "fail_closed", 1.0),
    ];
    for rule in RULE_NAMES {
        for e in events() {
            let want = expected.iter().find(|(r, ev, _)| *r == rule && *ev == e).map_or(0.0, |x| x.2);
            assert_eq!(scrape.value(&format!("ratelimit_{e}"), &[("rule", rule)]), Some(want), "{rule} {e}");
        }
    }
    // Six store decisions and the three failed calls (and the script's load on first use).
    assert!(scrape.value("ratelimit_store_calls", &[]).unwrap() >= 9.0);

    // Every metric of every query of the dashboard, and of its rule variable, is in the scrape.
    let dashboard: serde_json::Value = serde_json::from_str(&config_text("grafana-dashboard.json")).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queries.push(target["expr"].as_str().unwrap().to_string());
        }
    }
    assert!(queries.len() >= 20, "{} queries", queries.len());
    let variable = dashboard["templating"]["list"].as_array().unwrap().iter().find(|v| v["name"] == "rule").unwrap();
    let definition = variable["definition"].as_str().unwrap();
    assert_eq!(definition, "label_values(ratelimit_allowed, rule)");
    queries.push("ratelimit_allowed".into());
    let mut referenced = BTreeSet::new();
    for q in &queries {
        let names = metric_names(q);
        assert!(!names.is_empty(), "no metric in {q}");
        for name in names {
            assert!(scrape.has_metric(&name), "the dashboard queries {name}, which Envoy does not export: {q}");
            referenced.insert(name);
        }
    }
    // The dashboard shows every family of the filter.
    for family in expected_families().keys() {
        let shown = referenced.iter().any(|n| n == family || n.strip_suffix("_bucket") == Some(family));
        assert!(shown, "the dashboard does not show {family}");
    }
}

/// The stats_config of a file of envoy-config/.
fn stats_config(file: &str) -> Value {
    let v: Value = serde_norway::from_str(&config_text(file)).unwrap();
    v["stats_config"].clone()
}

#[test]
fn the_bootstrap_fragment_for_other_platforms_is_the_shipped_one_and_works_merged() {
    let fragment = stats_config("prometheus-stats-tags.yaml");
    assert_eq!(stats_config("envoy.yaml"), fragment);
    assert_eq!(stats_config("envoy-remote.yaml"), fragment);

    // As Istio's agent does with a bootstrap override: the base config has
    // no tag of ours, the fragment is merged with --config-yaml.
    let text = template_text();
    let start = text.find("stats_config:").unwrap();
    let end = text.find("static_resources:").unwrap();
    let shipped = &text[start..end];
    let stack = Stack::start_edited(
        &plugin_config(RULES),
        1,
        &[Edit { from: shipped, to: "" }],
        &["--config-yaml", &config_text("prometheus-stats-tags.yaml")],
    )
    .unwrap_or_else(|e| panic!("{}", e.log));
    check_names(&scrape(&stack.envoy));
}
