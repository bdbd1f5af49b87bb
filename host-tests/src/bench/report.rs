//! What each part of the benchmark hands back, and the docs/BENCHMARKS.md
//! made of it. Sections `make bench` does not measure (`## Soak`, written by
//! `make soak`, and `## Single sittings`, measurements made by hand) are
//! kept as they are.

use serde_json::Value;

/// One target the report is judged against.
#[derive(Clone, Debug)]
pub struct Target {
    /// What is measured.
    pub what: String,
    /// The target, in words.
    pub target: String,
    /// The measured value, as printed.
    pub measured: String,
    /// Whether it holds.
    pub met: bool,
    /// Why, when missed (or a note).
    pub why: String,
}

impl Target {
    /// A target with its verdict.
    pub fn new(what: &str, target: &str, measured: String, met: bool, why: String) -> Target {
        Target { what: what.to_string(), target: target.to_string(), measured, met, why }
    }
}

/// One section of the report.
#[derive(Clone, Debug)]
pub struct Section {
    /// The `## ` heading.
    pub title: String,
    /// Markdown under it.
    pub body: String,
    /// Its figures' data, for the plotting script.
    pub figures: Value,
    /// Its targets.
    pub targets: Vec<Target>,
}

/// A markdown table.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("| {} |\n|{}\n", headers.join(" | "), "---|".repeat(headers.len()));
    for r in rows {
        out.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    out
}

/// The targets table.
pub fn targets_table(targets: &[Target]) -> String {
    let rows: Vec<Vec<String>> = targets
        .iter()
        .map(|t| {
            let verdict = if t.met { "**met**" } else { "**missed**" };
            vec![t.what.clone(), t.target.clone(), t.measured.clone(), verdict.to_string(), t.why.clone()]
        })
        .collect();
    table(&["what", "target", "measured", "verdict", "why / note"], &rows)
}

/// The headings of the sections a new report keeps from the old one.
pub const KEPT_SECTIONS: [&str; 2] = ["Soak", "Single sittings"];

/// The kept sections of an existing report (each up to the next `## `), in
/// their order, if any.
pub fn kept_sections(existing: &str) -> Option<String> {
    let mut out = String::new();
    let mut inside = false;
    for line in existing.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            inside = KEPT_SECTIONS.iter().any(|k| title.trim_end() == *k || title.starts_with(&format!("{k} ")));
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The whole document: the header, every section, then the kept sections.
pub fn document(header: &str, sections: &[Section], kept: Option<&str>) -> String {
    let mut out = header.to_string();
    for s in sections {
        out.push_str(&format!("\n## {}\n\n{}", s.title, s.body));
    }
    if let Some(kept) = kept {
        out.push('\n');
        out.push_str(kept);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soak_and_single_sittings_sections_are_kept_verbatim() {
        let old = "# B\n\n## Proxy cost\nold\n\n## Soak\n\nkept | 1\n\n## Accuracy\nold\n";
        assert_eq!(kept_sections(old).as_deref(), Some("## Soak\n\nkept | 1\n\n"));
        assert_eq!(kept_sections("# B\n## Soaked\n"), None);
        let both = "# B\n## Soak\ns\n## Store cost\nold\n## Single sittings\n\n### 2026-12-03\nn\n";
        assert_eq!(kept_sections(both).as_deref(), Some("## Soak\ns\n## Single sittings\n\n### 2026-12-03\nn\n"));
    }
}
