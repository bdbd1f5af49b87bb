//! A charge waiting for the response to say what it costs: the usage
//! header, or the body read as it passes (decoded if compressed), and what
//! is charged when it never says: an estimate from what the response
//! delivered, or `max` for a body that cannot be read. A client pays at
//! least what it was delivered, whatever it sends or when it hangs up.

use std::cell::Cell;
use std::rc::Rc;

use crate::config::{Config, Cost, HangUp, Price, Unreadable, UsageSource};
use crate::pipeline::Charge;
use crate::usage::{BodyFormat, DecodedReader, Encoding, Usage, UsageReader};

/// Body bytes a usage reader looks at most (decoded); past this the body
/// is unreadable (it still passes, unread).
pub const MAX_USAGE_BODY: u64 = 64 * 1024 * 1024;

/// Compressed bodies decoded at once per worker at most (about 45 KB
/// each); a compressed body beyond them is charged as unreadable.
pub const MAX_DECODERS: usize = 256;

/// What the response side can tell.
pub trait ResponseSource {
    /// The first value of response header `name`, as bytes.
    fn header(&self, name: &str) -> Option<Vec<u8>>;
}

/// The decoders running on one worker, counted.
#[derive(Clone, Debug, Default)]
pub struct Decoders(Rc<Cell<usize>>);

/// One running decoder: released when dropped.
#[derive(Debug)]
struct DecoderTicket(Rc<Cell<usize>>);

impl Decoders {
    /// A slot for one more decoder, if fewer than `MAX_DECODERS` run.
    fn take(&self) -> Option<DecoderTicket> {
        let n = self.0.get();
        (n < MAX_DECODERS).then(|| {
            self.0.set(n + 1);
            DecoderTicket(self.0.clone())
        })
    }

    /// Decoders running now.
    #[cfg(test)]
    pub fn running(&self) -> usize {
        self.0.get()
    }
}

impl Drop for DecoderTicket {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}

/// The body as it is being read.
#[derive(Debug)]
struct BodyTap {
    reader: DecodedReader,
    format: BodyFormat,
    /// Not a 2xx answer: an error page is no usage report, so one that
    /// cannot be read is charged as one without usage.
    error_answer: bool,
    /// Held while `reader` decodes.
    slot: Option<DecoderTicket>,
}

/// One rule's charge, waiting for its usage.
#[derive(Debug)]
pub struct UsageWatch {
    /// What to charge once the usage is known.
    pub charge: Charge,
    /// The body reader, once the response headers named the format.
    tap: Option<BodyTap>,
}

/// What the response delivered before its usage (or instead of it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delivered {
    /// Body bytes (decoded).
    pub bytes: u64,
    /// Event streams: events with JSON data.
    pub events: u64,
    /// Whether the body is an event stream.
    pub event_stream: bool,
    /// Usage values already read, when they were not all there.
    pub partial: Option<u64>,
}

/// What the response reported for one charge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reported {
    /// This usage, complete.
    Found(u64),
    /// No usage (none in a readable body, no usage header, or the stream
    /// ended before it came): an estimate from what was delivered.
    Missing(Delivered),
    /// The body or header could not be read; why (bounded, printable).
    Unreadable(String),
    /// The stream ended before the response headers (the client hung up).
    NoResponse,
}

impl UsageWatch {
    /// A watch for `charge`.
    pub fn new(charge: Charge) -> UsageWatch {
        UsageWatch { charge, tap: None }
    }

    /// Whether it still reads the body.
    pub fn reads_body(&self) -> bool {
        self.tap.is_some()
    }

    /// The response headers arrived: the amount to charge now (header
    /// source, a body that will not come or cannot be read), or `None`
    /// when the body must be read first.
    pub fn on_headers<R: ResponseSource + ?Sized>(
        &mut self,
        config: &Config,
        response: &R,
        end_of_stream: bool,
        decoders: &Decoders,
    ) -> Option<Reported> {
        let Cost::Response { source, .. } = &config.rules.get(self.charge.rule)?.cost else { return None };
        let (json, event_stream) = match source {
            UsageSource::Header(name) => return Some(parse_header(response.header(name))),
            UsageSource::Body { json, event_stream } => (json, event_stream),
        };
        let content_type = response.header("content-type").unwrap_or_default();
        let format = BodyFormat::from_content_type(&String::from_utf8_lossy(&content_type));
        let fields = match format {
            BodyFormat::Json => json,
            BodyFormat::EventStream => event_stream,
        };
        let delivered = Delivered { event_stream: format == BodyFormat::EventStream, ..Delivered::default() };
        // No fields for this format: it reports no usage.
        let Some(fields) = fields else { return Some(Reported::Missing(delivered)) };
        let status = response.header(":status").unwrap_or_default();
        let error_answer = !status.starts_with(b"2");
        let coding = response.header("content-encoding");
        let Some(encoding) = Encoding::from_header(coding.as_deref()) else {
            if error_answer {
                return Some(Reported::Missing(delivered));
            }
            return Some(Reported::Unreadable(format!(
                "content-encoding {} cannot be decoded",
                printable(coding.as_deref().unwrap_or_default())
            )));
        };
        let slot = match encoding {
            Encoding::Identity => None,
            _ => match decoders.take() {
                Some(slot) => Some(slot),
                None => {
                    return Some(Reported::Unreadable(format!(
                        "{MAX_DECODERS} compressed bodies are already being decoded on this worker"
                    )))
                }
            },
        };
        let price = self.charge.price.as_ref().map(|p| p.of(format));
        let reader = DecodedReader::new(UsageReader::new(fields, format, MAX_USAGE_BODY).priced(price), encoding);
        let mut tap = BodyTap { reader, format, error_answer, slot };
        if end_of_stream {
            return Some(tap.finish());
        }
        self.tap = Some(tap);
        None
    }

