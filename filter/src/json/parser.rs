//! Recursive descent over the bytes (RFC 8259), remembering where it is so
//! an error names the path (`rules[1].limits[0].limit`).

use std::fmt;

use super::number::Decimal;
use super::value::Value;

/// Deepest nesting accepted.
pub const MAX_DEPTH: usize = 32;

/// Why a document was refused: where, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonError {
    /// The path of the value being read (`rules[1].limits`), empty at the top.
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.path, self.reason)
        }
    }
}

/// Parses one JSON document filling all of `input` (surrounding white
/// space allowed).
pub fn parse(input: &[u8]) -> Result<Value, JsonError> {
    parse_bounded(input, MAX_DEPTH)
}

/// `parse`, nested at most `max_depth` levels (the recursion is that deep).
pub fn parse_bounded(input: &[u8], max_depth: usize) -> Result<Value, JsonError> {
    if std::str::from_utf8(input).is_err() {
        return Err(JsonError { path: String::new(), reason: "not valid JSON: not UTF-8".into() });
    }
    let mut p = Parser { input, pos: 0, path: Vec::new(), depth: 0, max_depth };
    p.skip_ws();
    let v = p.value()?;
    p.skip_ws();
    if p.pos != input.len() {
        return Err(p.syntax("unexpected data after the document"));
    }
    Ok(v)
}

pub(super) enum Segment {
    Key(String),
    Index(usize),
}

pub(super) struct Parser<'a> {
    pub(super) input: &'a [u8],
    pub(super) pos: usize,
    pub(super) path: Vec<Segment>,
    pub(super) depth: usize,
    pub(super) max_depth: usize,
}

