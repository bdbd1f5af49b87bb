//! What each part of the benchmark hands back, and the BENCHMARKS.md made of
//! it. A `## Soak` section written by another tool is kept as it is.

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

/// The `## Soak` section of an existing report (up to the next `## `), if any.
pub fn soak_section(existing: &str) -> Option<String> {
    let mut out = String::new();
    let mut inside = false;
    for line in existing.lines() {
        if line.starts_with("## ") {
            inside = line.trim_end() == "## Soak" || line.starts_with("## Soak ");
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The whole document: the header, every section, then the kept soak section.
pub fn document(header: &str, sections: &[Section], soak: Option<&str>) -> String {
    let mut out = header.to_string();
    for s in sections {
        out.push_str(&format!("\n## {}\n\n{}", s.title, s.body));
    }
    if let Some(soak) = soak {
        out.push('\n');
        out.push_str(soak);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soak_section_is_kept_verbatim() {
        let old = "# B\n\n## Proxy cost\nold\n\n## Soak\n\nkept | 1\n\n## Accuracy\nold\n";
        assert_eq!(soak_section(old).as_deref(), Some("## Soak\n\nkept | 1\n\n"));
        assert_eq!(soak_section("# B\n## Soaked\n"), None);
    }
}
