//! What the filter counts, per rule.

/// A counted event of one rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// Admitted by the store.
    Allowed,
    /// Denied (store or deny cache) and rejected.
    Denied,
    /// Would have been denied; shadow mode let it through.
    ShadowDenied,
    /// Answered from the deny cache, no store call.
    DenyCacheHit,
    /// The store call failed.
    StoreError,
    /// Store unavailable, admitted by the local fallback bucket.
    FallbackAllowed,
    /// Store unavailable, denied by the local fallback bucket.
    FallbackDenied,
    /// Store unavailable, fail-closed rule answered 503.
    FailClosed,
    /// Refused with 400: an ambiguous identity or a malformed cost.
    BadRequest,
    /// A cost known after the response was charged (or failed to be).
    Charged,
    /// Units charged after responses (incremented by the amount).
    ChargedUnits,
    /// The response reported no readable usage: the default was charged.
    UsageMissing,
    /// A charge failed at the store; it was counted in the local fallback.
    ChargeFailed,
    /// The response's usage could not be read (garbled, too large, an
    /// encoding the filter cannot decode): `max` was charged.
    UsageUnreadable,
    /// Admitted from a lease, in the proxy (also counted as allowed).
    LeaseAllowed,
    /// A lease the store granted (its units counted in advance).
    LeaseGranted,
    /// Refused before reaching the store: too many decisions already wait
    /// on this worker; the rule's failure policy applied.
    Overloaded,
    /// A concurrency permit taken in the store by an admitted stream.
    PermitTaken,
    /// A concurrency permit taken in this proxy's local share (store failing).
    PermitTakenLocally,
    /// Refused by a concurrency limit (every slot held).
    PermitRefused,
    /// A slot the store released when its stream ended.
    PermitReleased,
    /// A slot the store had already freed by its expiry when its stream
    /// released or renewed it (renewals failed for `max_hold`).
    PermitExpired,
    /// A slot's release or renewal the store did not take (the slot frees
    /// itself by its expiry; a renewal is tried again while its stream
    /// lives).
    PermitStoreFailed,
}

impl Event {
    /// Every event, in metric-definition order.
    pub const ALL: [Event; 23] = [
        Event::Allowed,
        Event::Denied,
        Event::ShadowDenied,
        Event::DenyCacheHit,
        Event::StoreError,
        Event::FallbackAllowed,
        Event::FallbackDenied,
        Event::FailClosed,
        Event::BadRequest,
        Event::Charged,
        Event::ChargedUnits,
        Event::UsageMissing,
        Event::ChargeFailed,
        Event::UsageUnreadable,
        Event::LeaseAllowed,
        Event::LeaseGranted,
        Event::Overloaded,
        Event::PermitTaken,
        Event::PermitTakenLocally,
        Event::PermitRefused,
        Event::PermitReleased,
        Event::PermitExpired,
        Event::PermitStoreFailed,
    ];

    /// The metric name's last part.
    pub fn name(self) -> &'static str {
        match self {
            Event::Allowed => "allowed",
            Event::Denied => "denied",
            Event::ShadowDenied => "shadow_denied",
            Event::DenyCacheHit => "deny_cache_hits",
            Event::StoreError => "store_errors",
            Event::FallbackAllowed => "fallback_allowed",
            Event::FallbackDenied => "fallback_denied",
            Event::FailClosed => "fail_closed",
            Event::BadRequest => "bad_requests",
            Event::Charged => "charges",
            Event::ChargedUnits => "charged_units",
            Event::UsageMissing => "usage_missing",
            Event::ChargeFailed => "charge_errors",
            Event::UsageUnreadable => "usage_unreadable",
            Event::LeaseAllowed => "lease_allowed",
            Event::LeaseGranted => "leases",
            Event::Overloaded => "overloaded",
            Event::PermitTaken => "slots_taken",
            Event::PermitTakenLocally => "slots_taken_locally",
            Event::PermitRefused => "slots_refused",
            Event::PermitReleased => "slots_released",
            Event::PermitExpired => "slots_expired",
            Event::PermitStoreFailed => "slot_store_errors",
        }
    }

    /// Position in `ALL`.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Where counts go (Envoy stats through the host; a map in tests).
pub trait Metrics {
    /// Counts one `event` of rule number `rule`.
    fn count(&self, rule: usize, event: Event);
    /// Counts `n` of `event` of rule number `rule` (units charged).
    fn count_by(&self, rule: usize, event: Event, n: u64);
    /// Counts one store call made, carrying `decisions` decisions.
    fn store_call(&self, _decisions: usize) {}
    /// Records one store call's latency.
    fn store_latency(&self, _ms: u64) {}
    /// Exports the store's INFO figures.
    fn store_stats(&self, _stats: &crate::store::stats::StoreStats) {}
}

/// The full metric name of one rule's event.
pub fn metric_name(rule: &str, event: Event) -> String {
    format!("ratelimit.{rule}.{}", event.name())
}

#[cfg(test)]
pub(crate) mod fake {
    //! Counts in a map, for tests.
    use std::cell::RefCell;
    use std::collections::HashMap;

    use super::{Event, Metrics};

    /// Counted events.
    #[derive(Default)]
    pub struct FakeMetrics(pub RefCell<HashMap<(usize, Event), u64>>);

    impl FakeMetrics {
        /// Count of one rule's event.
        pub fn get(&self, rule: usize, event: Event) -> u64 {
            self.0.borrow().get(&(rule, event)).copied().unwrap_or(0)
        }
    }

    impl Metrics for FakeMetrics {
        fn count(&self, rule: usize, event: Event) {
            self.count_by(rule, event, 1);
        }
        fn count_by(&self, rule: usize, event: Event, n: u64) {
            *self.0.borrow_mut().entry((rule, event)).or_insert(0) += n;
        }
    }
}
