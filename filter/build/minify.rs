//! Comments, indentation and the spaces Lua does not need, removed line by
//! line. A line break stays between statements.

/// Drops comment lines, trailing comments, indentation, blank lines and
/// the spaces Lua does not need (see `squeeze`). A line break stays between
/// statements. A line with both a quote and ` --` is refused: without
/// parsing its strings, a quote in a comment and a `--` in a string look
/// alike (an apostrophe in a trailing comment once made a broken script).
pub fn minify(source: &str) -> Result<String, String> {
    let mut out = String::with_capacity(source.len() / 2);
    for (n, line) in source.lines().enumerate() {
        let mut code = line.trim();
        if code.starts_with("--") {
            continue;
        }
        if let Some(at) = code.find(" --") {
            if code.contains(['\'', '"']) {
                return Err(format!("line {}: a trailing comment on a line with a quote: {code}", n + 1));
            }
            code = code[..at].trim_end();
        }
        if !code.is_empty() {
            squeeze(code, &mut out);
            out.push('\n');
        }
    }
    Ok(out)
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