impl Parser<'_> {
    fn path_text(&self) -> String {
        let mut out = String::new();
        for s in &self.path {
            match s {
                Segment::Key(k) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(&printable(k));
                }
                Segment::Index(i) => {
                    out.push('[');
                    out.push_str(&i.to_string());
                    out.push(']');
                }
            }
        }
        out
    }

    fn error(&self, reason: impl Into<String>) -> JsonError {
        JsonError { path: self.path_text(), reason: reason.into() }
    }

    pub(super) fn syntax(&self, what: &str) -> JsonError {
        JsonError { path: String::new(), reason: format!("not valid JSON at byte {}: {what}", self.pos) }
    }

    pub(super) fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    pub(super) fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    pub(super) fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn literal(&mut self, word: &[u8], v: Value) -> Result<Value, JsonError> {
        if self.input.get(self.pos..self.pos + word.len()) == Some(word) {
            self.pos += word.len();
            Ok(v)
        } else {
            Err(self.syntax("expected a value"))
        }
    }

    pub(super) fn value(&mut self) -> Result<Value, JsonError> {
        match self.peek() {
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => self.string().map(Value::String),
            Some(b't') => self.literal(b"true", Value::Bool(true)),
            Some(b'f') => self.literal(b"false", Value::Bool(false)),
            Some(b'n') => self.literal(b"null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.syntax("expected a value")),
            None => Err(self.syntax("unexpected end")),
        }
    }

    fn enter(&mut self, segment: Segment) -> Result<(), JsonError> {
        self.path.push(segment);
        Ok(())
    }

    /// Counts one more open array or object.
    pub(super) fn nest(&mut self) -> Result<(), JsonError> {
        self.depth += 1;
        if self.depth > self.max_depth {
            return Err(self.error(format!("nested deeper than {} levels", self.max_depth)));
        }
        self.pos += 1;
        Ok(())
    }

    fn object(&mut self) -> Result<Value, JsonError> {
        self.nest()?;
        let mut members: Vec<(String, Value)> = Vec::new();
        self.skip_ws();
        if self.eat(b'}') {
            self.depth -= 1;
            return Ok(Value::Object(members));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.syntax("expected a member name"));
            }
            let key = self.string()?;
            self.enter(Segment::Key(key.clone()))?;
            if members.iter().any(|(k, _)| *k == key) {
                return Err(self.error("appears twice in its object"));
            }
            self.skip_ws();
            if !self.eat(b':') {
                return Err(self.syntax("expected ':'"));
            }
            self.skip_ws();
            let v = self.value()?;
            self.path.pop();
            members.push((key, v));
            self.skip_ws();
            if self.eat(b'}') {
                self.depth -= 1;
                return Ok(Value::Object(members));
            }
            if !self.eat(b',') {
                return Err(self.syntax("expected ',' or '}'"));
            }
        }
    }

    fn array(&mut self) -> Result<Value, JsonError> {
        self.nest()?;
        let mut items = Vec::new();
        self.skip_ws();
        if self.eat(b']') {
            self.depth -= 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws();
            self.enter(Segment::Index(items.len()))?;
            let v = self.value()?;
            self.path.pop();
            items.push(v);
            self.skip_ws();
            if self.eat(b']') {
                self.depth -= 1;
                return Ok(Value::Array(items));
            }
            if !self.eat(b',') {
                return Err(self.syntax("expected ',' or ']'"));
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let digits = self.input.get(self.pos..self.pos + 4).ok_or_else(|| self.syntax("short \\u escape"))?;
        let mut n = 0u32;
        for &d in digits {
            n = n * 16 + (d as char).to_digit(16).ok_or_else(|| self.syntax("bad \\u escape"))?;
        }
        self.pos += 4;
        Ok(n)
    }

    pub(super) fn string(&mut self) -> Result<String, JsonError> {
        self.pos += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let b = self.peek().ok_or_else(|| self.syntax("unterminated string"))?;
            self.pos += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    let e = self.peek().ok_or_else(|| self.syntax("unterminated string"))?;
                    self.pos += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => return Err(self.syntax("bad escape")),
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                0..=0x1f => return Err(self.syntax("control character in a string")),
                _ => out.push(b),
            }
        }
        // The input is UTF-8 and escapes add whole characters.
        String::from_utf8(out).map_err(|_| self.syntax("not UTF-8"))
    }

    fn unicode_escape(&mut self) -> Result<char, JsonError> {
        let hi = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&hi) {
            if !(self.eat(b'\\') && self.eat(b'u')) {
                return Err(self.syntax("lone surrogate"));
            }
            let lo = self.hex4()?;
            if !(0xDC00..0xE000).contains(&lo) {
                return Err(self.syntax("lone surrogate"));
            }
            0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
        } else {
            hi
        };
        char::from_u32(code).ok_or_else(|| self.syntax("lone surrogate"))
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<Value, JsonError> {
        let start = self.pos;
        self.eat(b'-');
        let first = self.peek();
        let int_digits = self.digits();
        if int_digits == 0 || (first == Some(b'0') && int_digits > 1) {
            return Err(self.syntax("bad number"));
        }
        let mut integer = true;
        if self.eat(b'.') {
            integer = false;
            if self.digits() == 0 {
                return Err(self.syntax("bad number"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            integer = false;
            self.pos += 1;
            if !self.eat(b'+') {
                self.eat(b'-');
            }
            if self.digits() == 0 {
                return Err(self.syntax("bad number"));
            }
        }
        let text = std::str::from_utf8(&self.input[start..self.pos]).map_err(|_| self.syntax("bad number"))?;
        if let Some(i) = integer.then(|| text.parse::<i64>().ok()).flatten() {
            return Ok(Value::Number(Some(i), None));
        }
        // A number beyond every double is refused, as serde_json refuses it.
        match Decimal::read(text.as_bytes()) {
            Some(d) => Ok(Value::Number(None, Some(Box::new(d)))),
            None => Err(self.syntax("number out of range")),
        }
    }
}

/// A name from the document made safe for one log line: printable ASCII,
/// at most 64 characters.
pub fn printable(s: &str) -> String {
    let mut out: String = s.chars().take(64).map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' }).collect();
    if s.chars().count() > 64 {
        out.push_str("...");
    }
    out
}
