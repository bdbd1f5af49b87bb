//! Shortens the script's local names (declared by `local`, `for` or as a
//! function's parameters) to one or two characters, the most frequent
//! first. Globals (`KEYS`, `redis`, ...), fields (`redis.call`, `t.err`)
//! and string literals are left alone, and no short name is one the script
//! already uses for something else. The script has no table constructor
//! with fields (`{x = 1}` would be renamed wrongly): that is refused; one
//! of `false`s only (a presized table) is not.

use std::collections::{HashMap, HashSet};

const KEYWORDS: &[&str] = &[
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if", "in", "local", "nil",
    "not", "or", "repeat", "return", "then", "true", "until", "while",
];

/// One token: a name, or anything else (a string literal, a number, one
/// character of punctuation or space).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    Name(&'a str),
    Other(&'a str),
}

fn tokens(code: &str) -> Result<Vec<Token<'_>>, String> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        let b = bytes[i];
        if b == b'\'' || b == b'"' {
            i += 1;
            while i < bytes.len() && bytes[i] != b {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(Token::Other(code.get(start..i.min(bytes.len())).ok_or("unterminated string")?));
        } else if b.is_ascii_alphabetic() || b == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push(Token::Name(&code[start..i]));
        } else if b.is_ascii_digit() {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push(Token::Other(&code[start..i]));
        } else if b.is_ascii() {
            i += 1;
            out.push(Token::Other(&code[start..i]));
        } else {
            return Err(format!("non-ASCII byte in the script at {start}"));
        }
    }
    Ok(out)
}

/// The names the script declares.
fn declared(all: &[Token<'_>]) -> Result<HashSet<String>, String> {
    let sig: Vec<Token<'_>> = all.iter().copied().filter(|t| !matches!(t, Token::Other(" " | "\n"))).collect();
    let name = |i: usize| match sig.get(i) {
        Some(Token::Name(n)) if !KEYWORDS.contains(n) => Some(n.to_string()),
        _ => None,
    };
    let mut out = HashSet::new();
    // Names separated by commas from `i`, up to the first other token.
    let list = |mut i: usize, out: &mut HashSet<String>| {
        while let Some(n) = name(i) {
            out.insert(n);
            if sig.get(i + 1) != Some(&Token::Other(",")) {
                break;
            }
            i += 2;
        }
    };
    for (i, t) in sig.iter().enumerate() {
        match t {
            Token::Name("local") if sig.get(i + 1) != Some(&Token::Name("function")) => list(i + 1, &mut out),
            Token::Name("for") => list(i + 1, &mut out),
            Token::Name("function") => {
                let open = (i..sig.len()).find(|&j| sig[j] == Token::Other("(")).ok_or("function without (")?;
                if let Some(n) = name(i + 1).filter(|_| open == i + 2) {
                    out.insert(n);
                }
                list(open + 1, &mut out);
            }
            Token::Other("{") if !only_false(&sig[i + 1..]) => {
                return Err("a table constructor with fields would be renamed wrongly".into());
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Whether a table constructor, from just after its `{`, is empty or
/// holds only `false`s (a table presized for its slots): nothing to rename.
fn only_false(after: &[Token<'_>]) -> bool {
    for t in after {
        match t {
            Token::Other("}") => return true,
            Token::Name("false") | Token::Other(",") => {}
            _ => return false,
        }
    }
    false
}

/// The parts with their local names shortened, consistently across parts.
pub fn rename(parts: &[String]) -> Result<Vec<String>, String> {
    let lexed: Vec<Vec<Token<'_>>> = parts.iter().map(|p| tokens(p)).collect::<Result<_, _>>()?;
    let all: Vec<Token<'_>> = lexed.iter().flatten().copied().collect();
    let locals = declared(&all)?;
    let mut count: HashMap<&str, usize> = HashMap::new();
    let mut taken: HashSet<&str> = KEYWORDS.iter().copied().collect();
    for t in &all {
        if let Token::Name(n) = t {
            if locals.contains(*n) {
                *count.entry(n).or_default() += 1;
            } else {
                taken.insert(n);
            }
        }
    }
    let mut order: Vec<(&str, usize)> = count.into_iter().collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut short = short_names().filter(|s| !taken.contains(s.as_str()));
    let map: HashMap<&str, String> = order.iter().map(|(n, _)| (*n, short.next().unwrap_or_default())).collect();
    Ok(lexed
        .iter()
        .map(|part| {
            let mut out = String::new();
            for (i, t) in part.iter().enumerate() {
                match t {
                    Token::Name(n) if !is_field(part, i) => out.push_str(map.get(n).map_or(n, String::as_str)),
                    Token::Name(s) | Token::Other(s) => out.push_str(s),
                }
            }
            out
        })
        .collect())
}

/// Whether the name at `i` follows `.` (not `..`) or `:`: a field or method.
fn is_field(part: &[Token<'_>], i: usize) -> bool {
    let before = |k: usize| i.checked_sub(k).and_then(|j| part.get(j)).copied();
    match before(1) {
        Some(Token::Other(":")) => true,
        Some(Token::Other(".")) => before(2) != Some(Token::Other(".")),
        _ => false,
    }
}

/// a..z, A..Z, then two characters.
fn short_names() -> impl Iterator<Item = String> {
    let first: Vec<char> = ('a'..='z').chain('A'..='Z').collect();
    let second: Vec<char> = first.iter().copied().chain('0'..='9').collect();
    let one = first.clone().into_iter().map(String::from);
    let two = first.into_iter().flat_map(move |a| second.clone().into_iter().map(move |b| format!("{a}{b}")));
    one.chain(two)
}
