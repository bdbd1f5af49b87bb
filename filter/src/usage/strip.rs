//! Takes back out of an OpenAI event stream what asking for its usage on
//! the client's behalf (`request::ask_for_usage`) added: the usage event
//! (its `choices` empty, its `usage` an object, just before `[DONE]`) and
//! the `"usage":null` member of every other event. The client's SDK then
//! reads exactly what the API sends a client that did not ask.
//!
//! Events pass whole, each when its blank line has come: the bytes of an
//! event still open wait (at most `MAX_HELD`; past that the stream passes
//! unchanged from there on). At the end of the stream what waits passes as
//! it is: an event without its blank line, which readers drop anyway.
//! Line ends are CRLF, LF or CR, as the SSE standard has them.

use crate::json::{ObjectText, Value};
use crate::request::MAX_BODY_DEPTH;

/// Bytes of one event held at most.
pub const MAX_HELD: usize = 1 << 20;

/// One stream's state between chunks.
#[derive(Clone, Debug, Default)]
pub struct UsageStripper {
    /// The open event's bytes so far.
    held: Vec<u8>,
    /// Bytes of the current line (the last line of `held`) so far.
    line_len: usize,
    /// The last byte was a CR: an LF now ends no other line.
    after_cr: bool,
    /// The last event ended with a CR at the end of a chunk: an LF at the
    /// start of the next one is its line end too, and goes (or not) with
    /// it: `Some(true)` it was sent on, `Some(false)` dropped.
    lf_after: Option<bool>,
    /// An event outgrew `MAX_HELD`: the rest passes unchanged.
    off: bool,
}

impl UsageStripper {
    /// The next chunk of the stream; the bytes to send on in its place.
    pub fn feed(&mut self, chunk: &[u8], end_of_stream: bool) -> Vec<u8> {
        let mut chunk = chunk;
        let mut out = Vec::with_capacity(chunk.len());
        if let (Some(sent), Some(b'\n')) = (self.lf_after.take(), chunk.first()) {
            if sent {
                out.push(b'\n');
            }
            chunk = &chunk[1..];
            self.after_cr = false;
        }
        if self.off {
            out.extend_from_slice(chunk);
            return out;
        }
        let mut event_start = 0;
        let scanned = self.held.len();
        self.held.extend_from_slice(chunk);
        let mut i = scanned;
        while i < self.held.len() {
            let b = self.held[i];
            i += 1;
            if std::mem::take(&mut self.after_cr) && b == b'\n' {
                continue;
            }
            if b != b'\r' && b != b'\n' {
                self.line_len += 1;
                continue;
            }
            self.after_cr = b == b'\r';
            if std::mem::take(&mut self.line_len) > 0 {
                continue;
            }
            // A blank line: the event ends here (with the LF of a CRLF).
            if self.after_cr && self.held.get(i) == Some(&b'\n') {
                i += 1;
                self.after_cr = false;
            }
            let event = &self.held[event_start..i];
            let kept = stripped(event);
            self.lf_after = (self.after_cr && i == self.held.len()).then_some(kept.is_some());
            out.extend_from_slice(&kept.unwrap_or_default());
            event_start = i;
        }
        self.held.drain(..event_start);
        if end_of_stream || self.held.len() > MAX_HELD {
            self.off = !end_of_stream;
            out.append(&mut self.held);
        }
        out
    }
}

/// An event as it goes on: `None` to drop it (the usage event), else with
/// its `"usage":null` member taken out (an event whose data is one line).
fn stripped(event: &[u8]) -> Option<Vec<u8>> {
    let lines = data_lines(event);
    let data: Vec<u8> = match lines.as_slice() {
        [] => return Some(event.to_vec()),
        [one] => event[one.clone()].to_vec(),
        many => many.iter().map(|r| &event[r.clone()]).collect::<Vec<_>>().join(&b'\n'),
    };
    if !data.windows(7).any(|w| w == b"\"usage\"") && !data.contains(&b'\\') {
        return Some(event.to_vec());
    }
    let Some(doc) = ObjectText::read(&data, MAX_BODY_DEPTH) else { return Some(event.to_vec()) };
    let usage = doc.member("usage").map(|m| &m.value);
    let no_choices = doc.member("choices").is_some_and(|m| matches!(&m.value, Value::Array(a) if a.is_empty()));
    match (usage, lines.as_slice()) {
        (Some(Value::Object(_)), _) if no_choices => None,
        (Some(Value::Null), [one]) => {
            let data = doc.without(&data, "usage")?;
            Some([&event[..one.start], &data, &event[one.end..]].concat())
        }
        _ => Some(event.to_vec()),
    }
}

