//! One worker (one VM): its streams, the store operations queued for a
//! call, the calls in flight, and the store's INFO. Pure and
//! host-independent: the glue feeds it the host's callbacks and carries
//! out what it asks through `Host`.
//!
//! Each stream owns what it has taken (`stream::Stream`), and one teardown
//! ends it all (`end_stream`). Each store operation in the queue or in a
//! call has one owner in one table (`jobs`). A decision that arrives when
//! fewer than `max_in_flight` calls are out goes at once; the others queue
//! and leave together in the next call. Every call is sent from the root
//! context, so a stream that goes away takes only its own decisions out of
//! a batch. Every table is bounded: the streams by `MAX_STREAMS` and their
//! age, the queue by `MAX_QUEUED` (a decision beyond it is refused as
//! overloaded), the charges by `MAX_CHARGES` (merged per client while they
//! wait), the calls by `max_in_flight` and `MAX_FLIGHTS` (and swept when
//! the host never answers).

pub mod access_log;
mod body_wait;
mod calls;
mod charges;
mod claims;
mod decide;
mod host;
mod incidents;
mod jobs;
mod leases;
mod override_poll;
mod permits;
mod response;
mod stats;
mod stream;
mod stream_usage;
mod usage_watch;

#[cfg(test)]
mod tests;

use crate::id_map::IdMap;
use crate::keys::HashSlot;
use crate::time::Instant;

pub use body_wait::{body_tick_ms, BodyAction};
pub use host::Host;
pub use incidents::{Incident, Incidents};
pub use usage_watch::{ResponseSource, MAX_DECODERS, MAX_USAGE_BODY};

use crate::config::Config;
use crate::request::{Body, Request, RequestSource};
use crate::store::batcher::{Batchable, Batcher};
use crate::store::flow::Stage;
use crate::store::script_call::ScriptCall;
use crate::store::transport;
use crate::store::StoreError;
use jobs::{JobId, Jobs};
use stream::{Phase, Stream};
use usage_watch::Decoders;

/// Decisions and charges waiting for a call, per worker, at most (one more
/// is refused as overloaded): as many as `MAX_STREAMS`, so a burst of
/// requests of one decision each fits; a request has one decision per key
/// group of the rules it matches, and each waits in this queue.
pub const MAX_QUEUED: usize = MAX_STREAMS;
/// Streams tracked per worker (paused ones, or ones whose response still
/// needs headers) before old ones are forgotten: when a stream is to be
/// tracked and this many are, every stream older than four times the
/// store timeout plus `UNANSWERED_GRACE_MS` is ended as if the host had
/// ended it. Younger ones stay (each is a request the host holds, and
/// leaves when its stream ends), so the table exceeds this only while
/// that many requests are that young.
pub const MAX_STREAMS: usize = 65_536;
/// How long past its timeout a call may stay unanswered before the worker
/// gives up on it (Envoy answers a timed-out call itself; a host that
/// never does must not hold memory or requests).
pub const UNANSWERED_GRACE_MS: u64 = 1_000;

/// The shortest timer period the worker asks for.
pub const MIN_TICK_MS: u64 = 5;

/// Charges waiting or in flight per worker at most. Charges of one client
/// merge while they wait, so this bounds clients charging at once.
pub const MAX_CHARGES: usize = 16_384;

/// Store calls in flight per worker at most, counting those sent past
/// `max_in_flight` for decisions that waited too long (unless
/// `max_in_flight` is larger): the store cluster's circuit breakers in
/// Envoy must allow this many requests per worker.
pub const MAX_FLIGHTS: usize = 64;

/// What the host does with the request after its headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Let it through now.
    Continue,
    /// Hold it: the worker resumes or answers it later (or has answered it).
    Pause,
}

/// Which callback of the host runs: what may be resumed or answered from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Callback {
    /// A callback of stream `0`'s request: its outcome is that callback's
    /// answer, not a resumption.
    Request(u32),
    /// Another callback of a stream (its response, its end): that stream
    /// may be resumed, but a pinned host (NGINX) starts no call there.
    Stream(Option<u32>),
    /// A store answer, which a pinned host delivers in the context of the
    /// stream that made the call: that stream may be resumed, and calls
    /// may start.
    Answer(Option<u32>),
    /// The timer, on the root.
    Timer,
}

impl Callback {
    /// The stream whose callback runs, if any.
    fn stream(self) -> Option<u32> {
        match self {
            Callback::Request(s) => Some(s),
            Callback::Stream(s) | Callback::Answer(s) => s,
            Callback::Timer => None,
        }
    }
}

