//! What the access log tells of a decided request: which rule answered,
//! by which of its limits, with what left, and what decided it (the store,
//! a cached denial, a lease, the fallback, or a refusal before the store).
//! The worker writes it as filter state (`worker/access_log.rs`).

use crate::response::Shown;

/// What decided a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecidedBy {
    /// The decision script in Redis.
    Store,
    /// A denial this proxy cached.
    DenyCache,
    /// Units a lease holds in this proxy.
    Lease,
    /// The local share while the store failed (an open rule).
    Fallback,
    /// The store failed and the rule fails closed (503).
    Unavailable,
    /// Refused before the store: its body (400, 408, 413, 501).
    Body,
    /// Refused before the store: its model has no price (400).
    Price,
    /// Refused before the store: its stated cost (400).
    Cost,
    /// Refused before the store: its key has several values (400).
    Key,
}

impl DecidedBy {
    /// Its name in the access log.
    pub fn name(self) -> &'static str {
        match self {
            DecidedBy::Store => "store",
            DecidedBy::DenyCache => "deny_cache",
            DecidedBy::Lease => "lease",
            DecidedBy::Fallback => "fallback",
            DecidedBy::Unavailable => "unavailable",
            DecidedBy::Body => "body",
            DecidedBy::Price => "price",
            DecidedBy::Cost => "cost",
            DecidedBy::Key => "key",
        }
    }
}

/// A decided request, as its access log tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// The rule that answered (index into the configuration's rules).
    pub rule: usize,
    /// What decided it.
    pub by: DecidedBy,
    /// Its limit that decided (the one that refused, or the most
    /// restrictive): `None` when it was refused before any limit.
    pub shown: Option<Shown>,
    /// A budget's reservation: the units the request reserved, or asked to.
    pub reservation: Option<u64>,
}

impl Trace {
    /// Rule `r`'s refusal by `by`, before any limit.
    pub fn refused(r: usize, by: DecidedBy) -> Trace {
        Trace { rule: r, by, shown: None, reservation: None }
    }
}
