//! No import cycle in `filter/src`: between its top-level modules, and
//! between the files of `glue/`, every path that names another module
//! (`use crate::store::…`, `crate::keys::cluster_slot(…)`, `super::abi::…`
//! in `glue/`) runs one way only. A cycle fails the test, named with the
//! file and line of each import on it.
//!
//! Run it: `cargo test -p ratelimit-filter --test import_cycles`.
//!
//! Test code counts like any other (a unit test of a lower module that
//! used a higher one would be a cycle too). Comments and string literals
//! do not; `super::` and `self::` are resolved from the file's module and
//! the inline `mod … { }` blocks around the path.

// A test: a failed step is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Where an edge was seen: file and line.
type Seen = (String, usize);

/// Module graph: node -> (node it imports -> first place it does).
type Graph = BTreeMap<String, BTreeMap<String, Seen>>;

#[test]
fn filter_src_has_no_import_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect(&src, &src, &mut files);
    assert!(files.len() > 50, "read only {} files under {}", files.len(), src.display());
    let (top, glue) = graphs(&files);
    // The graph is read, not empty: a few edges that exist for certain.
    assert!(top["pipeline"].contains_key("config"), "pipeline -> config not found");
    assert!(glue["exports"].contains_key("vm"), "glue exports -> vm not found");
    let mut cycles = cycles(&top);
    cycles.extend(cycles_of(&glue, "glue/"));
    assert!(cycles.is_empty(), "import cycles in filter/src:\n{}", cycles.join("\n"));
}

#[test]
fn a_cycle_is_found_and_named_with_its_imports() {
    let files = [
        ("a.rs", "use crate::b::X;\n// crate::c::Y in a comment\nconst S: &str = \"crate::c::Z\";\n"),
        ("b/mod.rs", "mod inner;\nfn f() {\n    crate::a::g();\n}\n"),
        ("b/inner.rs", "use super::super::c::W;\n"),
        ("c.rs", "use crate::{d::V, b};\n#[cfg(test)]\nmod tests {\n    use super::*;\n    use super::e::U;\n}\n"),
        ("d.rs", "fn f<'a>(x: &'a str) -> char { '{' }\nuse self::q::R;\nmod q { pub struct R; }\n"),
        ("e.rs", ""),
    ];
    let files: Vec<(String, String)> = files.iter().map(|(p, t)| (p.to_string(), t.to_string())).collect();
    let (top, _) = graphs(&files);
    assert_eq!(top["a"].keys().collect::<Vec<_>>(), ["b"], "comments and strings are no imports");
    assert_eq!(top["c"].keys().collect::<Vec<_>>(), ["b", "d"], "super:: in an inline mod is the file's module");
    assert!(top.get("d").is_none_or(|e| e.is_empty()), "self:: and a lifetime are no imports: {top:?}");
    assert_eq!(
        cycles(&top),
        ["a -> b -> a (a.rs:1 names b; b/mod.rs:3 names a)", "c -> b -> c (c.rs:1 names b; b/inner.rs:1 names c)",]
    );

    let glue = [("glue/x.rs", "use super::y::Z;\n"), ("glue/y.rs", "fn f() { crate::glue::x::g() }\n")];
    let glue: Vec<(String, String)> = glue.iter().map(|(p, t)| (p.to_string(), t.to_string())).collect();
    let (top, glue) = graphs(&glue);
    assert!(cycles(&top).is_empty());
    assert_eq!(
        cycles_of(&glue, "glue/"),
        ["glue/x -> glue/y -> glue/x (glue/x.rs:1 names glue/y; glue/y.rs:1 names glue/x)"]
    );
}

