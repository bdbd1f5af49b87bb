//! `rules[].cost`: what one request consumes, and when that is known.
//!
//! - an integer: the same for every request;
//! - `{"request_header": "x-request-cost", "max": N, "default": D}`: the
//!   caller says (trusted internal callers), parsed strictly, 1..=max;
//! - `{"response_header": "x-usage-tokens", ...}` or
//!   `{"response_body": "usage.total_tokens" | [paths], ...}` with
//!   `"default": D, "max": N, "reserve": R`: known only after the response
//!   (LLM token usage): checked at request time, charged afterwards; a body
//!   the filter cannot read is charged `max` (`"unreadable": "max"`, or
//!   `"default"`), a body without usage or cut short an estimate from
//!   what it delivered (`"bytes_per_unit"`), a stream that ended before
//!   the response headers `default` (`"hang_up": "default"`) or `max`.
//!   With `"reservation": {...}` (see `reservation`) the request's worst
//!   case is taken at admission instead of checked, and settled after.
//!   With `"include_usage": true` a streamed request that does not ask for
//!   its usage is made to, and its client's stream given back without it.

use super::error::ConfigError;
use super::json::{Obj, Result};
use super::prices::{self, Prices};
use super::reservation::{self, Reservation};
use super::rule::header_name;
use crate::json::Value;
use crate::usage::UsageFields;

/// Largest cost a request or a response may report.
pub const MAX_COST: u64 = 1_000_000_000;

/// Where the usage is read from once the response is there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UsageSource {
    /// A response header (lower-case name) holding an integer.
    Header(String),
    /// JSON field paths in the body, summed: in a JSON body, and in the
    /// events of a `text/event-stream` body (each may be absent: that
    /// format then reports no usage).
    Body {
        /// For a JSON body.
        json: Option<UsageFields>,
        /// For a `text/event-stream` body (per path, the last event wins).
        event_stream: Option<UsageFields>,
    },
}

/// What a response whose usage cannot be read is charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unreadable {
    /// `max`: a client can never pay less by making its answer unreadable.
    Max,
    /// `default`, as the rule asks.
    Default,
}

/// What a request is charged when its stream ends before the response
/// headers came: the client hung up (Envoy then resets the upstream, which
/// may have done, and billed, all its work by then).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HangUp {
    /// `default`: as a response that reported no usage.
    Default,
    /// `max`: hanging up never costs less than any answer could.
    Max,
}

/// Body bytes counted as one unit when a JSON body reports no usage or is
/// cut short, unless the rule says otherwise: about 4 bytes of English
/// text make one token of OpenAI's tokenizers, and a body is never less
/// than its text.
pub const BYTES_PER_UNIT: u64 = 4;

/// Where a rule's cost comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cost {
    /// The same for every request.
    Fixed(u64),
    /// A request header: 1..=`max`; `default` when absent.
    RequestHeader {
        /// Lower-case header name.
        name: String,
        /// Largest cost accepted.
        max: u64,
        /// Cost of a request without the header.
        default: u64,
    },
    /// Known after the response: checked at request time (at least
    /// `reserve` must remain), charged with the reported usage afterwards.
    Response {
        /// Where the usage comes from.
        source: UsageSource,
        /// Charged when the response reports no (or garbled) usage.
        default: u64,
        /// A larger reported usage is charged as this.
        max: u64,
        /// Units that must remain for a request to be let through.
        reserve: u64,
        /// What an unreadable body (or usage header) is charged.
        unreadable: Unreadable,
        /// What a stream that ended before the response headers is charged.
        hang_up: HangUp,
        /// JSON body bytes per unit of the estimate charged when no usage
        /// was read (see `worker::usage_watch`).
        bytes_per_unit: u64,
        /// Reserve the worst case at admission and settle after (instead
        /// of checking `reserve`).
        reservation: Option<Reservation>,
        /// What the usage costs per model (else: its sum).
        prices: Option<Prices>,
        /// A streamed request that does not ask for its usage is made to
        /// (`stream_options.include_usage`), and its client's stream is
        /// given back without it (`request::ask_for_usage`).
        include_usage: bool,
    },
}

impl Cost {
    /// The largest cost one request can consume at request time.
    pub fn max_at_request(&self) -> u64 {
        match self {
            Cost::Fixed(c) => *c,
            Cost::RequestHeader { max, .. } => *max,
            Cost::Response { reserve, .. } => *reserve,
        }
    }

    /// The largest amount one request can add to a limit in all.
    pub fn max_units(&self) -> u64 {
        match self {
            Cost::Fixed(c) => *c,
            Cost::RequestHeader { max, .. } | Cost::Response { max, .. } => *max,
        }
    }