    /// A body chunk passed; the amount once the body ended.
    pub fn on_body(&mut self, chunk: &[u8], end_of_stream: bool) -> Option<Reported> {
        let tap = self.tap.as_mut()?;
        tap.reader.feed(chunk);
        if !tap.reader.decodes() {
            // Done decoding (or never did): its ticket is free for another body.
            tap.slot = None;
        }
        let reported = end_of_stream.then(|| tap.finish());
        if reported.is_some() {
            self.tap = None;
        }
        reported
    }

    /// The stream ended before the body did (reset by either side, or no
    /// response at all): usage already read whole is charged as is;
    /// otherwise the estimate from what was delivered. A watch without a
    /// tap still waits for the response headers (once they come it either
    /// charges or taps the body): no response at all.
    pub fn on_end(&mut self) -> Reported {
        let Some(tap) = self.tap.take() else { return Reported::NoResponse };
        if let Some(usage) = tap.reader.answer() {
            return tap.reported(usage);
        }
        match tap.reader.so_far() {
            Some((n, true)) => Reported::Found(n),
            partial => Reported::Missing(Delivered { partial: partial.map(|(n, _)| n), ..tap.delivered() }),
        }
    }
}

impl BodyTap {
    fn delivered(&self) -> Delivered {
        let (bytes, events) = self.reader.delivered();
        Delivered { bytes, events, event_stream: self.format == BodyFormat::EventStream, partial: None }
    }

    fn finish(&mut self) -> Reported {
        let usage = self.reader.finish();
        self.slot = None;
        self.reported(usage)
    }

    fn reported(&self, usage: Usage) -> Reported {
        match usage {
            Usage::Found(n) => Reported::Found(n),
            Usage::Missing => Reported::Missing(self.delivered()),
            Usage::Garbled(_) | Usage::TooLarge if self.error_answer => Reported::Missing(self.delivered()),
            Usage::Garbled(why) => Reported::Unreadable(why.to_string()),
            Usage::TooLarge => Reported::Unreadable(format!("the body passed {MAX_USAGE_BODY} bytes")),
        }
    }
}

/// At most 32 bytes of `bytes`, each outside `[A-Za-z0-9._-]` as `?`: an
/// upstream's header value on its way to a log line.
fn printable(bytes: &[u8]) -> String {
    let mut out: String =
        bytes
            .iter()
            .take(32)
            .map(|&b| {
                if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b',' | b' ') {
                    b as char
                } else {
                    '?'
                }
            })
            .collect();
    if bytes.len() > 32 {
        out.push_str("...");
    }
    out
}

/// A usage header's value: digits only.
fn parse_header(value: Option<Vec<u8>>) -> Reported {
    let Some(v) = value else { return Reported::Missing(Delivered::default()) };
    let n = (!v.is_empty() && v.len() <= 19 && v.iter().all(u8::is_ascii_digit))
        .then(|| std::str::from_utf8(&v).ok()?.parse().ok())
        .flatten();
    n.map_or_else(|| Reported::Unreadable("the usage header is not an integer".into()), Reported::Found)
}