/// Every `.rs` file under `dir`, as (path relative to `src`, text).
fn collect(src: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(src, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(src).unwrap().to_string_lossy().replace('\\', "/");
            out.push((rel, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

/// The module path of a file: `lib.rs` is the crate, `a/mod.rs` and
/// `a.rs` are `a`, `a/b.rs` is `a::b`.
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel.trim_end_matches(".rs").split('/').map(str::to_string).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The graph of top-level modules, and the graph of `glue/`'s files.
fn graphs(files: &[(String, String)]) -> (Graph, Graph) {
    let known: BTreeSet<Vec<String>> = files.iter().map(|(rel, _)| module_of(rel)).collect();
    let (mut top, mut glue) = (Graph::new(), Graph::new());
    for (rel, text) in files {
        for (from, to, line) in paths(&module_of(rel), text) {
            // The file the path lands in: the longest module path that is a file.
            let Some(target) = (1..=to.len()).rev().map(|n| &to[..n]).find(|p| known.contains(*p)) else { continue };
            let seen = (rel.clone(), line);
            if let (Some(a), Some(b)) = (from.first(), target.first()) {
                if a != b {
                    top.entry(a.clone()).or_default().entry(b.clone()).or_insert(seen.clone());
                }
            }
            if from.first().is_some_and(|m| m == "glue") && target.first().is_some_and(|m| m == "glue") {
                if let (Some(a), Some(b)) = (from.get(1), target.get(1)) {
                    if a != b {
                        glue.entry(a.clone()).or_default().entry(b.clone()).or_insert(seen);
                    }
                }
            }
        }
    }
    (top, glue)
}

/// One lexical token of code, with its line.
#[derive(Clone, Debug, PartialEq)]
enum Token {
    Word(String),
    Path, // `::`
    Open,
    Close,
    Comma,
    Other,
}

/// The tokens of `text`, comments and literals left out.
fn tokens(text: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let (mut out, mut i, mut line) = (Vec::new(), 0, 1);
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                if i >= chars.len() {
                    break;
                } else if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            }
        } else if c == '"' || ((c == 'r' || c == 'b') && raw_string_at(&chars, i).is_some()) {
            // A string: plain, byte, or raw with its hashes.
            let (start, hashes) = raw_string_at(&chars, i).unwrap_or((i, None));
            i = start + 1;
            while i < chars.len() {
                match (chars[i], hashes) {
                    ('\\', None) => i += 1,
                    ('"', None) => break,
                    ('"', Some(n)) if (1..=n).all(|k| at(i + k) == '#') => {
                        i += n;
                        break;
                    }
                    ('\n', _) => line += 1,
                    _ => {}
                }
                i += 1;
            }
            i += 1;
            out.push((Token::Other, line));
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{7f}'), or a lifetime ('a).
            if at(i + 1) == '\\' {
                // The quote, the backslash and the escaped character.
                i += 3;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
            out.push((Token::Other, line));
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((Token::Word(chars[start..i].iter().collect()), line));
        } else {
            let token = match c {
                ':' if at(i + 1) == ':' => {
                    i += 1;
                    Token::Path
                }
                '{' => Token::Open,
                '}' => Token::Close,
                ',' => Token::Comma,
                _ => Token::Other,
            };
            out.push((token, line));
            i += 1;
        }
    }
    out
}

/// If a string literal starts at `i` (`"`, `b"`, `r"`, `r#"`, `br#"`):
/// where its opening quote is, and its hashes if it is raw.
fn raw_string_at(chars: &[char], i: usize) -> Option<(usize, Option<usize>)> {
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    let raw = chars.get(j) == Some(&'r');
    if raw {
        j += 1;
    }
    let mut hashes = 0;
    while raw && chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    // Part of a longer word (`attr"`), or not a string at all.
    let word_before = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
    (chars.get(j) == Some(&'"') && j > i && !word_before).then_some((j, raw.then_some(hashes)))
}

/// Every module path named in `text` of the file of module `module`: the
/// module the path is written in (with the inline modules around it),
/// the absolute path it names, and its line.
fn paths(module: &[String], text: &str) -> Vec<(Vec<String>, Vec<String>, usize)> {
    let tokens = tokens(text);
    let word = |i: usize| match tokens.get(i) {
        Some((Token::Word(w), _)) => Some(w.as_str()),
        _ => None,
    };
    let is = |i: usize, t: Token| tokens.get(i).is_some_and(|(k, _)| *k == t);
    let mut out = Vec::new();
    // The inline modules open at each brace depth.
    let (mut here, mut opened, mut depth) = (module.to_vec(), Vec::<usize>::new(), 0usize);
    let mut i = 0;
    while i < tokens.len() {
        let (token, line) = &tokens[i];
        match token {
            Token::Open => depth += 1,
            Token::Close => {
                if opened.last() == Some(&depth) {
                    opened.pop();
                    here.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Token::Word(w) if w == "mod" && word(i + 1).is_some() && is(i + 2, Token::Open) => {
                here.push(word(i + 1).unwrap().to_string());
                opened.push(depth + 1);
            }
            Token::Word(w)
                if matches!(w.as_str(), "crate" | "super" | "self") && !(i > 0 && is(i - 1, Token::Path)) =>
            {
                // The path's prefix: crate, self and super resolved.
                let mut base = match w.as_str() {
                    "crate" => Vec::new(),
                    "self" => here.clone(),
                    _ => here[..here.len().saturating_sub(1)].to_vec(),
                };
                let mut j = i + 1;
                while is(j, Token::Path) && word(j + 1) == Some("super") {
                    base.pop();
                    j += 2;
                }
                if is(j, Token::Path) && is(j + 1, Token::Open) {
                    // A group: each element's first segment.
                    let (mut k, mut level, mut first) = (j + 2, 1, true);
                    while k < tokens.len() && level > 0 {
                        match &tokens[k].0 {
                            Token::Open => level += 1,
                            Token::Close => level -= 1,
                            Token::Comma if level == 1 => first = true,
                            Token::Word(name) if first && level == 1 => {
                                let mut to = base.clone();
                                if name != "self" {
                                    to.push(name.clone());
                                }
                                out.push((here.clone(), to, *line));
                                first = false;
                            }
                            _ => {}
                        }
                        k += 1;
                    }
                } else if is(j, Token::Path) {
                    // A plain path: its segments, as far as they go.
                    let mut to = base;
                    while is(j, Token::Path) {
                        match word(j + 1) {
                            Some(name) => to.push(name.to_string()),
                            None => break,
                        }
                        j += 2;
                    }
                    out.push((here.clone(), to, *line));
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The cycles of `graph`, each the shortest through a module that no
/// cycle before it passed through, written `a -> b -> a (a.rs:3 names b;
/// b.rs:7 names a)`.
fn cycles(graph: &Graph) -> Vec<String> {
    cycles_of(graph, "")
}

/// `cycles`, with `prefix` before each node's name.
fn cycles_of(graph: &Graph, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut reported: BTreeSet<String> = BTreeSet::new();
    for start in graph.keys() {
        if reported.contains(start) {
            continue;
        }
        if let Some(cycle) = cycle_from(graph, start) {
            reported.extend(cycle.iter().cloned());
            let names: Vec<String> = cycle.iter().map(|n| format!("{prefix}{n}")).collect();
            let evidence: Vec<String> = cycle
                .windows(2)
                .map(|w| {
                    let (file, line) = &graph[&w[0]][&w[1]];
                    format!("{file}:{line} names {prefix}{}", w[1])
                })
                .collect();
            out.push(format!("{} ({})", names.join(" -> "), evidence.join("; ")));
        }
    }
    out
}

/// A cycle through `start` (first node repeated last), if any: the
/// shortest, by breadth-first search.
fn cycle_from(graph: &Graph, start: &String) -> Option<Vec<String>> {
    let mut parent: BTreeMap<&String, &String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for next in graph.get(node).into_iter().flat_map(BTreeMap::keys) {
            if next == start {
                let mut path = vec![start.clone()];
                let mut at = node;
                while at != start {
                    path.push(at.clone());
                    at = parent[at];
                }
                path.push(start.clone());
                path.reverse();
                return Some(path);
            }
            if next != start && !parent.contains_key(next) {
                parent.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    None
}
