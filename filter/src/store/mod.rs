//! Talking to the store: what a reply can be, and the transports' codecs.

pub mod flow;
pub mod resp;
pub mod stats;
pub mod webdis;

use std::fmt;

use crate::decision::Decision;

/// Why a store call gave no decision; the rule's failure policy applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// A non-200 HTTP status (Envoy reports connect failures as 503 and
    /// timeouts as 504).
    Status(u32),
    /// The call could not be started (unknown cluster, bad arguments).
    Dispatch,
    /// Redis answered with an error reply.
    Redis(String),
    /// The reply could not be decoded.
    Malformed(&'static str),
    /// The script was missing again right after it was loaded.
    ScriptMissing,
    /// The circuit breaker is open: no call was made.
    BreakerOpen,
    /// redis: the host reported a network error (connect, closed, timeout).
    Network,
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Status(s) => write!(f, "store answered HTTP {s}"),
            StoreError::Dispatch => write!(f, "store call could not be dispatched"),
            StoreError::Redis(e) => write!(f, "redis error: {e}"),
            StoreError::Malformed(what) => write!(f, "malformed store reply: {what}"),
            StoreError::ScriptMissing => write!(f, "script still missing after loading it"),
            StoreError::BreakerOpen => write!(f, "circuit breaker open"),
            StoreError::Network => write!(f, "redis connection failed or timed out"),
        }
    }
}

/// What a decision call returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// One decision per limit, in call order (the call's decisions one
    /// after the other).
    Decisions(Vec<Decision>),
    /// The script is not in the store's cache: load it and retry once.
    NoScript,
    /// redis: the connection lost its authentication: re-initialize once.
    NoAuth,
    /// webdis: the script was loaded.
    Loaded,
}

/// A call's decisions one after the other (for callers that make one
/// decision per call).
pub fn flatten(decisions: Vec<Vec<Decision>>) -> Vec<Decision> {
    let mut all = Vec::new();
    for mut d in decisions {
        all.append(&mut d);
    }
    all
}

/// A Redis error reply, bounded and made printable for logs.
pub fn redis_error(msg: &str) -> StoreError {
    let clean: String = msg.chars().take(200).map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' }).collect();
    StoreError::Redis(clean)
}
