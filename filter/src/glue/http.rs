//! One HTTP stream: runs the pipeline, makes its store calls through
//! webdis, and applies the outcome.

use std::rc::Rc;
use std::time::Duration;

use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;

use super::host::{now_ms, HostRequest, HostShared};
use super::root::Plugin;
use crate::decision::Decision;
use crate::pipeline::{begin, Env, Outcome, Pending, Start};
use crate::response::{Headers, LocalReply};
use crate::store::webdis::{self, WebdisRequest};
use crate::store::{Reply, StoreError};

/// Where one store call is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The first EVALSHA.
    Evalsha,
    /// NOSCRIPT came back: loading the script.
    Loading,
    /// The EVALSHA after loading; a second NOSCRIPT is an error.
    Retry,
}

struct InFlight {
    token: u32,
    call: usize,
    stage: Stage,
    started_ms: u64,
}

/// The HTTP context.
pub struct Http {
    plugin: Option<Rc<Plugin>>,
    pending: Option<Pending>,
    in_flight: Vec<InFlight>,
    response_headers: Headers,
}

impl Http {
    /// A stream under `plugin` (none if the configuration was refused).
    pub fn new(plugin: Option<Rc<Plugin>>) -> Http {
        Http { plugin, pending: None, in_flight: Vec::new(), response_headers: Vec::new() }
    }

    fn dispatch(&self, plugin: &Plugin, req: &WebdisRequest) -> Result<u32, StoreError> {
        let store = &plugin.config.store;
        plugin.metrics.store_call();
        self.dispatch_http_call(
            &store.cluster,
            vec![(":method", req.method), (":path", req.path), (":authority", &store.authority)],
            Some(&req.body),
            vec![],
            Duration::from_millis(store.timeout_ms),
        )
        .map_err(|_| StoreError::Dispatch)
    }

    /// Sends a local reply.
    fn reply(&self, r: &LocalReply) {
        let headers: Vec<(&str, &str)> = r.headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        self.send_http_response(r.status, headers, Some(r.body.as_bytes()));
    }

    fn apply(&mut self, outcome: Outcome, resume: bool) -> Action {
        self.pending = None;
        match outcome {
            Outcome::Continue(headers) => {
                self.response_headers = headers;
                if resume {
                    self.resume_http_request();
                }
                Action::Continue
            }
            Outcome::Reply(r) => {
                self.reply(&r);
                Action::Pause
            }
        }
    }

    /// Feeds call `call`'s result to the pipeline; the outcome once it was
    /// the last one.
    fn finish_call(
        &mut self,
        plugin: &Plugin,
        call: usize,
        result: Result<Vec<Decision>, StoreError>,
    ) -> Option<Outcome> {
        if let Err(e) = &result {
            if plugin.metrics.should_log_error() {
                log::warn!("ratelimit: {e} (store errors on this worker: {})", plugin.metrics.errors_seen.get());
            }
        }
        let env = Env { config: &plugin.config, shared: &HostShared, metrics: &plugin.metrics };
        self.pending.as_mut().and_then(|p| p.on_reply(&env, call, result, now_ms()))
    }

    fn handle_response(&mut self, plugin: &Plugin, flight: InFlight, body_size: usize) {
        let status = self.get_http_call_response_header(":status").and_then(|s| s.parse::<u32>().ok());
        let body = self.get_http_call_response_body(0, body_size).unwrap_or_default();
        let limits = self.pending.as_ref().and_then(|p| p.calls.get(flight.call)).map_or(0, |c| c.limit_count());
        let next = match flight.stage {
            Stage::Evalsha | Stage::Retry => match webdis::decode_evalsha(status, &body, limits) {
                Ok(Reply::Decisions(d)) => Err(Ok(d)),
                Ok(Reply::NoScript) if flight.stage == Stage::Evalsha => Ok((Stage::Loading, webdis::script_load())),
                Ok(Reply::NoScript) => Err(Err(StoreError::ScriptMissing)),
                Err(e) => Err(Err(e)),
            },
            Stage::Loading => match webdis::decode_script_load(status, &body) {
                Ok(()) => match self.pending.as_ref().and_then(|p| p.calls.get(flight.call)) {
                    Some(c) => Ok((Stage::Retry, webdis::evalsha(&c.script))),
                    None => return,
                },
                Err(e) => Err(Err(e)),
            },
        };
        let outcome = match next {
            Ok((stage, req)) => match self.dispatch(plugin, &req) {
                Ok(token) => {
                    self.in_flight.push(InFlight { token, call: flight.call, stage, ..flight });
                    None
                }
                Err(e) => self.finish_call(plugin, flight.call, Err(e)),
            },
            Err(result) => {
                plugin.metrics.latency(now_ms().saturating_sub(flight.started_ms));
                self.finish_call(plugin, flight.call, result)
            }
        };
        if let Some(outcome) = outcome {
            self.apply(outcome, true);
        }
    }
}

impl Context for Http {
    fn on_http_call_response(&mut self, token: u32, _headers: usize, body_size: usize, _trailers: usize) {
        let Some(at) = self.in_flight.iter().position(|f| f.token == token) else { return };
        let flight = self.in_flight.swap_remove(at);
        let Some(plugin) = self.plugin.clone() else { return };
        self.handle_response(&plugin, flight, body_size);
    }
}

impl HttpContext for Http {
    fn on_http_request_headers(&mut self, _headers: usize, _end_of_stream: bool) -> Action {
        let Some(plugin) = self.plugin.clone() else { return Action::Continue };
        let env = Env { config: &plugin.config, shared: &HostShared, metrics: &plugin.metrics };
        let now = now_ms();
        match begin(&env, &HostRequest, now) {
            Start::Done(outcome) => self.apply(outcome, false),
            Start::Wait(pending) => {
                let requests: Vec<WebdisRequest> = pending.calls.iter().map(|c| webdis::evalsha(&c.script)).collect();
                self.pending = Some(pending);
                let mut outcome = None;
                for (call, req) in requests.iter().enumerate() {
                    match self.dispatch(&plugin, req) {
                        Ok(token) => {
                            self.in_flight.push(InFlight { token, call, stage: Stage::Evalsha, started_ms: now })
                        }
                        Err(e) => outcome = outcome.or(self.finish_call(&plugin, call, Err(e))),
                    }
                }
                // Only when no call could even start is the outcome known now.
                match outcome {
                    Some(o) => self.apply(o, false),
                    None => Action::Pause,
                }
            }
        }
    }

    fn on_http_response_headers(&mut self, _headers: usize, _end_of_stream: bool) -> Action {
        for (name, value) in std::mem::take(&mut self.response_headers) {
            self.add_http_response_header(name, &value);
        }
        Action::Continue
    }
}
