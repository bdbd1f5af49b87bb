//! One request's evaluation and its store calls in flight. Shared between
//! the HTTP context and, for the redis transport, the root-level callback
//! (which finds it through a weak reference: a stream that is gone simply
//! drops its late replies).

use std::cell::RefCell;
use std::rc::Rc;

use proxy_wasm::hostcalls;
use proxy_wasm::types::Action;

use super::host::{now_ms, HostRequest, HostShared};
use super::root::Plugin;
use crate::call::ScriptCall;
use crate::config::Transport;
use crate::decision::Decision;
use crate::pipeline::{begin, Env, Outcome, Pending, Start};
use crate::response::Headers;
use crate::store::flow::{self, Message, Stage, Step};
use crate::store::{Reply, StoreError};

/// A stream, shared by the HTTP context and the redis callback registry.
pub type Shared = Rc<RefCell<Stream>>;

struct Flight {
    token: u32,
    call: usize,
    stage: Stage,
    started_ms: u64,
}

/// The state of one request.
pub struct Stream {
    /// The HTTP context id (the redis callback switches back to it).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub id: u32,
    /// The configuration it runs under.
    pub plugin: Rc<Plugin>,
    pending: Option<Pending>,
    flights: Vec<Flight>,
    headers: Headers,
}

impl Stream {
    /// A new stream for context `id`.
    pub fn new(id: u32, plugin: Rc<Plugin>) -> Shared {
        Rc::new(RefCell::new(Stream { id, plugin, pending: None, flights: Vec::new(), headers: Vec::new() }))
    }
}

/// Runs the request through the pipeline and starts its store calls.
pub fn start(shared: &Shared) -> Action {
    let plugin = shared.borrow().plugin.clone();
    let env = Env { config: &plugin.config, shared: &HostShared, metrics: &plugin.metrics };
    match begin(&env, &HostRequest, now_ms) {
        Start::Done(outcome) => apply(shared, outcome, false),
        Start::Wait(pending) => {
            let waiting: Vec<usize> = (0..pending.calls.len()).filter(|&c| pending.calls[c].is_waiting()).collect();
            shared.borrow_mut().pending = Some(pending);
            let mut outcome = None;
            let now = now_ms();
            for call in waiting {
                outcome = outcome.or(send(shared, call, Stage::First, Message::Evalsha, false, now));
            }
            // Only when no call could even start is the outcome known now.
            match outcome {
                Some(o) => apply(shared, o, false),
                None => Action::Pause,
            }
        }
    }
}

/// Sends `message` for call `call`; a call that cannot start is a store
/// error at once (the outcome, if that was the last call).
fn send(
    shared: &Shared,
    call: usize,
    stage: Stage,
    message: Message,
    reinit: bool,
    started_ms: u64,
) -> Option<Outcome> {
    let sent = {
        let s = shared.borrow();
        let script = s.pending.as_ref().and_then(|p| p.calls.get(call)).map(|c| &c.script)?;
        s.plugin.metrics.store_call();
        dispatch(shared, &s.plugin, script, message, reinit)
    };
    match sent {
        Ok(token) => {
            shared.borrow_mut().flights.push(Flight { token, call, stage, started_ms });
            None
        }
        Err(e) => finish_call(shared, call, Err(e)),
    }
}

fn dispatch(
    shared: &Shared,
    plugin: &Plugin,
    script: &ScriptCall,
    message: Message,
    reinit: bool,
) -> Result<u32, StoreError> {
    match plugin.config.store.transport {
        Transport::Webdis => super::webdis::send(plugin, script, message),
        #[cfg(feature = "redis")]
        Transport::Redis => super::redis::send(shared, plugin, script, message, reinit),
        #[cfg(not(feature = "redis"))]
        Transport::Redis => {
            let _ = (shared, reinit);
            Err(StoreError::Dispatch)
        }
    }
}

/// Takes the reply to `token`: `decode` turns the raw reply into a `Reply`
/// given the call's stage and the call it answers.
pub fn on_reply(shared: &Shared, token: u32, decode: impl FnOnce(Stage, &ScriptCall) -> Result<Reply, StoreError>) {
    let (flight, reply, transport) = {
        let mut s = shared.borrow_mut();
        let Some(at) = s.flights.iter().position(|f| f.token == token) else { return };
        let flight = s.flights.swap_remove(at);
        let reply = match s.pending.as_ref().and_then(|p| p.calls.get(flight.call)) {
            Some(c) => decode(flight.stage, &c.script),
            None => Err(StoreError::Malformed("a reply for no call")),
        };
        (flight, reply, s.plugin.config.store.transport)
    };
    let outcome = match flow::next(transport, flight.stage, reply) {
        Step::Send { stage, message, reinit } => send(shared, flight.call, stage, message, reinit, flight.started_ms),
        Step::Done(result) => {
            shared.borrow().plugin.metrics.latency(now_ms().saturating_sub(flight.started_ms));
            finish_call(shared, flight.call, result)
        }
    };
    if let Some(o) = outcome {
        apply(shared, o, true);
    }
}

/// Feeds call `call`'s result to the pipeline; the outcome once it was the last.
fn finish_call(shared: &Shared, call: usize, result: Result<Vec<Decision>, StoreError>) -> Option<Outcome> {
    let mut s = shared.borrow_mut();
    let plugin = s.plugin.clone();
    if let Err(e) = &result {
        if plugin.metrics.should_log_error() {
            log::warn!("ratelimit: {e} (store errors on this worker: {})", plugin.metrics.errors_seen.get());
        }
    }
    let env = Env { config: &plugin.config, shared: &HostShared, metrics: &plugin.metrics };
    s.pending.as_mut()?.on_reply(&env, call, result, now_ms())
}

/// Carries out the outcome. No borrow is held across the hostcalls: Envoy
/// runs the encoder path of a local reply (our response callback included)
/// synchronously.
fn apply(shared: &Shared, outcome: Outcome, resume: bool) -> Action {
    shared.borrow_mut().pending = None;
    match outcome {
        Outcome::Continue(headers) => {
            shared.borrow_mut().headers = headers;
            if resume {
                let _ = hostcalls::resume_http_request();
            }
            Action::Continue
        }
        Outcome::Reply(r) => {
            let headers: Vec<(&str, &str)> = r.headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let _ = hostcalls::send_http_response(r.status, headers, Some(r.body.as_bytes()));
            Action::Pause
        }
    }
}

/// The headers to add to the response (once).
pub fn take_response_headers(shared: &Shared) -> Headers {
    shared.try_borrow_mut().map(|mut s| std::mem::take(&mut s.headers)).unwrap_or_default()
}
