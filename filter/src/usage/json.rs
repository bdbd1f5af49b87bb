//! A streaming JSON tokenizer that finds the configured paths' integers in
//! one document fed in pieces of any size, without buffering it.
//!
//! It checks the whole grammar of RFC 8259 but for two things a usage
//! count does not depend on: UTF-8 validity (bytes above 0x7F inside
//! strings pass as they are; no configured key holds one) and the pairing
//! of `\u` surrogates. Numbers are checked by grammar, not range: `1e999`
//! is valid JSON here (it is not a count either way). Its state is
//! fixed: the nesting (object or array) as bits of a `u64`, and for the
//! first [`MAX_SEGMENTS`] levels a bit set of the paths still matching.
//! Keys are compared byte by byte as they arrive, after decoding escapes
//! (`"us\u0061ge"` is `usage`), against the configured keys only: no key is
//! ever stored.

use super::fields::{UsageFields, MAX_PATHS, MAX_SEGMENTS};

/// Deepest nesting accepted; deeper documents are invalid.
pub const MAX_DEPTH: u8 = 64;
/// The largest count accepted: the largest integer every JSON parser
/// reads exactly (RFC 8259 §6, I-JSON).
pub const MAX_EXACT: u64 = (1 << 53) - 1;

/// What is next in the document's grammar, between tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// A value: at the start, after `:`, after `,` in an array.
    Value,
    /// After `[`.
    ValueOrClose,
    /// After `{`.
    KeyOrClose,
    /// After `,` in an object.
    Key,
    Colon,
    CommaOrClose,
    /// The document is complete: whitespace only.
    End,
}

/// The token being read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    Between,
    Str {
        key: bool,
        escape: Escape,
    },
    Num(Phase),
    /// The bytes of `true`, `false` or `null` still to come.
    Literal(&'static [u8]),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Escape {
    None,
    Backslash,
    /// In `\uXXXX`: hex digits left, code so far.
    Hex(u8, u16),
}

/// Where a number is in `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    ExpMark,
    ExpSign,
    Exp,
}

impl Phase {
    /// Whether a number may end here.
    fn complete(self) -> bool {
        matches!(self, Phase::Zero | Phase::Int | Phase::Frac | Phase::Exp)
    }
}

/// The number being read, as much of it as a usage count needs.
#[derive(Clone, Copy, Debug, Default)]
struct Number {
    value: u64,
    negative: bool,
    fraction: bool,
    exponent: bool,
    too_large: bool,
}

