//! A request decided: the pipeline plans its decisions, each goes to the
//! store as a job, their results come back to the request's `Pending`, and
//! the outcome is carried out once, at the end of the callback that
//! decided it: the request's own callback answers with it, any other
//! resumes or answers the stream.

use super::access_log;
use super::claims::WorkerClaims;
use super::jobs::{Job, JobId};
use super::permits::HeldPermit;
use super::stream::{Phase, Stream};
use super::usage_watch::UsageWatch;
use super::{Action, Callback, Host, Incident, Worker, MAX_QUEUED};
use crate::deny_cache::DenyCache;
use crate::outcome::LimitOutcome;
use crate::pipeline::{begin_request, Decided, Env, Outcome, Start};
use crate::request::{Request, RequestSource};
use crate::store::StoreError;
use crate::time::Instant;

impl Worker {
    /// The pipeline's view of `config` and `host`.
    pub(super) fn env<'a, H: Host>(config: &'a crate::config::Config, host: &'a H) -> Env<'a, H, H> {
        Env { config, shared: host, metrics: host, random: host.random() }
    }

    /// Decides a request whose headers (and body, if a rule reads it) are
    /// in: at once, or by queueing its decisions (the outcome is carried
    /// out by `finish_callback`).
    pub(super) fn decide<H: Host, R: RequestSource + ?Sized>(
        &mut self,
        host: &H,
        stream: u32,
        req: &Request<'_, R>,
        now: Instant,
    ) {
        // The instant read above: one clock hostcall a request.
        let mut claims = WorkerClaims { host, config: &self.config, heat: &mut self.leases.heat };
        let start = begin_request(&Self::env(&self.config, host), req, || now, &mut claims);
        self.ask_for_identity_encoding(host, req);
        let pending = match start {
            Start::Done(decided) => return self.decided(host, stream, decided, now),
            Start::Wait(pending) => pending,
        };
        let waiting: Vec<usize> = (0..pending.decisions.len()).filter(|&i| pending.decisions[i].is_waiting()).collect();
        let hot: Vec<_> = waiting
            .iter()
            .filter(|&&i| pending.decisions[i].lease.is_some())
            .map(|&i| pending.decisions[i].clone())
            .collect();
        let jobs: Vec<Option<JobId>> = (0..pending.decisions.len())
            .map(|index| waiting.contains(&index).then(|| self.jobs.add(Job::Decide { stream, index })))
            .collect();
        self.track(host, stream, Stream::new(Phase::Deciding { pending, jobs: jobs.clone() }, now), now);
        for job in jobs.into_iter().flatten() {
            let Some(item) = self.queued(job, now) else { continue };
            if let Err(item) = self.queue.push(item) {
                self.refuse_overloaded(host, item.job, now);
            }
        }
        for d in hot {
            self.ask_lease(host, &d, now);
        }
    }

    /// A request a rule reading usage from the response body applies to
    /// asks the upstream for an uncompressed answer (`accept-encoding:
    /// identity`), so that no client can make its usage unreadable by
    /// asking for compression. (An upstream that compresses anyway is
    /// decoded; see `usage_watch`.)
    fn ask_for_identity_encoding<H: Host, R: RequestSource + ?Sized>(&self, host: &H, req: &Request<'_, R>) {
        if self.config.rules.iter().any(|r| r.reads_body() && r.matcher.matches_headers(req)) {
            host.set_request_header("accept-encoding", "identity");
        }
    }

    /// Stream `stream`'s request is decided: its outcome waits to be
    /// carried out at the end of the running callback.
    pub(super) fn decided<H: Host>(&mut self, host: &H, stream: u32, decided: Decided, now: Instant) {
        match self.streams.get_mut(&stream) {
            Some(s) => s.phase = Phase::Decided(decided),
            None => self.track(host, stream, Stream::new(Phase::Decided(decided), now), now),
        }
        self.ready.push(stream);
    }

    /// The end of every callback: sends what may go, and carries out the
    /// outcomes decided meanwhile: the request of a `Callback::Request`
    /// gets its own as the answer returned, every other stream is resumed
    /// or answered (on a pinned host only the stream whose callback runs;
    /// the host resumes the others when their own call ends). What an
    /// answer refuses, its stream gives back at once.
    pub(super) fn finish_callback<H: Host>(&mut self, host: &H, cb: Callback) -> Action {
        let mut own = None;
        loop {
            self.pump(host, cb);
            if self.ready.is_empty() {
                break;
            }
            for id in std::mem::take(&mut self.ready) {
                let action = self.carry_out(host, id, cb);
                if cb == Callback::Request(id) {
                    own = action;
                }
            }
        }
        let Callback::Request(stream) = cb else { return Action::Continue };
        own.unwrap_or(match self.streams.get(&stream) {
            Some(s) if matches!(s.phase, Phase::Deciding { .. } | Phase::Body(_)) => Action::Pause,
            _ => Action::Continue,
        })
    }

