//! A pinned host (NGINX) that did not hold a paused request. Without
//! `proxy_wasm_request_headers_in_access on;`, ngx_wasm_module runs
//! `proxy_on_request_headers` in NGINX's rewrite phase, where a pause is
//! not kept: the client connection's write event runs the phases on, and
//! the request goes to its content handler (the upstream) before its
//! decision. Its store call then outlives it (a use-after-free that
//! crashed the worker process), or the answer runs the content handler a
//! second time. Nothing the filter can read tells that phase apart before
//! it pauses, so the guard watches for the first request let through:
//! its response starts while its decision is still out, or it went to
//! the upstream (`$upstream_addr` changed) before its decision came.
//! From then on the plugin never pauses again: every request is answered
//! 503, the reason logged once, and the other worker processes learn it
//! from shared data (which NGINX empties when it reloads).

use std::cell::{Cell, RefCell};

use super::abi;
use crate::id_map::IdMap;

/// The one line logged when the plugin stops deciding.
const REFUSED: &str = "ratelimit: refused: NGINX let a request through before its decision: add \"proxy_wasm_request_headers_in_access on;\" next to proxy_wasm; every request gets 503 until NGINX reloads";

/// The paused requests of one plugin on a pinned host, and whether it
/// refuses.
#[derive(Debug, Default)]
pub struct PauseGuard {
    /// The shared-data key saying a request was let through (in the
    /// plugin's scope: its worker processes share it).
    key: String,
    /// Streams paused for their decision: the length of NGINX's
    /// `$upstream_addr` then (it only grows, by each upstream tried).
    waiting: RefCell<IdMap<u32, u32>>,
    /// The stream last resumed or answered (0: none since `paused` read it).
    decided: Cell<u32>,
    /// A stream was found let through during the running callback.
    let_through: Cell<bool>,
    /// Every request is answered 503.
    refused: Cell<bool>,
}

/// How far the request went upstream: the length of NGINX's
/// `$upstream_addr` (0 before any upstream).
#[inline(never)]
fn upstream() -> u32 {
    let addr = abi::property(&["ngx", "upstream_addr"]).ok().flatten();
    addr.map_or(0, |a| u32::try_from(a.len()).unwrap_or(u32::MAX))
}

impl PauseGuard {
    /// The guard of a plugin whose shared-data keys end with `scope`.
    pub fn new(scope: &str) -> PauseGuard {
        PauseGuard { key: ["host:let_through", scope].concat(), ..PauseGuard::default() }
    }

    /// Stream `stream`'s headers callback returns a pause: it waits for
    /// its decision unless it was answered in that callback.
    pub fn paused(&self, stream: u32) {
        if self.decided.replace(0) != stream {
            self.waiting.borrow_mut().insert(stream, upstream());
        }
    }

    /// Stream `stream`'s decision is to be carried out: false when the
    /// host let it through meanwhile (it went upstream since it paused),
    /// which is then not to be resumed or answered.
    pub fn deciding(&self, stream: u32) -> bool {
        self.decided.set(stream);
        let Some(then) = self.take(stream) else { return true };
        if upstream() == then {
            return true;
        }
        self.let_through.set(true);
        false
    }

    /// Stream `stream`'s response starts: true when its decision is still
    /// out (the host let it through), which the caller then forgets.
    pub fn responding(&self, stream: u32) -> bool {
        let undecided = self.take(stream).is_some();
        if undecided {
            self.let_through.set(true);
        }
        undecided
    }

    /// Stream `stream` ended.
    pub fn ended(&self, stream: u32) {
        self.take(stream);
    }

    /// Stream `stream`'s entry, removed (one copy of the map's code: the
    /// module is near its size bound).
    #[inline(never)]
    fn take(&self, stream: u32) -> Option<u32> {
        self.waiting.borrow_mut().remove(&stream)
    }

    /// Whether every request is answered 503.
    pub fn refused(&self) -> bool {
        self.refused.get()
    }

    /// After a callback: a request let through in it makes every worker
    /// process of this plugin refuse; one that another process found, too.
    #[inline(never)]
    pub fn settle(&self) {
        if self.let_through.replace(false) {
            let _ = abi::shared_set(&self.key, b"1", 0);
        } else if self.refused.get() || !matches!(abi::shared_get(&self.key), Ok(Some(_))) {
            return;
        }
        if !self.refused.replace(true) {
            abi::log(abi::LOG_ERROR, REFUSED);
        }
    }
}
