//! Where the members of a JSON object lie in its text, for changing one
//! member of a document (adding `stream_options.include_usage` to a
//! request, taking `"usage":null` out of an event) while every other byte
//! passes as it came. The text is read by the strict parser: a document it
//! refuses is left alone.

use std::ops::Range;

use super::parser::Parser;
use super::Value;

/// One member of an object.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    /// Its key, escapes decoded.
    pub key: String,
    /// Its value.
    pub value: Value,
    /// From its key's opening quote to its value's end.
    pub span: Range<usize>,
    /// Its value's text.
    pub value_span: Range<usize>,
}

/// An object that is a whole text.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectText {
    /// Where its `{` is.
    pub open: usize,
    /// Its members, in order.
    pub members: Vec<Member>,
}

impl ObjectText {
    /// Reads `input` as one JSON object (white space around it allowed),
    /// nested at most `max_depth` levels; `None` if it is anything else
    /// (another value, invalid JSON, a key twice, not UTF-8).
    pub fn read(input: &[u8], max_depth: usize) -> Option<ObjectText> {
        std::str::from_utf8(input).ok()?;
        let mut p = Parser { input, pos: 0, path: Vec::new(), depth: 0, max_depth };
        p.skip_ws();
        let open = p.pos;
        if p.peek() != Some(b'{') {
            return None;
        }
        p.nest().ok()?;
        let mut members: Vec<Member> = Vec::new();
        p.skip_ws();
        if !p.eat(b'}') {
            loop {
                p.skip_ws();
                let start = p.pos;
                if p.peek() != Some(b'"') {
                    return None;
                }
                let key = p.string().ok()?;
                if members.iter().any(|m| m.key == key) {
                    return None;
                }
                p.skip_ws();
                if !p.eat(b':') {
                    return None;
                }
                p.skip_ws();
                let value_start = p.pos;
                let value = p.value().ok()?;
                members.push(Member { key, value, span: start..p.pos, value_span: value_start..p.pos });
                p.skip_ws();
                if p.eat(b'}') {
                    break;
                }
                if !p.eat(b',') {
                    return None;
                }
            }
        }
        p.skip_ws();
        (p.pos == input.len()).then_some(ObjectText { open, members })
    }

    /// The member `key`.
    pub fn member(&self, key: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.key == key)
    }

    /// `input` (the text read) without member `key`, its comma with it;
    /// `None` if there is no such member.
    pub fn without(&self, input: &[u8], key: &str) -> Option<Vec<u8>> {
        let i = self.members.iter().position(|m| m.key == key)?;
        let cut = match (i.checked_sub(1).and_then(|p| self.members.get(p)), self.members.get(i + 1)) {
            // From the end of the member before it: `,"usage":null` goes.
            (Some(before), _) => before.value_span.end..self.members[i].span.end,
            // The first of several: up to the next one's key.
            (None, Some(after)) => self.members[i].span.start..after.span.start,
            (None, None) => self.members[i].span.clone(),
        };
        Some([&input[..cut.start], &input[cut.end..]].concat())
    }

    /// `input` with `member` (a key and its value, as JSON text) put first
    /// in the object.
    pub fn with_first(&self, input: &[u8], member: &str) -> Vec<u8> {
        let at = self.open + 1;
        let comma = if self.members.is_empty() { "" } else { "," };
        [&input[..at], member.as_bytes(), comma.as_bytes(), &input[at..]].concat()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn read(text: &str) -> Option<ObjectText> {
        ObjectText::read(text.as_bytes(), 8)
    }

    fn without(text: &str, key: &str) -> Option<String> {
        read(text)?.without(text.as_bytes(), key).map(|b| String::from_utf8(b).unwrap())
    }

    #[test]
    #[wasm_bindgen_test]
    fn members_are_found_where_they_are_with_their_values() {
        let text = r#" {"a":1, "us\u0061ge" : null ,"c":{"d":[1,"}"]}} "#;
        let o = read(text).unwrap();
        assert_eq!(o.open, 1);
        let keys: Vec<&str> = o.members.iter().map(|m| m.key.as_str()).collect();
        assert_eq!(keys, ["a", "usage", "c"]);
        let usage = o.member("usage").unwrap();
        assert_eq!((&text[usage.span.clone()], usage.value.clone()), (r#""us\u0061ge" : null"#, Value::Null));
        assert_eq!(&text[o.member("c").unwrap().value_span.clone()], r#"{"d":[1,"}"]}"#);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_member_is_taken_out_with_its_comma_and_nothing_else() {
        assert_eq!(
            without(r#"{"id":"c1","choices":[],"usage":null}"#, "usage").as_deref(),
            Some(r#"{"id":"c1","choices":[]}"#)
        );
        assert_eq!(without(r#"{"usage":null, "id":"c1"}"#, "usage").as_deref(), Some(r#"{"id":"c1"}"#));
        assert_eq!(without(r#"{"a":1 , "usage" : null , "b":2}"#, "usage").as_deref(), Some(r#"{"a":1 , "b":2}"#));
        assert_eq!(without(r#"{ "usage":null }"#, "usage").as_deref(), Some(r#"{  }"#));
        assert_eq!(without(r#"{"a":"usage"}"#, "usage"), None, "a value is no key");
        for taken in
            [r#"{"a":1,"usage":null}"#, r#"{"usage":null,"a":1}"#, r#"{"x":[{"usage":null}],"usage":null,"y":2}"#]
        {
            let out = without(taken, "usage").unwrap();
            let parsed = crate::json::parse(out.as_bytes()).unwrap();
            assert!(parsed.get("usage").is_none(), "{out}");
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_member_is_put_first() {
        let add =
            |text: &str| String::from_utf8(read(text).unwrap().with_first(text.as_bytes(), r#""k":true"#)).unwrap();
        assert_eq!(add(r#"{"stream":true}"#), r#"{"k":true,"stream":true}"#);
        assert_eq!(add(" { } "), r#" {"k":true } "#);
    }

    #[test]
    #[wasm_bindgen_test]
    fn anything_but_one_valid_object_is_left_alone() {
        for bad in
            ["[1]", r#""{}""#, r#"{"a":1,"a":2}"#, r#"{"a":1} {}"#, r#"{"a":}"#, "{", r#"{"a":[[[[[[[[[1]]]]]]]]]}"#]
        {
            assert_eq!(read(bad), None, "{bad}");
        }
        assert_eq!(ObjectText::read(b"{\"a\":\"\xff\"}", 8), None);
    }
}
