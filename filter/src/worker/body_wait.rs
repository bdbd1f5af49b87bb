//! Requests that wait for their body: a rule that applies by the headers
//! reads the body (`body:` key parts, `match.body`), so the request's
//! decision waits until the body is whole, past its bound, or too late.
//! The host buffers the body meanwhile; the worker keeps only its bound
//! and deadline, and reads it once, when it is complete.

use super::access_log;
use super::stream::{Phase, Stream};
use super::{Action, Callback, Host, Worker, MIN_TICK_MS};
use crate::config::Config;
use crate::metrics::Event;
use crate::pipeline::{body_timeout, Decided, DecidedBy, Trace};
use crate::request::{Body, Request, RequestSource};
use crate::response::{refused, LocalReply};
use crate::time::Instant;

/// How often a line about bodies that never came may be logged per worker.
const TIMEOUT_LOG_INTERVAL_MS: u64 = 10_000;

/// What the host does with a chunk of the request body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyAction {
    /// Let it (and the request, if its headers were held) through now.
    Continue,
    /// Keep it, with what came before, until the worker resumes or
    /// answers the request.
    Buffer,
    /// Keep it under flow control (the host stops reading past its buffer
    /// limit, never answers 413): the request's decision waits for the
    /// store, not for its body.
    Hold,
}

/// A request waiting for its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyWait {
    /// The first rule that reads it (named in the 408).
    rule: usize,
    /// The most bytes any of its rules reads: past them, none reads it.
    max_bytes: u64,
    /// The shortest timeout of its rules, and when it ends.
    timeout_ms: u64,
    deadline: Instant,
    /// Whether any of the body arrived.
    seen: bool,
}

/// The shortest timer period waiting bodies need: a tenth of the shortest
/// `request_body.timeout` (a 408 comes at most that late).
pub fn body_tick_ms(config: &Config) -> Option<u64> {
    let shortest = config.rules.iter().filter_map(|r| r.request_body).map(|b| b.timeout_ms).min()?;
    Some((shortest / 10).max(MIN_TICK_MS))
}

impl Worker {
    /// What `req`'s decision must wait for, when a rule that applies by its
    /// headers reads its body.
    pub(super) fn body_wait<R: RequestSource + ?Sized>(&self, req: &Request<'_, R>, now: Instant) -> Option<BodyWait> {
        let mut wait: Option<BodyWait> = None;
        for (r, rule) in self.config.rules.iter().enumerate() {
            let Some(b) = rule.request_body else { continue };
            if !rule.matcher.matches_headers(req) {
                continue;
            }
            let deadline = now.after(b.timeout_ms);
            wait = Some(match wait {
                None => BodyWait { rule: r, max_bytes: b.max_bytes, timeout_ms: b.timeout_ms, deadline, seen: false },
                Some(w) => BodyWait {
                    max_bytes: w.max_bytes.max(b.max_bytes),
                    timeout_ms: w.timeout_ms.min(b.timeout_ms),
                    deadline: w.deadline.min(deadline),
                    ..w
                },
            });
        }
        wait
    }

    /// On a host that ignores `proxy_set_effective_context` (NGINX's
    /// ngx_wasm_module), the 501 of a request a rule reading the body
    /// applies to: that host did not hand the body to the filter while the
    /// headers waited, and a request can be answered only from its own
    /// callbacks (a timeout on the timer cannot answer it).
    pub(super) fn body_unsupported<H: Host, R: RequestSource + ?Sized>(
        &self,
        host: &H,
        req: &Request<'_, R>,
    ) -> Option<LocalReply> {
        let wait = self.body_wait(req, Instant::default())?;
        let rule = self.config.rules.get(wait.rule)?;
        host.count(wait.rule, Event::BadRequest);
        let detail = "this host does not hand the request body to the filter: rules reading it refuse the requests they apply to";
        Some(refused(501, "request_body_unsupported", &rule.name, detail))
    }

    /// A chunk of stream `stream`'s request body arrived: `size` bytes of
    /// it so far, `read` hands over that many. Decided once the body is
    /// whole or past every rule's bound (then not read at all).
    pub fn on_request_body<H: Host, R: RequestSource + ?Sized>(
        &mut self,
        host: &H,
        stream: u32,
        request: &R,
        size: u64,
        end_of_stream: bool,
        read: impl FnOnce(u64) -> Option<Vec<u8>>,
    ) -> BodyAction {
        let Some(state) = self.streams.get_mut(&stream) else { return BodyAction::Continue };
        let Phase::Body(wait) = &mut state.phase else {
            // A body not read whole passes a chunk at a time (`size`: this
            // one), counted for the prompt a charge may have to estimate.
            state.request_bytes = state.request_bytes.saturating_add(size);
            // A host that delivers the body while the headers wait (Envoy
            // with allow_on_headers_stop_iteration) would let them go on a
            // Continue: never before the decision.
            return if state.deciding() { BodyAction::Hold } else { BodyAction::Continue };
        };
        wait.seen = true;
        let max_bytes = wait.max_bytes;
        if size <= max_bytes && !end_of_stream {
            return BodyAction::Buffer;
        }
        self.take_body_wait(stream);
        let bytes = if size > max_bytes { None } else { read(size) };
        let body = match &bytes {
            _ if size > max_bytes => Body::TooLarge { len: size },
            Some(b) => Body::of(b),
            None => Body::Unreadable,
        };
        match self.decide_with_body(host, stream, request, &body, bytes.as_deref()) {
            Action::Continue => BodyAction::Continue,
            Action::Pause => BodyAction::Buffer,
        }
    }

