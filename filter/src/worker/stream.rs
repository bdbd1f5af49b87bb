//! One stream and everything it has taken, with the one teardown that
//! ends each of them exactly once, whatever ends the stream: the host ends
//! it, the filter answers it, it is forgotten as too old. A stream's
//! resources: the decisions it waits for (queued, or in a call: those
//! become orphans), its body wait, the permits and reservations the store
//! gave it, the charges it owes, the usage being taken out of its response.

use super::body_wait::BodyWait;
use super::jobs::{Job, JobId, Orphan};
use super::permits::HeldPermit;
use super::usage_watch::UsageWatch;
use super::{Host, Worker};
use crate::outcome::LimitOutcome;
use crate::pipeline::{Decided, Outcome, Pending, PlannedDecision, Taken};
use crate::response::Headers;
use crate::store::StoreError;
use crate::time::Instant;
use crate::usage::UsageStripper;

/// A stream the worker keeps state for.
#[derive(Debug)]
pub(super) struct Stream {
    pub(super) phase: Phase,
    /// The rate-limit fields its response gets.
    pub(super) headers: Headers,
    /// Charges waiting for its response to report the usage.
    pub(super) usage: Vec<UsageWatch>,
    /// Concurrency permits held until it ends.
    pub(super) permits: Vec<HeldPermit>,
    /// The filter made the request ask for its usage: the client's stream
    /// is given back without it.
    pub(super) asked_usage: bool,
    /// Taking that usage back out of the response body, once it began.
    pub(super) stripper: Option<UsageStripper>,
    /// Request body bytes the filter saw (read whole, or counted as they
    /// passed): what a charge without a usage report estimates the prompt from.
    pub(super) request_bytes: u64,
    pub(super) created: Instant,
}

/// Where its request is.
#[derive(Debug)]
pub(super) enum Phase {
    /// Its decision waits for the request body.
    Body(BodyWait),
    /// Its decisions are out: the job of each still to come, by index.
    Deciding { pending: Pending, jobs: Vec<Option<JobId>> },
    /// Decided; the outcome is carried out when the callback that decided
    /// it is done (see `Worker::carry_out`).
    Decided(Decided),
    /// Let through.
    Passing,
}

impl Stream {
    /// A stream in `phase`, begun at `now`.
    pub(super) fn new(phase: Phase, now: Instant) -> Stream {
        Stream {
            phase,
            headers: Vec::new(),
            usage: Vec::new(),
            permits: Vec::new(),
            asked_usage: false,
            stripper: None,
            request_bytes: 0,
            created: now,
        }
    }

    /// Nothing left to do for it before it ends.
    pub(super) fn done(&self) -> bool {
        matches!(self.phase, Phase::Passing)
            && self.headers.is_empty()
            && self.usage.is_empty()
            && self.permits.is_empty()
            && self.stripper.is_none()
    }

    /// Whether its request waits for its decisions.
    pub(super) fn deciding(&self) -> bool {
        matches!(self.phase, Phase::Deciding { .. })
    }
}

impl Worker {
    /// Ends stream `id` and everything it took: its decisions still queued
    /// leave the queue and those in a call become orphans; what decisions
    /// that answered took for a request never decided whole, and what a
    /// decided but never carried out outcome holds, goes back; its charges
    /// are made with what its response reported (see `usage_watch`); its
    /// permits are released.
    pub(super) fn end_stream<H: Host>(&mut self, host: &H, id: u32) {
        self.take_body_wait(id);
        let Some(stream) = self.streams.remove(&id) else { return };
        let taken = match stream.phase {
            Phase::Deciding { pending, jobs } => {
                let out: Vec<(JobId, usize)> =
                    jobs.iter().enumerate().filter_map(|(i, job)| job.map(|job| (job, i))).collect();
                let queued = self.queue.remove_where(|q| out.iter().any(|(job, _)| *job == q.job));
                for (job, index) in out {
                    match (queued.iter().any(|q| q.job == job), pending.decisions.get(index)) {
                        (false, Some(d)) => self.orphan(job, d),
                        _ => {
                            self.jobs.remove(job);
                        }
                    }
                }
                // Decisions that answered took for a request never decided whole.
                pending.taken(&self.config)
            }
            // Decided but never carried out: what its outcome holds goes back too.
            Phase::Decided(Decided { outcome, mut effects, .. }) => {
                if let Outcome::Continue(_, charges, permits) = outcome {
                    effects.give_back.permits.extend(permits);
                    effects.give_back.reservations.extend(charges.into_iter().filter(|c| c.reservation.is_some()));
                }
                effects.give_back
            }
            Phase::Body(_) | Phase::Passing => Taken::default(),
        };
        for mut watch in stream.usage {
            let reported = watch.on_end();
            let _ = self.submit_charge(host, watch.charge, reported, stream.request_bytes);
        }
        for held in stream.permits {
            self.end_permit(host, held.permit, held.renewal);
        }
        self.return_taken(host, taken);
    }

    /// Gives back what a request or a decision took and does not keep:
    /// its permits released (`end_permit`), its reservations refunded
    /// whole (`refund_whole`). Every stream end, refusal and orphan comes here.
    pub(super) fn return_taken<H: Host>(&mut self, host: &H, taken: Taken) {
        for permit in taken.permits {
            self.end_permit(host, permit, None);
        }
        for reservation in taken.reservations {
            self.refund_whole(host, reservation);
        }
    }

    /// Decision `d`'s job, in a call, outlives its stream: an orphan of
    /// what it may take (nothing: forgotten).
    fn orphan(&mut self, job: JobId, d: &PlannedDecision) {
        let clock = self.flights.values().find(|f| f.jobs.contains(&job)).map(|f| f.call.now);
        let reserving = clock.filter(|_| d.reserves(&self.config)).map(|at| (d.clone(), at));
        let orphan = Orphan { permits: d.takes(false).collect(), reserving };
        match self.jobs.get_mut(job) {
            Some(j) if !orphan.permits.is_empty() || orphan.reserving.is_some() => *j = Job::Orphan(orphan),
            _ => {
                self.jobs.remove(job);
            }
        }
    }

    /// What an orphan's answer leaves to give back: its permits if the
    /// store admitted it or its answer was lost (it may have run), its
    /// reservations only if it surely admitted (a refund of units never
    /// taken would admit past the limit).
    pub(super) fn settle_orphan<H: Host>(
        &mut self,
        host: &H,
        orphan: Orphan,
        result: Result<Vec<LimitOutcome>, StoreError>,
    ) {
        let admitted = matches!(&result, Ok(outcomes) if outcomes.iter().all(|o| o.allowed));
        let may_have_run = result.as_ref().is_err_and(StoreError::may_have_run);
        let permits = if admitted || may_have_run { orphan.permits } else { Vec::new() };
        let reservations = match (orphan.reserving, result) {
            (Some((mut d, at)), Ok(mut outcomes)) if admitted => {
                d.take_marks(&self.config, &mut outcomes);
                d.reservations(&self.config, at)
            }
            _ => Vec::new(),
        };
        self.return_taken(host, Taken { permits, reservations });
    }
}
