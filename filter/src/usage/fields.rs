//! Which JSON fields hold the usage: dotted paths of object keys, validated
//! once, at configuration.

use std::sync::Arc;

/// At most this many paths (they are tracked as bits of a `u8`).
pub const MAX_PATHS: usize = 8;
/// At most this many keys in a path.
pub const MAX_SEGMENTS: usize = 8;
/// At most this many bytes in a key.
pub const MAX_SEGMENT_LEN: usize = 64;

/// One or more JSON field paths, like `usage.total_tokens`, whose integer
/// values are summed. A field may have alternative paths, each the same
/// count in another API's shape (`usage.total_tokens` of a chat completion,
/// `response.usage.total_tokens` of the Responses API): the first of them
/// with a value counts. A path names object members only (no array index):
/// a value inside an array never matches. Cheap to clone (shared).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageFields(Arc<Fields>);

#[derive(Debug, PartialEq, Eq)]
struct Fields {
    paths: Vec<Path>,
    /// The field each path reports (paths of one field are alternatives).
    field_of: Vec<u8>,
}

/// One path: its keys, each `[A-Za-z0-9_-]`, 1 to [`MAX_SEGMENT_LEN`] bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Path(Vec<Box<[u8]>>);

impl UsageFields {
    /// Validates `spec`: 1 to [`MAX_PATHS`] paths, each 1 to
    /// [`MAX_SEGMENTS`] keys joined by `.`; no path twice, and none the
    /// prefix of another (its value would be an object, not a count).
    pub fn parse(spec: &[&str]) -> Result<UsageFields, String> {
        let fields: Vec<Vec<&str>> = spec.iter().map(|p| vec![*p]).collect();
        UsageFields::parse_alternatives(&fields)
    }

    /// Like `parse`, each field given as its alternative paths (the first
    /// with a value counts); at most [`MAX_PATHS`] paths in all.
    pub fn parse_alternatives(fields: &[Vec<&str>]) -> Result<UsageFields, String> {
        let spec: Vec<&str> = fields.iter().flatten().copied().collect();
        if spec.is_empty() || spec.len() > MAX_PATHS || fields.iter().any(Vec::is_empty) {
            return Err(format!("must list 1 to {MAX_PATHS} field paths, not {}", spec.len()));
        }
        let field_of: Vec<u8> =
            fields.iter().enumerate().flat_map(|(f, alts)| std::iter::repeat_n(f as u8, alts.len())).collect();
        let mut paths: Vec<Path> = Vec::with_capacity(spec.len());
        for text in spec.iter().copied() {
            let path = parse_path(text)?;
            if let Some(other) =
                paths.iter().zip(spec.iter()).find(|(p, _)| p.0.starts_with(&path.0) || path.0.starts_with(&p.0))
            {
                let (a, b) = if other.0 .0.len() <= path.0.len() { (*other.1, text) } else { (text, *other.1) };
                return Err(if a == b {
                    format!("\"{a}\" is listed twice")
                } else {
                    format!("\"{a}\" contains \"{b}\": a value cannot be both an object and a count")
                });
            }
            paths.push(path);
        }
        Ok(UsageFields(Arc::new(Fields { paths, field_of })))
    }

    /// The number of paths.
    pub(crate) fn len(&self) -> usize {
        self.0.paths.len()
    }

    /// Whether some field has alternative paths.
    pub fn has_alternatives(&self) -> bool {
        self.0.field_of.last().is_some_and(|&f| usize::from(f) + 1 < self.0.paths.len())
    }

    /// Key `index` of path `path`, or `None` past its end.
    pub(crate) fn segment(&self, path: usize, index: usize) -> Option<&[u8]> {
        self.0.paths.get(path).and_then(|p| p.0.get(index)).map(|s| &s[..])
    }

    /// The number of keys in path `path`.
    pub(crate) fn depth(&self, path: usize) -> usize {
        self.0.paths.get(path).map_or(0, |p| p.0.len())
    }

    /// Each field's value from the values read per path (`values[p]`: path
    /// `p`'s): its first alternative with one, if any.
    pub(crate) fn field_values<'a>(&'a self, values: &'a [Option<u64>]) -> impl Iterator<Item = Option<u64>> + 'a {
        let fields = self.0.field_of.last().map_or(0, |&f| usize::from(f) + 1);
        (0..fields).map(move |f| {
            self.0
                .field_of
                .iter()
                .zip(values)
                .find(|(of, v)| usize::from(**of) == f && v.is_some())
                .and_then(|(_, v)| *v)
        })
    }
}

