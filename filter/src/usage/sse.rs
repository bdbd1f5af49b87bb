//! Server-Sent Events (`text/event-stream`), split into events as the
//! WHATWG HTML standard's "event stream interpretation" says, streaming:
//! - lines end at CRLF, LF or CR (a CRLF split across chunks is one end);
//! - a line starting with `:` is a comment;
//! - `name:value` sets a field (one space after the colon is dropped), a
//!   line without a colon is a field with an empty value;
//! - only `data` matters here: the values of an event's `data` lines are
//!   joined with LF (JSON whitespace, so they are fed on as they come);
//! - a blank line dispatches the event, if it had data;
//! - at the end of the stream an event without its blank line is dropped.
//!
//! The leading byte-order mark is the reader's business (it strips one for
//! both formats).

/// Where the data of events goes.
pub trait EventSink {
    /// Next bytes of the current event's data.
    fn data(&mut self, bytes: &[u8]);
    /// The current event is complete.
    fn dispatch(&mut self);
}

/// The field name read so far, as far as telling `data` from the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Name {
    Empty,
    /// The first n bytes of `data`.
    Partial(u8),
    Data,
    Other,
}

impl Name {
    fn then(self, b: u8) -> Name {
        const DATA: &[u8; 4] = b"data";
        match self {
            Name::Empty if b == b'd' => Name::Partial(1),
            Name::Partial(n) if DATA.get(usize::from(n)) == Some(&b) => {
                if n == 3 {
                    Name::Data
                } else {
                    Name::Partial(n + 1)
                }
            }
            _ => Name::Other,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Line {
    Name(Name),
    /// After the colon; `first`: the optional space may come.
    Value {
        data: bool,
        first: bool,
    },
    Comment,
}

/// The state of an event stream between two chunks.
#[derive(Clone, Debug)]
pub struct EventSplitter {
    line: Line,
    /// The last byte was CR: an LF right after it ends nothing more.
    after_cr: bool,
    /// The current event has had a data line.
    has_data: bool,
}

impl Default for EventSplitter {
    fn default() -> EventSplitter {
        EventSplitter { line: Line::Name(Name::Empty), after_cr: false, has_data: false }
    }
}

impl EventSplitter {
    /// Reads the next bytes of the stream.
    pub fn feed(&mut self, bytes: &[u8], sink: &mut impl EventSink) {
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if std::mem::take(&mut self.after_cr) && b == b'\n' {
                i += 1;
                continue;
            }
            if b == b'\r' || b == b'\n' {
                self.end_line(sink);
                self.after_cr = b == b'\r';
                i += 1;
                continue;
            }
            match self.line {
                Line::Name(name) => {
                    self.line = match (name, b) {
                        (Name::Empty, b':') => Line::Comment,
                        (Name::Data, b':') => {
                            self.data_line(sink);
                            Line::Value { data: true, first: true }
                        }
                        (_, b':') => Line::Value { data: false, first: true },
                        (name, b) => Line::Name(name.then(b)),
                    };
                    i += 1;
                }
                Line::Value { data, first: true } => {
                    self.line = Line::Value { data, first: false };
                    if b == b' ' {
                        i += 1;
                    }
                }
                Line::Value { data, first: false } => {
                    let end = line_end(bytes, i);
                    if data {
                        sink.data(&bytes[i..end]);
                    }
                    i = end;
                }
                Line::Comment => i = line_end(bytes, i),
            }
        }
    }

    fn data_line(&mut self, sink: &mut impl EventSink) {
        if self.has_data {
            sink.data(b"\n");
        }
        self.has_data = true;
    }

    fn end_line(&mut self, sink: &mut impl EventSink) {
        match self.line {
            Line::Name(Name::Empty) if self.has_data => {
                self.has_data = false;
                sink.dispatch();
            }
            // `data` alone is a data line with an empty value.
            Line::Name(Name::Data) => self.data_line(sink),
            _ => {}
        }
        self.line = Line::Name(Name::Empty);
    }
}

/// The index of the next CR or LF at or after `from`, or the end.
fn line_end(bytes: &[u8], from: usize) -> usize {
    bytes[from..].iter().position(|&b| b == b'\r' || b == b'\n').map_or(bytes.len(), |n| from + n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    /// The events' data, as the standard's parser would dispatch them.
    #[derive(Default)]
    struct Events {
        current: Vec<u8>,
        done: Vec<String>,
    }

    impl EventSink for Events {
        fn data(&mut self, bytes: &[u8]) {
            self.current.extend_from_slice(bytes);
        }
        fn dispatch(&mut self) {
            self.done.push(String::from_utf8(std::mem::take(&mut self.current)).unwrap());
        }
    }

    /// The events of `stream` fed in pieces of `size` bytes.
    fn events(stream: &str, size: usize) -> Vec<String> {
        let mut splitter = EventSplitter::default();
        let mut sink = Events::default();
        for piece in stream.as_bytes().chunks(size) {
            splitter.feed(piece, &mut sink);
        }
        sink.done
    }

    fn assert_events(stream: &str, expected: &[&str]) {
        for size in 1..=stream.len().max(1) {
            assert_eq!(events(stream, size), expected, "{stream:?} in pieces of {size}");
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn every_line_end_works_even_split_across_chunks() {
        assert_events("data: a\n\ndata: b\n\n", &["a", "b"]);
        assert_events("data: a\r\n\r\ndata: b\r\n\r\n", &["a", "b"]);
        assert_events("data: a\r\rdata: b\r\r", &["a", "b"]);
        assert_events("data: a\r\n\ndata: b\n\r\n", &["a", "b"]);
    }

    #[test]
    #[wasm_bindgen_test]
    fn data_lines_are_joined_with_lf_and_other_fields_ignored() {
        assert_events("event: x\ndata: {\"a\":\ndata:1}\nid: 7\nretry: 10\n\n", &["{\"a\":\n1}"]);
        assert_events("data:no-space\n\n", &["no-space"]);
        assert_events("data:  two spaces\n\n", &[" two spaces"]);
        assert_events("data\ndata\n\n", &["\n"]);
        assert_events("data:\n\n", &[""]);
    }

    #[test]
    #[wasm_bindgen_test]
    fn comments_unknown_fields_and_events_without_data_dispatch_nothing() {
        assert_events(": keep-alive\n\nevent: ping\n\n", &[]);
        assert_events("dat: x\ndata2: y\ndatum: z\nDATA: w\n\n", &[]);
        assert_events("\n\n\n", &[]);
    }

    #[test]
    #[wasm_bindgen_test]
    fn an_event_without_its_blank_line_is_never_dispatched() {
        assert_events("data: a\n\ndata: b\n", &["a"]);
        assert_events("data: a\n\ndata: b", &["a"]);
    }
}
