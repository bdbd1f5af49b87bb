//! What the pipeline asks the worker to claim in shared data, atomically:
//! one request drawn from a hot client's live lease (this worker's heat
//! says who is hot), and a half-open breaker's one probe.

use super::Host;
use crate::breaker::{self, Gate};
use crate::config::Config;
use crate::keys::HashSlot;
use crate::lease::{Heat, LeaseRecord, LeaseTable, Spend, HOT_AFTER};
use crate::pipeline::{Claims, LeaseCandidate};
use crate::time::Instant;

/// The worker's claims for one request.
pub(super) struct WorkerClaims<'a, H: Host> {
    pub(super) host: &'a H,
    pub(super) config: &'a Config,
    /// This worker's count of each leasing client's requests: only a
    /// client hot here reads the lease table.
    pub(super) heat: &'a mut Heat,
}

impl<H: Host> Claims for WorkerClaims<'_, H> {
    fn draw(&mut self, lease: &LeaseCandidate, now: Instant) -> Option<LeaseRecord> {
        if self.heat.observe(lease.fingerprint, now, lease.params.max_age_ms) < HOT_AFTER {
            return None;
        }
        match LeaseTable::new(self.host, self.config.deny_cache.slots).draw(lease.fingerprint, now) {
            Spend::Drawn(record) => Some(record),
            _ => None,
        }
    }

    fn gate(&mut self, slot: HashSlot, now: Instant) -> Gate {
        // A probe is given up on past twice the store's timeout and a second.
        let probe_ms = self.config.store.timeout.ms().saturating_mul(2).saturating_add(1000);
        breaker::gate(self.host, &self.config.store.breaker, slot, now, probe_ms)
    }
}
