//! Charges after the response: queued like any decision, and settled: a
//! client now out of budget goes in the deny cache; a charge the store
//! could not take spends the local fallback share.

use super::usage_watch::{amount, Reported};
use super::{Host, Owner, PendingCharge, Worker, MAX_CHARGES};
use crate::decision::Decision;
use crate::deny_cache::{DenyCache, DenyEntry};
use crate::fallback::{self, FallbackLimit};
use crate::fingerprint::entry_fingerprint;
use crate::metrics::Event;
use crate::pipeline::Charge;
use crate::store::StoreError;

impl Worker {
    /// Queues a charge of `reported` usage (nothing when it comes to 0).
    pub(super) fn submit_charge<H: Host>(&mut self, host: &H, charge: Charge, reported: Reported) {
        let Some(rule) = self.config.rules.get(charge.rule) else { return };
        let units = amount(&rule.cost, reported);
        host.count(charge.rule, Event::Charged);
        if reported == Reported::Missing {
            host.count(charge.rule, Event::UsageMissing);
        }
        if units == 0 || charge.limits.is_empty() {
            return;
        }
        host.count_by(charge.rule, Event::ChargedUnits, units);
        let id = self.next_charge;
        self.next_charge = self.next_charge.wrapping_add(1);
        let now = host.now_ms();
        let pending = PendingCharge { charge, amount: units };
        if self.charges.len() >= MAX_CHARGES {
            self.settle_charge(host, pending, Err(StoreError::Overloaded), now);
            return;
        }
        self.charges.insert(id, pending);
        let queued = self.queued(Owner::Charge(id), now).map(|q| self.queue.push(q));
        if let Some(Err(q)) = queued {
            self.deliver(host, q.owner, Err(StoreError::Overloaded), now);
        }
        self.pump(host);
    }

    /// A charge's result: a client now out of budget is remembered in the
    /// deny cache until the debt is repaid; a charge the store could not
    /// take spends the proxy's local fallback share (the response is gone:
    /// nothing can be refused, whatever the rule's failure policy).
    pub(super) fn settle_charge<H: Host>(
        &mut self,
        host: &H,
        c: PendingCharge,
        result: Result<Vec<Decision>, StoreError>,
        at: u64,
    ) {
        let config = &self.config;
        let Some(rule) = config.rules.get(c.charge.rule) else { return };
        match result {
            Ok(decisions) => {
                if !config.deny_cache.enabled {
                    return;
                }
                let cache = DenyCache::new(host, config.deny_cache.slots);
                for (&(limit, _), d) in c.charge.limits.iter().zip(&decisions) {
                    let (Some(l), false, Some(retry)) = (rule.limits.get(limit), d.allowed, d.retry_after_ms) else {
                        continue;
                    };
                    if retry > 0 {
                        let entry = DenyEntry {
                            deny_until_ms: at.saturating_add(retry),
                            reset_at_ms: at.saturating_add(d.reset_ms),
                            remaining: d.remaining,
                        };
                        cache.remember(entry_fingerprint(l.fingerprint, &c.charge.digest), entry);
                    }
                }
            }
            Err(_) => {
                host.count(c.charge.rule, Event::ChargeFailed);
                let limits: Vec<FallbackLimit> = c
                    .charge
                    .limits
                    .iter()
                    .filter_map(|&(limit, _)| rule.limits.get(limit))
                    .map(|l| FallbackLimit {
                        fingerprint: entry_fingerprint(l.fingerprint, &c.charge.digest),
                        share: l.spec.limit / rule.fleet_size.get(),
                        window_ms: l.spec.window_ms,
                        cost: c.amount,
                    })
                    .collect();
                fallback::charge(host, config.deny_cache.slots, &limits, host.now_ms());
            }
        }
    }
}
