//! What each store operation in the queue or in a call is for, in one
//! table: an answer finds its owner, and what that owner has taken, in
//! one place. A stream's decision is a job while the stream waits for it;
//! when the stream ends first, its job in a call becomes an orphan that
//! carries what the decision takes if the store admits it, and gives that
//! back when the answer comes (`end_stream`).

use super::charges::PendingCharge;
use super::leases::LeaseAsk;
use super::permits::PermitCall;
use crate::id_map::IdMap;
use crate::pipeline::{Permit, PlannedDecision};
use crate::time::Instant;

/// A job's id: never reused while the worker lives.
pub(super) type JobId = u64;

/// One store operation's owner.
#[derive(Debug)]
pub(super) enum Job {
    /// Decision `index` of the request of stream `stream`.
    Decide { stream: u32, index: usize },
    /// A decision in a call whose stream has ended.
    Orphan(Orphan),
    /// A charge or a refund after a response (it outlives its stream).
    Charge(PendingCharge),
    /// A lease asked with a hot client's decision.
    Lease(LeaseAsk),
    /// A concurrency permit's release or renewal.
    Permit(PermitCall),
}

/// What a decision in a call takes if the store admits it, for a stream
/// that ended before the answer: given back when it comes.
#[derive(Debug)]
pub(super) struct Orphan {
    /// Permits: released (also when the answer was lost: the script may
    /// have run, and releasing a permit never taken changes nothing).
    pub(super) permits: Vec<Permit>,
    /// A decision that reserves, and the clock its call decides on: its
    /// reservations are refunded whole, only when the store surely took
    /// them, with the marks its answer gives.
    pub(super) reserving: Option<(PlannedDecision, Instant)>,
}

/// The table, with a count of the charges in it (bounded by `MAX_CHARGES`).
#[derive(Debug, Default)]
pub(super) struct Jobs {
    table: IdMap<JobId, Job>,
    next: JobId,
    charges: usize,
}

impl Jobs {
    /// Adds `job`; its id.
    pub(super) fn add(&mut self, job: Job) -> JobId {
        let id = self.next;
        self.next = self.next.wrapping_add(1);
        self.charges += usize::from(matches!(job, Job::Charge(_)));
        self.table.insert(id, job);
        id
    }

    /// Job `id`, if it is still owned.
    pub(super) fn get(&self, id: JobId) -> Option<&Job> {
        self.table.get(&id)
    }

    /// Job `id`, to change.
    pub(super) fn get_mut(&mut self, id: JobId) -> Option<&mut Job> {
        self.table.get_mut(&id)
    }

    /// Takes job `id` out of the table.
    pub(super) fn remove(&mut self, id: JobId) -> Option<Job> {
        let job = self.table.remove(&id)?;
        self.charges -= usize::from(matches!(job, Job::Charge(_)));
        Some(job)
    }

    /// Charges and refunds owned now.
    pub(super) fn charges(&self) -> usize {
        self.charges
    }
}