/// A store operation waiting for a call.
#[derive(Debug)]
struct Queued {
    job: JobId,
    /// The stream it decides for, if it is a stream's decision.
    stream: Option<u32>,
    slot: HashSlot,
    size: usize,
    /// When it was queued.
    since: Instant,
}

impl Batchable for Queued {
    fn slot(&self) -> HashSlot {
        self.slot
    }
    fn size(&self) -> usize {
        self.size
    }
    fn since(&self) -> Instant {
        self.since
    }
}

/// A store call in flight.
#[derive(Debug)]
struct Flight {
    jobs: Vec<JobId>,
    slots: Vec<HashSlot>,
    call: ScriptCall,
    stage: Stage,
    /// When the first message went (the call's latency).
    started: Instant,
    /// When the latest message went (its timeout).
    sent: Instant,
}

/// The worker.
#[derive(Debug)]
pub struct Worker {
    config: Config,
    streams: IdMap<u32, Stream>,
    /// Streams decided in the callback that runs, whose outcomes are
    /// carried out before it returns.
    ready: Vec<u32>,
    jobs: Jobs,
    waiting: charges::Waiting,
    queue: Batcher<Queued>,
    flights: IdMap<u32, Flight>,
    info: Option<(u32, u64)>,
    /// When the store's INFO was last asked for.
    last_info: Option<Instant>,
    incidents: Incidents,
    decoders: Decoders,
    leases: leases::Leases,
    /// The timer period renewing permits needs (with concurrency limits).
    permit_tick_ms: Option<u64>,
    stats: stats::StatsWatch,
    /// The host ignores `proxy_set_effective_context` (NGINX), set once: a
    /// call is answered in the context that made it, and only that
    /// context can be resumed or answered. So each stream's decisions go
    /// out in their own call from their own callback, and everything else
    /// (charges, permit releases and renewals, lease asks) from the timer,
    /// in the root.
    pinned: bool,
    /// The timer period waiting bodies need (with rules reading bodies).
    body_tick_ms: Option<u64>,
    /// Streams whose request waits for its body (`Phase::Body`).
    bodies_waiting: usize,
    /// When a body that never came was last logged.
    body_timeout_logged: Option<Instant>,
    /// The index of overrides, polled with overrides on.
    overrides: override_poll::OverridePoll,
}