    /// Carries out stream `id`'s outcome, with its effects (denials
    /// remembered, what a refused request took given back); the action its
    /// own callback answers.
    fn carry_out<H: Host>(&mut self, host: &H, id: u32, cb: Callback) -> Option<Action> {
        let stream = self.streams.get_mut(&id)?;
        let Phase::Decided(decided) = std::mem::replace(&mut stream.phase, Phase::Passing) else { return None };
        let Decided { outcome, effects, trace } = decided;
        let reply = match &outcome {
            Outcome::Reply(reply) => Some(reply),
            Outcome::Continue(..) => None,
        };
        let log = trace.map(|t| access_log::fields(&self.config, &t, reply)).unwrap_or_default();
        let cache = DenyCache::new(host, self.config.deny_cache.slots);
        for (fingerprint, entry) in effects.denials {
            cache.remember(fingerprint, entry);
        }
        self.return_taken(host, effects.give_back);
        let stream = self.streams.get_mut(&id)?;
        let returned = cb == Callback::Request(id);
        let may_act = returned || cb.stream() == Some(id) || !self.pinned;
        match outcome {
            Outcome::Continue(headers, charges, permits) => {
                let now = host.now();
                stream.headers = headers;
                stream.usage = charges.into_iter().map(UsageWatch::new).collect();
                stream.permits = permits.into_iter().map(|h| HeldPermit::new(h, now)).collect();
                if stream.done() {
                    self.streams.remove(&id);
                }
                if returned {
                    if !log.is_empty() {
                        host.annotate(id, &log);
                    }
                    return Some(Action::Continue);
                }
                if may_act {
                    host.resume(id, &log);
                }
                None
            }
            Outcome::Reply(reply) => {
                if may_act {
                    host.reply(id, &reply, &log);
                }
                self.end_stream(host, id);
                returned.then_some(Action::Pause)
            }
        }
    }

    /// The result of job `job` (`at`: the instant the store decided it).
    pub(super) fn deliver<H: Host>(
        &mut self,
        host: &H,
        job: JobId,
        result: Result<Vec<LimitOutcome>, StoreError>,
        at: Instant,
    ) {
        match self.jobs.remove(job) {
            Some(Job::Decide { stream, index }) => self.deliver_decision(host, stream, index, result, at),
            Some(Job::Orphan(orphan)) => self.settle_orphan(host, orphan, result),
            Some(Job::Charge(c)) => {
                self.waiting.leave(job, &c);
                self.settle_charge(host, c, result, at);
            }
            Some(Job::Lease(ask)) => self.settle_lease(host, ask, result, at),
            Some(Job::Permit(call)) => self.settle_permit(host, call, result, at),
            None => {}
        }
    }

    /// Decision `index` of stream `stream` has its result; the stream is
    /// decided once all are in.
    fn deliver_decision<H: Host>(
        &mut self,
        host: &H,
        stream: u32,
        index: usize,
        result: Result<Vec<LimitOutcome>, StoreError>,
        at: Instant,
    ) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        let Phase::Deciding { pending, jobs } = &mut s.phase else { return };
        if let Some(job) = jobs.get_mut(index) {
            *job = None;
        }
        let lease = pending.decisions.get(index).and_then(|d| d.lease.clone());
        if let (Ok(outcomes), Some(c)) = (&result, lease.filter(|_| self.leases.waits_for_views())) {
            self.keep_view(host, &c, outcomes, at);
        }
        let Some(s) = self.streams.get_mut(&stream) else { return };
        let Phase::Deciding { pending, .. } = &mut s.phase else { return };
        let Some(decided) = pending.on_reply(&Self::env(&self.config, host), index, result) else { return };
        s.phase = Phase::Decided(decided);
        self.ready.push(stream);
    }

    /// A job refused because `MAX_QUEUED` already wait: its rule's failure
    /// policy (a charge: the fallback), counted and logged as overloaded,
    /// never as a store error.
    pub(super) fn refuse_overloaded<H: Host>(&mut self, host: &H, job: JobId, now: Instant) {
        if matches!(self.jobs.get(job), Some(Job::Decide { .. })) {
            let reason = format!("{MAX_QUEUED} decisions already wait for the store on this worker");
            if let Some(line) = self.incidents.record(Incident::Overloaded, now, 1, 0, &reason) {
                host.warn(&line);
            }
        }
        self.deliver(host, job, Err(StoreError::Overloaded), now);
    }
}