/// The amount to charge for `reported` under a rule's cost, for a request
/// whose body was `prompt_bytes` long: the usage (at most `max`). Without
/// one, an estimate of what the upstream worked on: the prompt (its body
/// bytes ÷ `bytes_per_unit`) plus what the response delivered (an event
/// stream: one unit per event; a JSON body: its bytes ÷ `bytes_per_unit`),
/// at least what usage was read, at least `default`, at most `max`. An
/// unreadable body: `max` (or `default`, if the rule says so). No response
/// headers at all (the client hung up first): the prompt, at least
/// `default` (or `max`, if the rule's `hang_up` says so).
pub fn amount(cost: &Cost, price: Option<&Price>, reported: &Reported, prompt_bytes: u64) -> u64 {
    let Cost::Response { default, max, unreadable, hang_up, bytes_per_unit, .. } = cost else { return 0 };
    let per_unit = (*bytes_per_unit).max(1);
    // Priced: the estimated units at the dearest field's price.
    let priced = |units: u64| price.map_or(units, |p| p.most(units));
    let prompt = prompt_bytes.div_ceil(per_unit);
    match reported {
        Reported::Found(n) => (*n).min(*max),
        Reported::Missing(d) => {
            let delivered = if d.event_stream { d.events } else { d.bytes.div_ceil(per_unit) };
            priced(prompt.saturating_add(delivered)).max(d.partial.unwrap_or(0)).max(*default).min(*max)
        }
        Reported::Unreadable(_) => match unreadable {
            Unreadable::Max => *max,
            Unreadable::Default => *default,
        },
        Reported::NoResponse => match hang_up {
            HangUp::Max => *max,
            HangUp::Default => priced(prompt).max(*default).min(*max),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::UsageFields;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn cost(unreadable: Unreadable) -> Cost {
        cost_of(unreadable, HangUp::Default)
    }

    fn cost_of(unreadable: Unreadable, hang_up: HangUp) -> Cost {
        let f = UsageFields::parse(&["usage.total_tokens"]).unwrap();
        Cost::Response {
            source: UsageSource::Body { json: Some(f.clone()), event_stream: Some(f) },
            default: 100,
            max: 10_000,
            reserve: 1,
            unreadable,
            hang_up,
            bytes_per_unit: 4,
            reservation: None,
            prices: None,
            include_usage: false,
        }
    }

    fn json(bytes: u64) -> Reported {
        Reported::Missing(Delivered { bytes, ..Delivered::default() })
    }

    #[test]
    #[wasm_bindgen_test]
    fn what_each_report_is_charged() {
        let c = cost(Unreadable::Max);
        let stream =
            |events, partial| Reported::Missing(Delivered { bytes: events * 200, events, event_stream: true, partial });
        let cases = [
            (Reported::Found(500), 500),
            (Reported::Found(99_999), 10_000),
            (json(0), 100),
            (json(2_000), 500),
            (json(2_001), 501),
            (json(1_000_000), 10_000),
            (stream(300, None), 300),
            (stream(10, None), 100),
            (stream(10, Some(700)), 700),
            (Reported::Unreadable("x".into()), 10_000),
        ];
        for (reported, want) in cases {
            assert_eq!(amount(&c, None, &reported, 0), want, "{reported:?}");
        }
        assert_eq!(amount(&cost(Unreadable::Default), None, &Reported::Unreadable("x".into()), 0), 100);
        assert_eq!(amount(&c, None, &Reported::NoResponse, 0), 100, "hung up before the headers: default");
        assert_eq!(amount(&cost_of(Unreadable::Default, HangUp::Max), None, &Reported::NoResponse, 0), 10_000);
        assert_eq!(amount(&Cost::Fixed(3), None, &Reported::Found(5), 0), 0, "a fixed cost is never charged after");
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_stream_without_a_usage_report_pays_its_prompt_and_what_it_was_delivered() {
        let c = cost(Unreadable::Max);
        let stream =
            |events| Reported::Missing(Delivered { bytes: events * 200, events, event_stream: true, partial: None });
        // A 4,000-byte prompt is 1,000 units at 4 bytes a unit.
        assert_eq!(amount(&c, None, &stream(1), 4_000), 1_001, "hung up after the first event");
        assert_eq!(amount(&c, None, &stream(10), 4_000), 1_010, "a stream that ended without its usage");
        assert_eq!(amount(&c, None, &json(4_000), 4_001), 1_001 + 1_000, "a JSON answer without usage");
        assert_eq!(amount(&c, None, &stream(10), 400_000), 10_000, "at most max");
        assert_eq!(amount(&c, None, &stream(10), 40), 100, "at least default");
        assert_eq!(amount(&c, None, &Reported::NoResponse, 4_000), 1_000, "gone before the headers: the prompt");
        assert_eq!(amount(&c, None, &Reported::Found(7), 4_000), 7, "a report is what is charged");
        let max = cost_of(Unreadable::Max, HangUp::Max);
        assert_eq!(amount(&max, None, &Reported::NoResponse, 40), 10_000, "hang_up max: max");
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_usage_header_is_digits_or_unreadable() {
        assert_eq!(parse_header(Some(b"42".to_vec())), Reported::Found(42));
        assert_eq!(parse_header(None), Reported::Missing(Delivered::default()));
        for bad in [&b"4x"[..], b"", b"-1", b" 42", b"99999999999999999999"] {
            assert_eq!(
                parse_header(Some(bad.to_vec())),
                Reported::Unreadable("the usage header is not an integer".into())
            );
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn an_upstreams_encoding_reaches_the_log_bounded_and_printable() {
        assert_eq!(printable(b"br"), "br");
        assert_eq!(printable(b"a\nb{c}"), "a?b?c?");
        assert_eq!(printable(&[b'x'; 40]), format!("{}...", "x".repeat(32)));
    }

    #[test]
    #[wasm_bindgen_test]
    fn decoders_are_counted_and_released() {
        let d = Decoders::default();
        let slots: Vec<DecoderTicket> = (0..MAX_DECODERS).map_while(|_| d.take()).collect();
        assert_eq!((slots.len(), d.running()), (MAX_DECODERS, MAX_DECODERS));
        assert!(d.take().is_none());
        drop(slots);
        assert_eq!(d.running(), 0);
    }
}