    /// A text that differs whenever the cost's meaning does (for limit
    /// fingerprints: a changed cost never matches old cached denials).
    pub fn fingerprint_text(&self) -> String {
        match self {
            Cost::Fixed(c) => format!("fixed {c}"),
            Cost::RequestHeader { name, max, default } => format!("request {name} {max} {default}"),
            Cost::Response { source, default, max, reserve, reservation, prices, include_usage, .. } => {
                let from = match source {
                    UsageSource::Header(h) => format!("header {h}"),
                    UsageSource::Body { json, event_stream } => {
                        format!(
                            "body {} {}",
                            json.as_ref().map_or(0, UsageFields::len),
                            event_stream.as_ref().map_or(0, UsageFields::len)
                        )
                    }
                };
                let reserved = reservation.as_ref().map(Reservation::fingerprint_text).unwrap_or_default();
                let priced = prices.as_ref().map(Prices::fingerprint_text).unwrap_or_default();
                format!("response {from} {default} {max} {reserve} {reserved} {priced} {include_usage}")
            }
        }
    }

    /// Whether the cost is known only after the response.
    pub fn after_response(&self) -> bool {
        matches!(self, Cost::Response { .. })
    }

    /// The rule's price table, if its usage is priced.
    pub fn prices(&self) -> Option<&Prices> {
        match self {
            Cost::Response { prices, .. } => prices.as_ref(),
            _ => None,
        }
    }

    /// Whether a streamed request is made to ask for its usage.
    pub fn include_usage(&self) -> bool {
        matches!(self, Cost::Response { include_usage: true, .. })
    }

    /// How the request's worst case is reserved, in reservation mode.
    pub fn reservation(&self) -> Option<&Reservation> {
        match self {
            Cost::Response { reservation, .. } => reservation.as_ref(),
            _ => None,
        }
    }
}

/// One list of fields (a path, or an array whose items are paths, or
/// arrays of alternative paths: the first with a value counts).
fn fields(v: &Value, path: &str) -> Result<UsageFields> {
    let not_paths = || ConfigError::at(path, "must list JSON field paths as strings (or arrays of alternative paths)");
    let list: Vec<Vec<&str>> = match v {
        Value::String(s) => vec![vec![s.as_str()]],
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(vec![s.as_str()]),
                Value::Array(alts) => alts.iter().map(|a| a.as_str().ok_or_else(not_paths)).collect(),
                _ => Err(not_paths()),
            })
            .collect::<Result<_>>()?,
        _ => {
            return Err(ConfigError::at(
                path,
                "must be a JSON field path like \"usage.total_tokens\", or a list of them to sum",
            ))
        }
    };
    UsageFields::parse_alternatives(&list).map_err(|e| ConfigError::at(path, e))
}

/// `response_body`: paths for every body, or `{"json": ..., "event_stream": ...}`.
fn body_source(v: &Value, path: &str) -> Result<UsageSource> {
    if !matches!(v, Value::Object(_)) {
        let f = fields(v, path)?;
        return Ok(UsageSource::Body { json: Some(f.clone()), event_stream: Some(f) });
    }
    let o = Obj::new(v, path, &["json", "event_stream"])?;
    let json = o.value("json").map(|v| fields(v, &o.path_of("json"))).transpose()?;
    let event_stream = o.value("event_stream").map(|v| fields(v, &o.path_of("event_stream"))).transpose()?;
    if json.is_none() && event_stream.is_none() {
        return Err(ConfigError::at(path, "must name the fields of a json body, of an event_stream body, or both"));
    }
    Ok(UsageSource::Body { json, event_stream })
}

/// Parses `rules[i].cost`.
pub fn parse_cost(v: Option<&Value>, path: &str) -> Result<Cost> {
    let Some(v) = v else { return Ok(Cost::Fixed(1)) };
    if !matches!(v, Value::Object(_)) {
        return super::json::uint(v, path, 1, 1_000_000).map(Cost::Fixed);
    }
    let o = Obj::new(
        v,
        path,
        &[
            "request_header",
            "response_header",
            "response_body",
            "max",
            "default",
            "reserve",
            "unreadable",
            "hang_up",
            "bytes_per_unit",
            "reservation",
            "prices",
            "include_usage",
        ],
    )?;
    let sources = ["request_header", "response_header", "response_body"];
    let given: Vec<&str> = sources.iter().copied().filter(|f| o.value(f).is_some()).collect();
    let [source] = given.as_slice() else {
        return Err(ConfigError::at(
            path,
            "must name exactly one of request_header, response_header, response_body (or be an integer)",
        ));
    };
    let max = o.uint("max", 1, MAX_COST)?.unwrap_or(1_000_000);
    match *source {
        "request_header" => request_header_cost(&o, max),
        "response_header" => response_cost(&o, UsageSource::Header(header(&o, "response_header")?), max),
        _ => {
            let body = body_source(o.value("response_body").unwrap_or(&Value::Null), &o.path_of("response_body"))?;
            response_cost(&o, body, max)
        }
    }
}