/// Where the value of each `data` line of `event` lies (after `data:` and
/// one optional space, up to its line end).
fn data_lines(event: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < event.len() {
        let end = event[start..].iter().position(|&b| b == b'\r' || b == b'\n').map_or(event.len(), |n| start + n);
        let line = &event[start..end];
        if let Some(rest) = line.strip_prefix(b"data") {
            if rest.is_empty() {
                out.push(end..end);
            } else if rest[0] == b':' {
                let skip = if rest.get(1) == Some(&b' ') { 6 } else { 5 };
                out.push(start + skip..end);
            }
        }
        start = end + 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    /// A chat stream as the API sends it with `include_usage`, and as it
    /// sends it without.
    fn streams(sep: &str) -> (String, String) {
        let chunk = |content: &str, usage: &str| {
            format!(
                r#"data: {{"id":"c1","object":"chat.completion.chunk","choices":[{{"index":0,"delta":{{"content":"{content}"}}}}]{usage}}}"#
            )
        };
        let usage = r#"data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}"#;
        let with = [
            chunk("Hel", r#","usage":null"#),
            chunk("lo", r#","usage":null"#),
            usage.to_string(),
            "data: [DONE]".into(),
        ];
        let without = [chunk("Hel", ""), chunk("lo", ""), "data: [DONE]".into()];
        let join = |events: &[String]| events.iter().map(|e| format!("{e}{sep}{sep}")).collect::<String>();
        (join(&with), join(&without))
    }

    fn strip_in_chunks(stream: &[u8], size: usize) -> Vec<u8> {
        let mut s = UsageStripper::default();
        let chunks: Vec<&[u8]> = stream.chunks(size.max(1)).collect();
        let mut out = Vec::new();
        for (i, c) in chunks.iter().enumerate() {
            out.extend(s.feed(c, i + 1 == chunks.len()));
        }
        out
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_client_sees_the_stream_it_would_have_had_without_asking_whatever_the_chunking() {
        for sep in ["\n", "\r\n", "\r"] {
            let (with, without) = streams(sep);
            for size in [1, 2, 3, 7, 64, with.len()] {
                let out = strip_in_chunks(with.as_bytes(), size);
                assert_eq!(String::from_utf8(out).unwrap(), without, "line end {sep:?}, chunks of {size}");
            }
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn other_events_and_comments_pass_byte_for_byte() {
        let other = concat!(
            ": keep-alive\n\n",
            "event: ping\ndata: {\"usage\":{\"n\":1},\"choices\":[1]}\n\n",
            "data: {\"text\":\"\\\"usage\\\":null\"}\n\n",
            "data: {\"usage\":null,\n",
            "data: \"a\":1}\n\n",
            "data: not json \"usage\"\n\n",
            "data: {\"usage\":null} trailing\n\n",
            "data: {\"a\":1}"
        );
        for size in [1, 5, other.len()] {
            assert_eq!(strip_in_chunks(other.as_bytes(), size), other.as_bytes(), "chunks of {size}");
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn an_event_past_the_bound_lets_the_rest_pass_unchanged() {
        let mut s = UsageStripper::default();
        let long = format!("data: {}", "x".repeat(MAX_HELD));
        assert_eq!(s.feed(long.as_bytes(), false), long.as_bytes(), "given up on: passed on");
        let usage = "\n\ndata: {\"choices\":[],\"usage\":{\"total_tokens\":1}}\n\n";
        assert_eq!(s.feed(usage.as_bytes(), false), usage.as_bytes());
        assert!(s.held.is_empty());
    }
}