fn parse_path(text: &str) -> Result<Path, String> {
    let segments: Vec<&str> = text.split('.').collect();
    if segments.len() > MAX_SEGMENTS {
        return Err(format!("\"{text}\" has more than {MAX_SEGMENTS} keys"));
    }
    let mut out = Vec::with_capacity(segments.len());
    for s in segments {
        if s.is_empty() {
            return Err(format!("\"{text}\" has an empty key (keys are joined by single dots)"));
        }
        if s.len() > MAX_SEGMENT_LEN {
            return Err(format!("\"{text}\" has a key longer than {MAX_SEGMENT_LEN} bytes"));
        }
        if !s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            return Err(format!("\"{text}\": keys may hold only A-Z a-z 0-9 _ -"));
        }
        out.push(s.as_bytes().into());
    }
    Ok(Path(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn error(spec: &[&str]) -> String {
        UsageFields::parse(spec).unwrap_err()
    }

    #[test]
    #[wasm_bindgen_test]
    fn paths_are_split_into_keys() {
        let f = UsageFields::parse(&["usage.total_tokens", "message.usage.input_tokens"]).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f.depth(0), 2);
        assert_eq!(f.segment(0, 1), Some(&b"total_tokens"[..]));
        assert_eq!(f.segment(1, 0), Some(&b"message"[..]));
        assert_eq!(f.segment(1, 3), None);
        let longest = ["k"; MAX_SEGMENTS].join(".");
        let widest = "a".repeat(MAX_SEGMENT_LEN);
        assert!(UsageFields::parse(&[&longest, &widest]).is_ok());
        assert!(UsageFields::parse(&["a", "b", "c", "d", "e", "f", "g", "h"]).is_ok());
    }

    #[test]
    #[wasm_bindgen_test]
    fn bad_specs_are_refused_with_the_reason() {
        assert_eq!(error(&[]), "must list 1 to 8 field paths, not 0");
        assert_eq!(error(&["a", "b", "c", "d", "e", "f", "g", "h", "i"]), "must list 1 to 8 field paths, not 9");
        assert_eq!(error(&["usage..total"]), "\"usage..total\" has an empty key (keys are joined by single dots)");
        assert_eq!(error(&[""]), "\"\" has an empty key (keys are joined by single dots)");
        assert_eq!(
            error(&["usage.total_tokens."]),
            "\"usage.total_tokens.\" has an empty key (keys are joined by single dots)"
        );
        assert_eq!(error(&["a.b.c.d.e.f.g.h.i"]), "\"a.b.c.d.e.f.g.h.i\" has more than 8 keys");
        let wide = "a".repeat(65);
        assert_eq!(error(&[&wide]), format!("\"{wide}\" has a key longer than 64 bytes"));
        assert_eq!(error(&["usage.total tokens"]), "\"usage.total tokens\": keys may hold only A-Z a-z 0-9 _ -");
        assert_eq!(error(&["choices[0].x"]), "\"choices[0].x\": keys may hold only A-Z a-z 0-9 _ -");
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_field_takes_the_first_of_its_alternatives_that_has_a_value() {
        let f =
            UsageFields::parse_alternatives(&[vec!["usage.total_tokens", "response.usage.total_tokens"], vec!["x"]])
                .unwrap();
        assert!(f.has_alternatives());
        assert!(!UsageFields::parse(&["a", "b"]).unwrap().has_alternatives());
        let each = |values: &[Option<u64>]| f.field_values(values).collect::<Vec<_>>();
        assert_eq!(each(&[Some(5), None, Some(1)]), [Some(5), Some(1)]);
        assert_eq!(each(&[None, Some(7), None]), [Some(7), None]);
        assert_eq!(each(&[Some(5), Some(7), None]), [Some(5), None], "the first listed");
        assert_eq!(
            UsageFields::parse_alternatives(&[vec![], vec!["a"]]).unwrap_err(),
            "must list 1 to 8 field paths, not 1"
        );
    }

    #[test]
    #[wasm_bindgen_test]
    fn no_path_may_repeat_or_contain_another() {
        assert_eq!(error(&["usage.total_tokens", "usage.total_tokens"]), "\"usage.total_tokens\" is listed twice");
        assert_eq!(
            error(&["usage", "usage.total_tokens"]),
            "\"usage\" contains \"usage.total_tokens\": a value cannot be both an object and a count"
        );
        assert_eq!(
            error(&["usage.total_tokens", "usage"]),
            "\"usage\" contains \"usage.total_tokens\": a value cannot be both an object and a count"
        );
        assert!(
            UsageFields::parse(&["usage.input", "usage.input_tokens"]).is_ok(),
            "a key prefix is not a path prefix"
        );
    }
}