impl Worker {
    /// A worker for `config`, started at `now_ms` (the first INFO is asked
    /// for one `stats_interval` later).
    pub fn new(config: Config, now: Instant) -> Worker {
        let permit_tick_ms = permits::tick_ms(&config);
        let body_tick_ms = body_tick_ms(&config);
        Worker {
            config,
            streams: IdMap::default(),
            ready: Vec::new(),
            jobs: Jobs::default(),
            waiting: charges::Waiting::default(),
            queue: Batcher::new(MAX_QUEUED),
            flights: IdMap::default(),
            info: None,
            last_info: Some(now),
            incidents: Incidents::default(),
            decoders: Decoders::default(),
            leases: leases::Leases::default(),
            permit_tick_ms,
            stats: stats::StatsWatch::default(),
            pinned: false,
            body_tick_ms,
            bodies_waiting: 0,
            body_timeout_logged: None,
            overrides: override_poll::OverridePoll::default(),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Calls in flight, operations queued, streams tracked (for tests).
    pub fn sizes(&self) -> (usize, usize, usize) {
        (self.flights.len(), self.queue.len(), self.streams.len())
    }

    /// The host ignores `proxy_set_effective_context`: see `pinned`.
    pub fn pin_calls_to_streams(&mut self) {
        self.pinned = true;
    }

    /// A request's headers arrived on stream `stream`, a body to follow.
    pub fn on_request<H: Host, R: RequestSource + ?Sized>(&mut self, host: &H, stream: u32, request: &R) -> Action {
        self.on_request_headers(host, stream, request, false)
    }

    /// A request's headers arrived on stream `stream` (`end_of_stream`: no
    /// body follows, which a rule reading the body reads as empty). When a
    /// rule that applies reads the body, the decision waits for it
    /// (`on_request_body`).
    pub fn on_request_headers<H: Host, R: RequestSource + ?Sized>(
        &mut self,
        host: &H,
        stream: u32,
        request: &R,
        end_of_stream: bool,
    ) -> Action {
        let now = host.now();
        self.sweep(host, now);
        if !self.pinned {
            // Envoy re-arms the timer whenever its period changes, which
            // steady traffic can do faster than it fires: a due poll goes
            // with a request too (a pinned host's answer would come back
            // in the request's context: its polls go on the timer only).
            self.poll_overrides(host, now);
        }
        let empty;
        let req = match self.body_tick_ms.is_some() && end_of_stream {
            true => {
                empty = Body::of(b"");
                Request::with_body(request, &empty)
            }
            false => Request::new(request),
        };
        if self.body_tick_ms.is_some() && self.pinned {
            // NGINX never handed the body over while the headers waited:
            // refused, never decided without it (see `body_unsupported`).
            if let Some(reply) = self.body_unsupported(host, &req) {
                host.reply(stream, &reply, &[]);
                return Action::Pause;
            }
        }
        if self.body_tick_ms.is_some() && !end_of_stream {
            if let Some(wait) = self.body_wait(&req, now) {
                self.track(host, stream, Stream::new(Phase::Body(wait), now), now);
                self.bodies_waiting += 1;
                return self.finish_callback(host, Callback::Request(stream));
            }
        }
        self.decide(host, stream, &req, now);
        self.finish_callback(host, Callback::Request(stream))
    }

    /// Stream `stream` is gone (the client or the upstream ended it, or the
    /// host deleted its context): it ends, and everything it took (see
    /// `end_stream`).
    pub fn on_stream_end<H: Host>(&mut self, host: &H, stream: u32) {
        self.end_stream(host, stream);
        self.finish_callback(host, Callback::Stream(None));
    }

    /// The timer: gives up on calls the host never answered, sends
    /// decisions that waited too long for a call slot (up to
    /// `MAX_FLIGHTS` calls in flight), answers bodies that never came,
    /// renews permits, polls the index of overrides, logs what was counted
    /// but not yet logged, and asks the store for its INFO every
    /// `stats_interval` (one at a time).
    pub fn on_tick<H: Host>(&mut self, host: &H) {
        let now = host.now();
        self.sweep(host, now);
        self.expire_body_waits(host, now);
        self.renew_permits(host, now);
        self.poll_overrides(host, now);
        let fill = self.fill();
        let most = MAX_FLIGHTS.max(self.config.store.batching.max_in_flight.get() as usize);
        if self.pinned {
            // From the root context: all but streams' own decisions.
            self.send_matching(host, fill, most, |q| q.stream.is_none());
        }
        while !self.pinned
            && self.flights.len() < most
            && self.queue.oldest_since().is_some_and(|since| now.since(since) >= self.max_wait_ms())
        {
            self.send_next(host, fill);
        }
        for line in self.incidents.flush(now) {
            host.warn(&line);
        }
        let due = self.last_info.is_none_or(|t| now.since(t) >= self.config.store.stats_interval.ms());
        if self.info.is_none() && due {
            self.last_info = Some(now);
            match host.send(&transport::info(self.config.store.transport), false) {
                Ok(token) => self.info = Some((token, now.ms())),
                Err(e) => self.on_info(host, Err(e)),
            }
        }
        self.finish_callback(host, Callback::Timer);
    }

    /// Keeps `state` for stream `stream`, making room among old streams
    /// when the table is full.
    fn track<H: Host>(&mut self, host: &H, stream: u32, state: Stream, now: Instant) {
        if self.streams.len() >= MAX_STREAMS {
            self.forget_old_streams(host, now);
        }
        self.streams.insert(stream, state);
    }

    fn on_info<H: Host>(&mut self, host: &H, info: Result<String, StoreError>) {
        for line in self.stats.take(host, info) {
            host.warn(&line);
        }
    }

    /// Fails the calls past their timeout and grace, and forgets an INFO
    /// call the host never answered.
    fn sweep<H: Host>(&mut self, host: &H, now: Instant) {
        let deadline = self.config.store.timeout.ms().saturating_add(UNANSWERED_GRACE_MS);
        if self.info.is_some_and(|(_, started)| now.since(Instant::from_ms(started)) > deadline) {
            self.info = None;
        }
        let expired: Vec<u32> =
            self.flights.iter().filter(|(_, f)| now.since(f.sent) > deadline).map(|(t, _)| *t).collect();
        for token in expired {
            if let Some(flight) = self.flights.remove(&token) {
                self.finish(host, flight, Err(StoreError::Unanswered));
            }
        }
    }

    /// Forgets streams the host never ended (no callback for a long time).
    fn forget_old_streams<H: Host>(&mut self, host: &H, now: Instant) {
        let horizon = self.config.store.timeout.ms().saturating_add(UNANSWERED_GRACE_MS).saturating_mul(4);
        // A stream holding a permit may last hours (a long download, an LLM
        // answer): forgetting it would free its permit while it runs.
        let old: Vec<u32> = self
            .streams
            .iter()
            .filter(|(_, s)| now.since(s.created) > horizon && s.permits.is_empty())
            .map(|(id, _)| *id)
            .collect();
        for id in old {
            self.end_stream(host, id);
        }
    }
}