/// A header name the cost names in `field` (no pseudo-header).
fn header(o: &Obj<'_>, field: &str) -> Result<String> {
    let name = o.required_str(field)?;
    header_name(name)
        .filter(|n| !n.starts_with(':'))
        .ok_or_else(|| ConfigError::at(&o.path_of(field), "is not a valid header name"))
}

/// A cost the caller names in a request header.
fn request_header_cost(o: &Obj<'_>, max: u64) -> Result<Cost> {
    if let Some(field) =
        ["reserve", "unreadable", "hang_up", "bytes_per_unit", "reservation", "prices", "include_usage"]
            .into_iter()
            .find(|f| o.value(f).is_some())
    {
        return Err(ConfigError::at(&o.path_of(field), "applies to a cost known after the response only"));
    }
    let default = o.uint("default", 1, MAX_COST)?.unwrap_or(1);
    if default > max {
        return Err(ConfigError::at(&o.path_of("default"), format!("must be at most max ({max})")));
    }
    Ok(Cost::RequestHeader { name: header(o, "request_header")?, max, default })
}

/// A cost known after the response, read from `source`.
fn response_cost(o: &Obj<'_>, source: UsageSource, max: u64) -> Result<Cost> {
    let default = o.uint("default", 0, MAX_COST)?.ok_or_else(|| {
        ConfigError::at(&o.path_of("default"), "is required: what to charge when the response reports no usage")
    })?;
    if default > max {
        return Err(ConfigError::at(&o.path_of("default"), format!("must be at most max ({max})")));
    }
    let reserve = o.uint("reserve", 1, MAX_COST)?.unwrap_or(1);
    let unreadable = match o.str("unreadable")? {
        None | Some("max") => Unreadable::Max,
        Some("default") => Unreadable::Default,
        Some(_) => return Err(ConfigError::at(&o.path_of("unreadable"), "must be \"max\" or \"default\"")),
    };
    let hang_up = match o.str("hang_up")? {
        None | Some("default") => HangUp::Default,
        Some("max") => HangUp::Max,
        Some(_) => return Err(ConfigError::at(&o.path_of("hang_up"), "must be \"default\" or \"max\"")),
    };
    if matches!(source, UsageSource::Header(_)) && o.value("bytes_per_unit").is_some() {
        return Err(ConfigError::at(&o.path_of("bytes_per_unit"), "applies to a response_body cost only"));
    }
    let bytes_per_unit = o.uint("bytes_per_unit", 1, 1_000_000)?.unwrap_or(BYTES_PER_UNIT);
    let reservation = match o.value("reservation") {
        None => None,
        Some(_) if o.value("reserve").is_some() => {
            return Err(ConfigError::at(
                &o.path_of("reserve"),
                "applies to the check-then-charge mode only: a reservation takes the request's worst case",
            ))
        }
        Some(v) => Some(reservation::parse(v, &o.path_of("reservation"), max)?),
    };
    let prices = response_prices(o, &source)?;
    let include_usage = o.bool("include_usage")?.unwrap_or(false);
    if include_usage && !matches!(source, UsageSource::Body { event_stream: Some(_), .. }) {
        return Err(ConfigError::at(
            &o.path_of("include_usage"),
            "applies to a response_body cost read from event streams only",
        ));
    }
    Ok(Cost::Response {
        source,
        default,
        max,
        reserve,
        unreadable,
        hang_up,
        bytes_per_unit,
        reservation,
        prices,
        include_usage,
    })
}

/// `prices`, for a cost read from `source`.
fn response_prices(o: &Obj<'_>, source: &UsageSource) -> Result<Option<Prices>> {
    match (o.value("prices"), source) {
        (None, _) => Ok(None),
        (Some(_), UsageSource::Body { json, event_stream })
            if [json, event_stream].iter().any(|f| f.as_ref().is_some_and(UsageFields::has_alternatives)) =>
        {
            Err(ConfigError::at(
                &o.path_of("prices"),
                "weighs each field's one path: a field with alternative paths cannot be priced",
            ))
        }
        (Some(v), UsageSource::Body { json, event_stream }) => {
            Ok(Some(prices::parse(v, &o.path_of("prices"), json.as_ref(), event_stream.as_ref())?))
        }
        (Some(_), UsageSource::Header(_)) => {
            Err(ConfigError::at(&o.path_of("prices"), "applies to a response_body cost only"))
        }
    }
}
