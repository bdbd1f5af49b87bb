//! Reading Envoy's `/stats/prometheus` text, and the metric names a PromQL
//! expression refers to (loosely: enough to check a dashboard against a
//! scrape, not a PromQL parser).

use std::collections::{BTreeMap, BTreeSet};

/// One sample: its labels (name → value) and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Labels, sorted by name.
    pub labels: BTreeMap<String, String>,
    /// The value as printed.
    pub value: String,
}

/// A scrape: families by name, with their `# TYPE` and samples. Histogram
/// samples (`_bucket`, `_sum`, `_count`) are kept under their own names.
#[derive(Debug, Default)]
pub struct Scrape {
    /// `# TYPE` of each family.
    pub types: BTreeMap<String, String>,
    /// Samples by metric name as printed.
    pub samples: BTreeMap<String, Vec<Sample>>,
}

impl Scrape {
    /// Parses the text format.
    pub fn parse(text: &str) -> Scrape {
        let mut scrape = Scrape::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split_whitespace();
                if let (Some(name), Some(kind)) = (parts.next(), parts.next()) {
                    scrape.types.insert(name.to_string(), kind.to_string());
                }
                continue;
            }
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {line}"));
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}').unwrap_or(rest))),
                None => (series, BTreeMap::new()),
            };
            scrape.samples.entry(name.to_string()).or_default().push(Sample { labels, value: value.to_string() });
        }
        scrape
    }

    /// Family names starting with `prefix`.
    pub fn families(&self, prefix: &str) -> BTreeSet<String> {
        self.types.keys().filter(|n| n.starts_with(prefix)).cloned().collect()
    }

    /// Whether the metric `name` as a query names it exists: a family, or a
    /// histogram's `_bucket`, `_sum` or `_count` series.
    pub fn has_metric(&self, name: &str) -> bool {
        if self.types.contains_key(name) {
            return true;
        }
        ["_bucket", "_sum", "_count"].iter().any(|suffix| {
            name.strip_suffix(suffix).is_some_and(|base| self.types.get(base).is_some_and(|t| t == "histogram"))
        })
    }

    /// The value of `name{labels}` (labels exactly these), if present.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.samples.get(name)?.iter().find(|s| s.labels == want).and_then(|s| s.value.parse().ok())
    }
}

/// `a="x",b="y"` (values without escapes, as Envoy prints these).
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    for pair in text.split("\",").filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once("=\"").unwrap_or_else(|| panic!("not a label: {pair}"));
        labels.insert(k.to_string(), v.trim_end_matches('"').to_string());
    }
    labels
}

/// PromQL words that are not metric names: operators, modifiers, and the
/// aggregations (which may be followed by `by (...)` before their `(`).
const KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// The metric names `expr` refers to: identifiers that are not functions
/// (followed by `(`), keywords, label names (inside `{}` or after
/// `by`/`without`/`on`/`ignoring`), strings, `$variables` or durations.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let (mut i, mut braces, mut brackets) = (0, 0, 0);
    let mut grouping_next = false;
    let mut in_grouping = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' => {
                i += 1;
                while i < chars.len() && chars[i] != c {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
            }
            '{' => braces += 1,
            '}' => braces -= 1,
            '[' => brackets += 1,
            ']' => brackets -= 1,
            '(' if grouping_next => {
                in_grouping = true;
                grouping_next = false;
            }
            ')' if in_grouping => in_grouping = false,
            '$' => {
                while i + 1 < chars.len() && (chars[i + 1].is_alphanumeric() || chars[i + 1] == '_') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i + 1 < chars.len() && (chars[i + 1].is_ascii_alphanumeric() || matches!(chars[i + 1], '_' | ':'))
                {
                    i += 1;
                }
                let word: String = chars[start..=i].iter().collect();
                let next = chars[i + 1..].iter().find(|c| !c.is_whitespace());
                let preceded_by_digit = start > 0 && chars[start - 1].is_ascii_digit();
                if matches!(word.as_str(), "by" | "without" | "on" | "ignoring") {
                    grouping_next = true;
                } else if braces == 0
                    && brackets == 0
                    && !in_grouping
                    && !preceded_by_digit
                    && next != Some(&'(')
                    && !KEYWORDS.contains(&word.as_str())
                {
                    names.insert(word);
                }
            }
            _ => {}
        }
        i += 1;
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_skip_functions_labels_keywords_strings_variables_and_durations() {
        let expr = r#"histogram_quantile(0.9, sum by (le) (rate(a_bucket{rule=~"$rule", x="b_c"}[$__rate_interval])))
            / on (rule) group_left sum without (instance) (rate(b[5m] offset 1h)) + clamp_min(c:rec, 0) > bool 1e3"#;
        assert_eq!(metric_names(expr), ["a_bucket", "b", "c:rec"].map(String::from).into_iter().collect());
    }

    #[test]
    fn a_scrape_keeps_types_labels_and_values() {
        let s = Scrape::parse(
            "# TYPE r_allowed counter\nr_allowed{rule=\"a-b_c\"} 2\nr_allowed{rule=\"api\"} 0\n\
             # TYPE r_lat histogram\nr_lat_bucket{le=\"0.5\"} 1\nr_lat_sum{} 3\n# TYPE g gauge\ng{} 7\n",
        );
        assert_eq!(s.value("r_allowed", &[("rule", "a-b_c")]), Some(2.0));
        assert_eq!(s.value("g", &[]), Some(7.0));
        assert!(s.has_metric("r_lat_bucket") && s.has_metric("r_lat_count") && !s.has_metric("g_count"));
        assert_eq!(s.families("r_"), ["r_allowed", "r_lat"].map(String::from).into_iter().collect());
    }
}
