//! The documentation stays usable: every relative link of README.md,
//! CHANGELOG.md and docs/*.md names a file that exists (and, with `#`, a
//! heading in it), and every plugin configuration or rule shown in a
//! ```json block is one the filter accepts.
//!
//! Run it: `cargo test -p ratelimit-filter --test docs`.

// A test: a failed step is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// README.md, CHANGELOG.md and every page of docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md"), root().join("CHANGELOG.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The lines of `text` outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The anchor GitHub gives a heading: lower case, spaces as `-`, every
/// character but letters, digits, `_` and `-` dropped.
fn anchor(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    prose(text).iter().filter_map(|l| l.strip_prefix('#')).map(|h| anchor(h.trim_start_matches('#').trim())).collect()
}

/// The targets of `[text](target)` links in `line`, outside code spans.
fn links(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'`' => in_code = !in_code,
            b']' if !in_code && bytes.get(i + 1) == Some(&b'(') => {
                if let Some(end) = line[i + 2..].find(')') {
                    out.push(line[i + 2..i + 2 + end].to_string());
                    i += 2 + end;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

#[test]
fn every_relative_link_names_a_file_and_heading_that_exist() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (n, line) in prose(&text).iter().enumerate() {
            for target in links(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (file, fragment) = target.split_once('#').unwrap_or((&target, ""));
                let path = if file.is_empty() { page.clone() } else { page.parent().unwrap().join(file) };
                let name = page.strip_prefix(root()).unwrap().display().to_string();
                if !path.exists() {
                    broken.push(format!("{name} (prose line {}): {target}: no such file", n + 1));
                    continue;
                }
                if !fragment.is_empty() && path.extension().is_some_and(|e| e == "md") {
                    let there = std::fs::read_to_string(&path).unwrap();
                    if !anchors(&there).iter().any(|a| a == fragment) {
                        broken.push(format!("{name} (prose line {}): {target}: no such heading", n + 1));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The ```json blocks of `text`.
fn json_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_start()) {
            (None, l) if l.starts_with("```json") => current = Some(String::new()),
            (Some(_), l) if l.starts_with("```") => blocks.extend(current.take()),
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

#[test]
fn every_configuration_and_rule_shown_is_accepted() {
    let mut seen = 0;
    for page in pages() {
        let name = page.strip_prefix(root()).unwrap().display().to_string();
        for block in json_blocks(&std::fs::read_to_string(&page).unwrap()) {
            let block = block.trim();
            if !block.starts_with('{') {
                continue; // a fragment of another file (webdis.json's ACL)
            }
            let config = if block.contains("\"rules\"") {
                block.to_string()
            } else if block.contains("\"name\"") && block.contains("\"limits\"") {
                format!(r#"{{"store": {{"cluster": "ratelimit_store"}}, "rules": [{block}]}}"#)
            } else {
                continue;
            };
            seen += 1;
            if let Err(e) = ratelimit::config::load(config.as_bytes()) {
                panic!("{name}: an example the filter refuses ({e}):\n{block}");
            }
        }
    }
    assert!(seen >= 6, "only {seen} examples found");
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    assert_eq!(anchor("Sizing `deny_cache.slots`"), "sizing-deny_cacheslots");
    assert_eq!(anchor("Redis ≥ 6.2 and Valkey"), "redis--62-and-valkey");
    assert_eq!(anchor("`rules[].cost` as an object"), "rulescost-as-an-object");
    assert_eq!(anchor("Envoy's admin port"), "envoys-admin-port");
}