/// What a complete document held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Valid JSON: per path, the value of its last occurrence (`null`
    /// counts as none), and the first usage value that was not a count.
    Complete { values: [Option<u64>; MAX_PATHS], error: Option<&'static str> },
    /// Not a JSON document.
    Invalid(&'static str),
}

/// One JSON document being read.
#[derive(Clone, Debug)]
pub struct Document {
    expect: Expect,
    token: Token,
    depth: u8,
    /// Bit `d - 1` set: the container at depth `d` is an array.
    arrays: u64,
    /// Paths whose keys lead to the object at depth `d` (index `d - 1`).
    frames: [u8; MAX_SEGMENTS],
    /// Paths whose keys lead to the value about to start.
    value_paths: u8,
    /// Paths whose next key still matches the key being read.
    key_paths: u8,
    key_len: u8,
    /// The path whose value is the number being read.
    target: Option<u8>,
    number: Number,
    values: [Option<u64>; MAX_PATHS],
    value_error: Option<&'static str>,
    syntax_error: Option<&'static str>,
}

impl Document {
    /// An empty document looking for `fields`.
    pub fn new(fields: &UsageFields) -> Document {
        Document {
            expect: Expect::Value,
            token: Token::Between,
            depth: 0,
            arrays: 0,
            frames: [0; MAX_SEGMENTS],
            value_paths: ((1u16 << fields.len()) - 1) as u8,
            key_paths: 0,
            key_len: 0,
            target: None,
            number: Number::default(),
            values: [None; MAX_PATHS],
            value_error: None,
            syntax_error: None,
        }
    }

    /// The values found so far, per path.
    pub fn values(&self) -> &[Option<u64>; MAX_PATHS] {
        &self.values
    }

    /// The first error so far: invalid JSON, or a usage value that is not a
    /// count.
    pub fn error(&self) -> Option<&'static str> {
        self.syntax_error.or(self.value_error)
    }

    /// Reads the next bytes of the document.
    pub fn feed(&mut self, fields: &UsageFields, bytes: &[u8]) {
        let mut i = 0;
        while i < bytes.len() && self.syntax_error.is_none() {
            match self.token {
                // The bulk of a body: string contents nobody compares.
                Token::Str { key, escape: Escape::None } if !key || self.key_paths == 0 => {
                    let rest = &bytes[i..];
                    i += rest.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20).unwrap_or(rest.len());
                    if let Some(&b) = bytes.get(i) {
                        self.string_byte(fields, b);
                        i += 1;
                    }
                }
                Token::Str { .. } => {
                    self.string_byte(fields, bytes[i]);
                    i += 1;
                }
                Token::Num(phase) => {
                    if self.number_byte(phase, bytes[i]) {
                        i += 1;
                    } else {
                        // The byte ends the number and is read again.
                        self.end_number();
                    }
                }
                Token::Literal(rest) => {
                    match rest.split_first() {
                        Some((&want, [])) if want == bytes[i] => self.value_done(),
                        Some((&want, more)) if want == bytes[i] => self.token = Token::Literal(more),
                        _ => self.fail("a JSON literal is misspelled"),
                    }
                    i += 1;
                }
                Token::Between => {
                    self.between(fields, bytes[i]);
                    i += 1;
                }
            }
        }
    }

    /// The end of the document: what it held, or why it is not JSON.
    pub fn end(&mut self) -> Outcome {
        if let Token::Num(phase) = self.token {
            if phase.complete() && self.syntax_error.is_none() {
                self.end_number();
            }
        }
        if let Some(reason) = self.syntax_error {
            return Outcome::Invalid(reason);
        }
        match (self.expect, self.token) {
            (Expect::End, Token::Between) => Outcome::Complete { values: self.values, error: self.value_error },
            (Expect::Value, Token::Between) if self.depth == 0 => Outcome::Invalid("no JSON document"),
            _ => Outcome::Invalid("the JSON document ends early"),
        }
    }

    fn fail(&mut self, reason: &'static str) {
        self.syntax_error.get_or_insert(reason);
    }

    fn not_a_count(&mut self, reason: &'static str) {
        self.value_error.get_or_insert(reason);
    }

    fn between(&mut self, fields: &UsageFields, b: u8) {
        if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            return;
        }
        match (self.expect, b) {
            (Expect::ValueOrClose, b']') => self.close(true),
            (Expect::Value | Expect::ValueOrClose, _) => self.start_value(fields, b),
            (Expect::KeyOrClose | Expect::Key, b'"') => {
                self.key_paths = self.frame_paths();
                self.key_len = 0;
                self.token = Token::Str { key: true, escape: Escape::None };
            }
            (Expect::KeyOrClose, b'}') => self.close(false),
            (Expect::KeyOrClose | Expect::Key, _) => self.fail("a JSON object key is missing"),
            (Expect::Colon, b':') => {
                self.value_paths = self.key_paths;
                self.expect = Expect::Value;
            }
            (Expect::Colon, _) => self.fail("a JSON object key is not followed by ':'"),
            (Expect::CommaOrClose, b',') if self.in_array() => {
                self.value_paths = 0;
                self.expect = Expect::Value;
            }
            (Expect::CommaOrClose, b',') => self.expect = Expect::Key,
            (Expect::CommaOrClose, b']') => self.close(true),
            (Expect::CommaOrClose, b'}') => self.close(false),
            (Expect::CommaOrClose, _) => self.fail("a JSON value is not followed by ',' or a closing bracket"),
            (Expect::End, _) => self.fail("more follows the JSON document"),
        }
    }

    fn start_value(&mut self, fields: &UsageFields, b: u8) {
        // The path this value completes, if any (at most one: no path is
        // another's prefix).
        let depth = usize::from(self.depth);
        self.target =
            (0..fields.len()).find(|&p| self.value_paths & 1 << p != 0 && fields.depth(p) == depth).map(|p| p as u8);
        let not_a_number = "a usage value is not a number";
        match b {
            b'{' | b'[' => {
                if self.target.is_some() {
                    self.not_a_count(not_a_number);
                }
                let array = b == b'[';
                // Inside an array no path matches; in an object, the paths
                // that go deeper.
                let paths = if array { 0 } else { self.value_paths & !self.target.map_or(0, |p| 1 << p) };
                self.push(array, paths);
            }
            b'"' => {
                if self.target.is_some() {
                    self.not_a_count(not_a_number);
                }
                self.token = Token::Str { key: false, escape: Escape::None };
            }
            b'-' | b'0'..=b'9' => {
                self.number = Number { negative: b == b'-', ..Number::default() };
                self.token = Token::Num(match b {
                    b'-' => Phase::Minus,
                    b'0' => Phase::Zero,
                    _ => {
                        self.accumulate(b);
                        Phase::Int
                    }
                });
            }
            b't' | b'f' => {
                if self.target.is_some() {
                    self.not_a_count(not_a_number);
                }
                self.token = Token::Literal(if b == b't' { b"rue" } else { b"alse" });
            }
            // A null usage value is no value (OpenAI streams `"usage":null`).
            b'n' => self.token = Token::Literal(b"ull"),
            _ => self.fail("a JSON value is missing or malformed"),
        }
    }

    fn push(&mut self, array: bool, paths: u8) {
        if self.depth == MAX_DEPTH {
            return self.fail("the JSON document is nested deeper than 64 levels");
        }
        let bit = 1u64 << self.depth;
        self.depth += 1;
        self.arrays = if array { self.arrays | bit } else { self.arrays & !bit };
        if let Some(frame) = self.frames.get_mut(usize::from(self.depth) - 1) {
            *frame = paths;
        }
        if array {
            self.value_paths = 0;
            self.expect = Expect::ValueOrClose;
        } else {
            self.expect = Expect::KeyOrClose;
        }
    }

    fn close(&mut self, array: bool) {
        if self.in_array() != array {
            return self.fail("a JSON bracket does not match");
        }
        self.depth -= 1;
        self.value_done();
    }

    fn in_array(&self) -> bool {
        self.depth > 0 && self.arrays & 1 << (self.depth - 1) != 0
    }

    /// Paths alive in the object at the current depth.
    fn frame_paths(&self) -> u8 {
        usize::from(self.depth).checked_sub(1).and_then(|i| self.frames.get(i)).copied().unwrap_or(0)
    }

    fn value_done(&mut self) {
        self.token = Token::Between;
        self.expect = if self.depth == 0 { Expect::End } else { Expect::CommaOrClose };
    }

    fn string_byte(&mut self, fields: &UsageFields, b: u8) {
        let Token::Str { key, escape } = self.token else { return };
        let decoded = match escape {
            Escape::None => match b {
                b'"' if key => return self.end_key(fields),
                b'"' => return self.value_done(),
                b'\\' => {
                    self.token = Token::Str { key, escape: Escape::Backslash };
                    return;
                }
                0..=0x1f => return self.fail("a JSON string holds a control character"),
                _ => b,
            },
            Escape::Backslash => match b {
                b'"' | b'\\' | b'/' => b,
                b'b' => 0x08,
                b'f' => 0x0c,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                b'u' => {
                    self.token = Token::Str { key, escape: Escape::Hex(4, 0) };
                    return;
                }
                _ => return self.fail("a JSON string has an invalid escape"),
            },
            Escape::Hex(left, code) => {
                let Some(digit) = (b as char).to_digit(16) else {
                    return self.fail("a JSON string has an invalid \\u escape");
                };
                let code = code << 4 | digit as u16;
                if left > 1 {
                    self.token = Token::Str { key, escape: Escape::Hex(left - 1, code) };
                    return;
                }
                // Configured keys are ASCII: any other character only has
                // to differ from every key byte, and 0x80 does.
                u8::try_from(code).ok().filter(u8::is_ascii).unwrap_or(0x80)
            }
        };
        self.token = Token::Str { key, escape: Escape::None };
        if key {
            self.key_byte(fields, decoded);
        }
    }

    fn key_byte(&mut self, fields: &UsageFields, b: u8) {
        let index = usize::from(self.depth) - 1;
        let at = usize::from(self.key_len);
        for p in 0..fields.len() {
            if self.key_paths & 1 << p != 0 && fields.segment(p, index).and_then(|s| s.get(at)) != Some(&b) {
                self.key_paths &= !(1 << p);
            }
        }
        self.key_len = self.key_len.saturating_add(1);
    }

    fn end_key(&mut self, fields: &UsageFields) {
        let index = usize::from(self.depth) - 1;
        for p in 0..fields.len() {
            if fields.segment(p, index).map(<[u8]>::len) != Some(usize::from(self.key_len)) {
                self.key_paths &= !(1 << p);
            }
        }
        self.token = Token::Between;
        self.expect = Expect::Colon;
    }

    /// Reads `b` as part of the number; false when `b` ends it.
    fn number_byte(&mut self, phase: Phase, b: u8) -> bool {
        let next = match (phase, b) {
            (Phase::Minus, b'0') => Phase::Zero,
            (Phase::Minus | Phase::Int, b'0'..=b'9') => {
                self.accumulate(b);
                Phase::Int
            }
            (Phase::Zero, b'0'..=b'9') => {
                self.fail("a JSON number has a leading zero");
                return true;
            }
            (Phase::Zero | Phase::Int, b'.') => Phase::Dot,
            (Phase::Dot | Phase::Frac, b'0'..=b'9') => {
                self.number.fraction |= b != b'0';
                Phase::Frac
            }
            (Phase::Zero | Phase::Int | Phase::Frac, b'e' | b'E') => {
                self.number.exponent = true;
                Phase::ExpMark
            }
            (Phase::ExpMark, b'+' | b'-') => Phase::ExpSign,
            (Phase::ExpMark | Phase::ExpSign | Phase::Exp, b'0'..=b'9') => Phase::Exp,
            (phase, _) if phase.complete() => return false,
            _ => {
                self.fail("a JSON number is malformed");
                return true;
            }
        };
        self.token = Token::Num(next);
        true
    }

    fn accumulate(&mut self, digit: u8) {
        let n = &mut self.number;
        match n.value.checked_mul(10).and_then(|v| v.checked_add(u64::from(digit - b'0'))) {
            Some(v) if v <= MAX_EXACT => n.value = v,
            _ => n.too_large = true,
        }
    }

    fn end_number(&mut self) {
        if let Some(p) = self.target {
            let n = self.number;
            if n.negative {
                self.not_a_count("a usage value is negative");
            } else if n.fraction || n.exponent {
                // 12.0 is 12; 12.5 and 1e3 are not counts a server writes.
                self.not_a_count("a usage value is not an integer");
            } else if n.too_large {
                self.not_a_count("a usage value is beyond 2^53 - 1");
            } else if let Some(slot) = self.values.get_mut(usize::from(p)) {
                *slot = Some(n.value);
            }
        }
        self.value_done();
    }
}
