//! Token usage read from a response body, incrementally, in bounded memory.
//!
//! LLM APIs report what a request cost in the response body; a limiter
//! that charges tokens reads it there, after the response. The body passes
//! through untouched: the reader only looks, chunk by chunk, whatever the
//! chunking (down to one byte at a time), and keeps no part of it. Its
//! state is a fixed-size struct (see `size_of::<UsageReader>()` in the
//! tests), so a 20 MB body costs what a 20 byte one does.
//!
//! What it reads, by the response's content type ([`BodyFormat`]):
//! - **JSON** (anything but `text/event-stream`): one document. Each
//!   configured path ([`UsageFields`], e.g. `usage.total_tokens`) is looked
//!   for; their values are summed. OpenAI chat completions
//!   (`usage.total_tokens`, or `usage.prompt_tokens` +
//!   `usage.completion_tokens`), the OpenAI Responses API
//!   (`usage.total_tokens`, or `usage.input_tokens` + `usage.output_tokens`),
//!   Anthropic messages (`usage.input_tokens` + `usage.output_tokens`).
//! - **Server-Sent Events**: each event's data is a JSON document, read the
//!   same way; per path, the value of the LAST event that has it counts.
//!   Events whose data is not JSON (`[DONE]`, a truncated event) are
//!   skipped, and so is an event cut off before the blank line that ends
//!   it (the standard drops it). OpenAI streams with `stream_options.include_usage` put
//!   `usage` in the last data event (`"usage":null` before): the JSON paths
//!   work as they are. The Responses API streams `response.usage.*` in
//!   `response.completed`. Anthropic streams put the input count in
//!   `message_start` and the cumulative output count in `message_delta`:
//!   paths `message.usage.input_tokens` and `usage.output_tokens`.
//!
//! The rules, and why:
//! - A value counts if it is a non-negative integer up to 2^53 - 1 (the
//!   range every JSON parser reads exactly); `12.0` is 12. A negative, a
//!   fraction, an exponent, a string, a boolean, an object or an array at
//!   a configured path makes the result [`Usage::Garbled`]: the server
//!   reported something, and it is not a count. `null` is no value.
//! - A path matches object members only; inside arrays nothing matches.
//! - Keys are compared after decoding escapes, so `"us\u0061ge"` is
//!   `usage`; a key with any non-ASCII character never matches.
//! - When a path occurs twice in a document, the last occurrence counts
//!   (what most JSON parsers keep), like the last event in a stream.
//! - [`Usage::Found`] when at least one path had a value (the others count
//!   0: a partial report beats none), [`Usage::Missing`] when none did.
//! - Invalid JSON (in a JSON body) is [`Usage::Garbled`], with the reason;
//!   so is nesting deeper than 64 levels.
//! - A leading UTF-8 byte-order mark is skipped (RFC 8259 §8.1 lets a
//!   parser ignore it; the SSE standard strips it).
//! - Past `max_bytes` the reader stops looking: [`Usage::TooLarge`], even
//!   if a value was seen, because a later one (the last event, a repeated
//!   key) could have replaced it.

mod decode;
mod fields;
mod gzip;
mod inflate;
mod json;
mod price;
mod sse;
mod strip;

pub use decode::{DecodedReader, Decoder, Encoding};
pub use fields::{UsageFields, MAX_PATHS, MAX_SEGMENTS, MAX_SEGMENT_LEN};
pub use inflate::Corrupt;
pub use price::Weighing;
pub use strip::{UsageStripper, MAX_HELD};

use json::{Document, Outcome};
use sse::{EventSink, EventSplitter};

/// How the body is framed, from the response's `content-type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFormat {
    /// One JSON document.
    Json,
    /// `text/event-stream`: events whose data are JSON documents.
    EventStream,
}

impl BodyFormat {
    /// `EventStream` for `text/event-stream` (any case, any parameters),
    /// `Json` for anything else.
    pub fn from_content_type(content_type: &str) -> BodyFormat {
        let media_type = content_type.split(';').next().unwrap_or("").trim();
        if media_type.eq_ignore_ascii_case("text/event-stream") {
            BodyFormat::EventStream
        } else {
            BodyFormat::Json
        }
    }
}

/// What the body reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    /// The sum of the configured fields that had a value (or, priced,
    /// their weighted sum: see [`UsageReader::priced`]).
    Found(u64),
    /// None of the configured fields had a value.
    Missing,
    /// The body (or, for events, a usage value) could not be read; why.
    Garbled(&'static str),
    /// The body was longer than `max_bytes`.
    TooLarge,
}

const BOM: &[u8; 3] = b"\xEF\xBB\xBF";
/// `UsageReader::bom` once the start of the body is behind.
const PAST_BOM: u8 = 4;

/// Reads one response body.
#[derive(Clone, Debug)]
pub struct UsageReader {
    fields: UsageFields,
    format: BodyFormat,
    max_bytes: u64,
    scanned: u64,
    /// Bytes of a byte-order mark seen at the start, or [`PAST_BOM`].
    bom: u8,
    /// Set once the result is known (too large, garbled, finished): no
    /// more scanning.
    result: Option<Usage>,
    document: Document,
    events: EventSplitter,
    /// Event streams: per path, the value from the last event that had one.
    reported: [Option<u64>; MAX_PATHS],
    /// Event streams: events whose data was a JSON document.
    json_events: u64,
    /// What the values cost, if priced (else they are summed).
    price: Option<Weighing>,
}

