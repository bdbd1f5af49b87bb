//! A charge waiting for the response to say what it costs: the usage
//! header, or the body read as it passes.

use crate::config::{Config, Cost, UsageSource};
use crate::pipeline::Charge;
use crate::usage::{BodyFormat, Usage, UsageReader};

/// Body bytes a usage reader looks at most; past this the default is
/// charged (the body still passes, unread).
pub const MAX_USAGE_BODY: u64 = 64 * 1024 * 1024;

/// What the response side can tell.
pub trait ResponseSource {
    /// The first value of response header `name`, as bytes.
    fn header(&self, name: &str) -> Option<Vec<u8>>;
}

/// One rule's charge, waiting for its usage.
#[derive(Debug)]
pub struct UsageWatch {
    /// What to charge once the usage is known.
    pub charge: Charge,
    /// The body reader, once the response headers named the format.
    reader: Option<UsageReader>,
}

impl UsageWatch {
    /// A watch for `charge`.
    pub fn new(charge: Charge) -> UsageWatch {
        UsageWatch { charge, reader: None }
    }

    /// Whether it still reads the body.
    pub fn reads_body(&self) -> bool {
        self.reader.is_some()
    }

    /// The response headers arrived: the amount to charge now (header
    /// source, or a body that will not come), or `None` when the body must
    /// be read first.
    pub fn on_headers<R: ResponseSource + ?Sized>(
        &mut self,
        config: &Config,
        response: &R,
        end_of_stream: bool,
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
        // No fields for this format: it reports no usage.
        let Some(fields) = fields else { return Some(Reported::Missing) };
        let mut reader = UsageReader::new(fields, format, MAX_USAGE_BODY);
        if end_of_stream {
            return Some(Reported::from(reader.finish()));
        }
        self.reader = Some(reader);
        None
    }

    /// A body chunk passed; the amount once the body ended.
    pub fn on_body(&mut self, chunk: &[u8], end_of_stream: bool) -> Option<Reported> {
        let reader = self.reader.as_mut()?;
        reader.feed(chunk);
        end_of_stream.then(|| Reported::from(reader.finish()))
    }
}

/// What the response reported for one charge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reported {
    /// This usage.
    Found(u64),
    /// No usage, or none that can be read: the default is charged.
    Missing,
}

impl From<Usage> for Reported {
    fn from(u: Usage) -> Reported {
        match u {
            Usage::Found(n) => Reported::Found(n),
            _ => Reported::Missing,
        }
    }
}

/// A usage header's value: digits only.
fn parse_header(value: Option<Vec<u8>>) -> Reported {
    match value {
        Some(v) if !v.is_empty() && v.len() <= 19 && v.iter().all(u8::is_ascii_digit) => {
            std::str::from_utf8(&v).ok().and_then(|s| s.parse().ok()).map_or(Reported::Missing, Reported::Found)
        }
        _ => Reported::Missing,
    }
}

/// The amount to charge for `reported` under a rule's cost.
pub fn amount(cost: &Cost, reported: Reported) -> u64 {
    match (cost, reported) {
        (Cost::Response { max, .. }, Reported::Found(n)) => n.min(*max),
        (Cost::Response { default, .. }, Reported::Missing) => *default,
        _ => 0,
    }
}
