//! Comments, indentation and the spaces Lua does not need, removed line by
//! line. A line break stays between statements.

/// Drops comment lines, trailing comments on lines without string
/// literals, indentation, blank lines and the spaces Lua does not need (see
/// `squeeze`). A line break stays between statements.
pub fn minify(source: &str) -> String {
    let mut out = String::with_capacity(source.len() / 2);
    for line in source.lines() {
        let mut code = line.trim();
        if code.starts_with("--") {
            continue;
        }
        if let Some(at) = code.find(" --") {
            if !code.contains(['\'', '"']) {
                code = code[..at].trim_end();
            }
        }
        if !code.is_empty() {
            squeeze(code, &mut out);
            out.push('\n');
        }
    }
    out
}

/// Appends `code` without the spaces outside string literals that separate
/// nothing: a space stays only between two word characters (`local x`),
/// between two `-` (else a comment would start) and next to a `.` (a
/// number followed by `..` must stay apart).
fn squeeze(code: &str, out: &mut String) {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let keep = |a: char, b: char| (word(a) && word(b)) || (a == '-' && b == '-') || a == '.' || b == '.';
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut pending_space = false;
    let mut last = ' ';
    for c in code.chars() {
        if let Some(q) = quote {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            last = c;
            continue;
        }
        if c == ' ' || c == '\t' {
            pending_space = true;
            continue;
        }
        if pending_space && keep(last, c) {
            out.push(' ');
        }
        pending_space = false;
        if c == '\'' || c == '"' {
            quote = Some(c);
        }
        out.push(c);
        last = c;
    }
}
