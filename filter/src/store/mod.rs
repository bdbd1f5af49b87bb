//! Talking to the store: what a reply can be, and the transports' codecs.

pub mod batcher;
pub mod flow;
pub mod override_index;
pub mod resp;
pub mod script_call;
pub mod stats;
pub mod transport;
pub mod webdis;

use std::fmt;

pub use transport::Transport;

use crate::store::script_call::ScriptReply;

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
    /// The host never answered within the call's timeout (and a grace).
    Unanswered,
    /// Too many decisions are already waiting on this worker.
    Overloaded,
    /// Not a store failure: the request's headers could not be read whole,
    /// so its rules apply through their failure policies.
    RequestUnreadable,
}

impl StoreError {
    /// Whether the script may have run all the same: the call went out and
    /// its answer was lost (a timeout, a broken connection, an HTTP error
    /// status from a proxy on the way, a reply that could not be read). A
    /// concurrency permit such a decision asked for may be held in the store.
    pub fn may_have_run(&self) -> bool {
        matches!(self, StoreError::Status(_) | StoreError::Malformed(_) | StoreError::Network | StoreError::Unanswered)
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Status(403) => write!(
                f,
                "store answered HTTP 403: webdis's ACL refused the call (check store.username and store.password)"
            ),
            StoreError::Status(s) => write!(f, "store answered HTTP {s}"),
            StoreError::Dispatch => write!(f, "store call could not be dispatched"),
            StoreError::Redis(e) => write!(f, "redis error: {e}"),
            StoreError::Malformed(what) => write!(f, "malformed store reply: {what}"),
            StoreError::ScriptMissing => write!(f, "script still missing after loading it"),
            StoreError::BreakerOpen => write!(f, "circuit breaker open"),
            StoreError::Network => write!(f, "redis connection failed or timed out"),
            StoreError::Unanswered => write!(f, "the host never answered the store call"),
            StoreError::Overloaded => write!(f, "too many decisions waiting for the store on this worker"),
            StoreError::RequestUnreadable => write!(f, "the request's headers could not be read whole"),
        }
    }
}

/// What a store call returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The script's values (see `script_call::ScriptCall::decode`).
    Values(ScriptReply),
    /// The script is not in the store's cache: load it and retry once.
    NoScript,
    /// redis: the connection lost its authentication: re-initialize once.
    NoAuth,
    /// webdis: the script was loaded.
    Loaded,
}

/// A Redis error reply, bounded and made printable for logs. An error
/// raised at a line of the script (`user_script:<line>`) is followed by
/// that line's file and line in `lua/`.
pub fn redis_error(msg: &str) -> StoreError {
    let mut clean: String =
        msg.chars().take(200).map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' }).collect();
    if let Some(source) = crate::script::source_of_error(msg) {
        clean.push_str(" [");
        clean.push_str(&source);
        clean.push(']');
    }
    StoreError::Redis(clean)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn a_redis_error_is_bounded_printable_and_names_its_line_of_lua() {
        assert_eq!(redis_error("ERR bad\r\nthing"), StoreError::Redis("ERR bad??thing".into()));
        assert_eq!(redis_error(&"x".repeat(300)), StoreError::Redis("x".repeat(200)));
        let (file, line) = crate::script::source_of(7).unwrap();
        let raised = "READONLY You can't write against a read only replica. script: 0123, on @user_script:7.";
        assert_eq!(redis_error(raised), StoreError::Redis(format!("{raised} [lua/{file}:{line}]")));
    }
}