impl UsageReader {
    /// A reader for a body of `format`, looking for `fields`, scanning at
    /// most `max_bytes` bytes of it.
    pub fn new(fields: &UsageFields, format: BodyFormat, max_bytes: u64) -> UsageReader {
        UsageReader {
            fields: fields.clone(),
            format,
            max_bytes,
            scanned: 0,
            bom: 0,
            result: None,
            document: Document::new(fields),
            events: EventSplitter::default(),
            reported: [None; MAX_PATHS],
            json_events: 0,
            price: None,
        }
    }

    /// The same reader reporting what the values cost at `price` instead
    /// of their sum.
    pub fn priced(self, price: Option<Weighing>) -> UsageReader {
        UsageReader { price, ..self }
    }

    /// Reads the next chunk of the body.
    pub fn feed(&mut self, chunk: &[u8]) {
        if self.result.is_some() {
            return;
        }
        self.scanned = self.scanned.saturating_add(chunk.len() as u64);
        if self.scanned > self.max_bytes {
            self.result = Some(Usage::TooLarge);
            return;
        }
        let mut rest = chunk;
        while self.bom < 3 {
            match rest.split_first() {
                Some((&b, more)) if b == BOM[usize::from(self.bom)] => {
                    self.bom += 1;
                    rest = more;
                }
                Some(_) => self.not_a_bom(),
                None => return,
            }
        }
        self.bom = PAST_BOM;
        self.scan(rest);
    }

    /// Whether the answer is known before the end (too large, garbled):
    /// later chunks change nothing.
    pub fn is_done(&self) -> bool {
        self.result.is_some()
    }

    /// Bytes of the body seen.
    pub fn scanned(&self) -> u64 {
        self.scanned
    }

    /// Event streams: events seen whose data was a JSON document.
    pub fn events(&self) -> u64 {
        self.json_events
    }

    /// The usage read so far (for a body cut before its end): the sum of
    /// the values already seen, and whether every configured path had one
    /// (a complete report); `None` before any.
    pub fn so_far(&self) -> Option<(u64, bool)> {
        let values = match self.format {
            BodyFormat::Json => self.document.values(),
            BodyFormat::EventStream => &self.reported,
        };
        let Usage::Found(sum) = total(&self.fields, values, self.price) else { return None };
        Some((sum, self.fields.field_values(values).all(|v| v.is_some())))
    }

    /// The end of the body: what it reported. Later calls return the same,
    /// and later chunks are ignored.
    pub fn finish(&mut self) -> Usage {
        if self.result.is_none() && self.bom < 3 {
            self.not_a_bom();
        }
        if let Some(usage) = self.result {
            return usage;
        }
        let usage = match self.format {
            BodyFormat::Json => match self.document.end() {
                Outcome::Complete { error: Some(reason), .. } | Outcome::Invalid(reason) => Usage::Garbled(reason),
                Outcome::Complete { values, error: None } => total(&self.fields, &values, self.price),
            },
            // An event still open has no blank line: it is dropped.
            BodyFormat::EventStream => total(&self.fields, &self.reported, self.price),
        };
        self.result = Some(usage);
        usage
    }

    /// The start of the body was not (all) a byte-order mark: those bytes
    /// are body.
    fn not_a_bom(&mut self) {
        let seen = usize::from(self.bom);
        self.bom = PAST_BOM;
        self.scan(&BOM[..seen]);
    }

    fn scan(&mut self, bytes: &[u8]) {
        match self.format {
            BodyFormat::Json => {
                self.document.feed(&self.fields, bytes);
                if let Some(reason) = self.document.error() {
                    self.result = Some(Usage::Garbled(reason));
                }
            }
            BodyFormat::EventStream => {
                let mut sink = Events {
                    fields: &self.fields,
                    document: &mut self.document,
                    reported: &mut self.reported,
                    result: &mut self.result,
                    json_events: &mut self.json_events,
                };
                self.events.feed(bytes, &mut sink);
            }
        }
    }
}

/// The sum of the fields' values found, or what they cost at `price`
/// (fields without alternatives: a weight per path), if any was found.
fn total(fields: &UsageFields, values: &[Option<u64>], price: Option<Weighing>) -> Usage {
    if values.iter().all(Option::is_none) {
        return Usage::Missing;
    }
    match price {
        Some(p) => Usage::Found(p.cost(values)),
        None => Usage::Found(fields.field_values(values).flatten().fold(0, |sum, v| sum.saturating_add(v))),
    }
}

/// Runs each event's data through the JSON document.
struct Events<'a> {
    fields: &'a UsageFields,
    document: &'a mut Document,
    reported: &'a mut [Option<u64>; MAX_PATHS],
    result: &'a mut Option<Usage>,
    json_events: &'a mut u64,
}

impl EventSink for Events<'_> {
    fn data(&mut self, bytes: &[u8]) {
        if self.result.is_none() {
            self.document.feed(self.fields, bytes);
        }
    }

    fn dispatch(&mut self) {
        let outcome = self.document.end();
        *self.document = Document::new(self.fields);
        if self.result.is_some() {
            return;
        }
        match outcome {
            Outcome::Complete { error: Some(reason), .. } => *self.result = Some(Usage::Garbled(reason)),
            Outcome::Complete { values, error: None } => {
                *self.json_events += 1;
                for (kept, new) in self.reported.iter_mut().zip(values) {
                    if new.is_some() {
                        *kept = new;
                    }
                }
            }
            // Not JSON ([DONE], a keep-alive text): not a usage report.
            Outcome::Invalid(_) => {}
        }
    }
}

#[cfg(test)]
mod tests;