    /// Stream `stream`'s request trailers arrived: its body, if any, is
    /// whole (the last chunk came without `end_of_stream`). A request
    /// waiting for its body is decided now (`read(n)` hands over at most
    /// `n` bytes of what the host buffered, empty when none came); one
    /// whose decision is out stays held: a Continue here lets a paused
    /// stream go (Envoy resumes it), decided or not.
    pub fn on_request_trailers<H: Host, R: RequestSource + ?Sized>(
        &mut self,
        host: &H,
        stream: u32,
        request: &R,
        read: impl FnOnce(u64) -> Option<Vec<u8>>,
    ) -> Action {
        let Some(wait) = self.take_body_wait(stream) else {
            let deciding = self.streams.get(&stream).is_some_and(Stream::deciding);
            return if deciding { Action::Pause } else { Action::Continue };
        };
        let bytes = read(wait.max_bytes.saturating_add(1));
        let body = match &bytes {
            None => Body::Unreadable,
            Some(b) if b.len() as u64 > wait.max_bytes => Body::TooLarge { len: b.len() as u64 },
            Some(b) => Body::of(b),
        };
        let whole = bytes.as_deref().filter(|b| b.len() as u64 <= wait.max_bytes);
        self.decide_with_body(host, stream, request, &body, whole)
    }

    /// Stream `stream`'s body wait, if its request waits for its body: it
    /// ends (the stream stays, to be decided).
    pub(super) fn take_body_wait(&mut self, stream: u32) -> Option<BodyWait> {
        let state = self.streams.get_mut(&stream)?;
        let Phase::Body(wait) = state.phase else { return None };
        state.phase = Phase::Passing;
        self.bodies_waiting = self.bodies_waiting.saturating_sub(1);
        Some(wait)
    }

    /// Decides a request whose body is in (`bytes`, read as `body`), or
    /// past every bound; a streamed request a rule charges the usage of is
    /// made to ask for it first.
    fn decide_with_body<H: Host, R: RequestSource + ?Sized>(
        &mut self,
        host: &H,
        stream: u32,
        request: &R,
        body: &Body,
        bytes: Option<&[u8]>,
    ) -> Action {
        let now = host.now();
        self.sweep(host, now);
        let req = Request::with_body(request, body);
        match bytes.map(|b| self.ask_for_usage(host, &req, b)) {
            Some(Err((reply, r))) => self.decided(host, stream, Decided::refused(reply, r, DecidedBy::Body), now),
            asked => {
                self.decide(host, stream, &req, now);
                if let Some(state) = self.streams.get_mut(&stream) {
                    state.asked_usage = asked == Some(Ok(true));
                    state.request_bytes = match body {
                        Body::Read { len, .. } | Body::TooLarge { len } => *len,
                        Body::Unreadable => 0,
                    };
                }
            }
        }
        self.finish_callback(host, Callback::Request(stream))
    }

    /// Answers 408 to each request whose body did not come in time.
    pub(super) fn expire_body_waits<H: Host>(&mut self, host: &H, now: Instant) {
        if self.bodies_waiting == 0 {
            return;
        }
        let mut late: Vec<(u32, BodyWait)> = self
            .streams
            .iter()
            .filter_map(|(s, state)| match state.phase {
                Phase::Body(w) if now >= w.deadline => Some((*s, w)),
                _ => None,
            })
            .collect();
        late.sort_unstable_by_key(|(stream, _)| *stream);
        for (stream, wait) in late {
            self.take_body_wait(stream);
            self.end_stream(host, stream);
            let Some(rule) = self.config.rules.get(wait.rule) else { continue };
            host.count(wait.rule, Event::BadRequest);
            let reply = body_timeout(&rule.name, wait.timeout_ms);
            let log = access_log::fields(&self.config, &Trace::refused(wait.rule, DecidedBy::Body), Some(&reply));
            host.reply(stream, &reply, &log);
            let due = self.body_timeout_logged.is_none_or(|t| now.since(t) >= TIMEOUT_LOG_INTERVAL_MS);
            if due {
                self.body_timeout_logged = Some(now);
                let hint = if wait.seen {
                    "the client sent it too slowly"
                } else {
                    "none of it reached the filter: a slow client, or an Envoy whose wasm filter lacks allow_on_headers_stop_iteration: true (docs/requests.md, \"The request body\")"
                };
                host.warn(&format!(
                    "ratelimit: rule {}: a request body did not arrive within its {} ms and was answered 408; {hint}",
                    rule.name, wait.timeout_ms
                ));
            }
        }
    }
}
