//! The invariants checked after every step, each named as README's
//! Guarantees table names it. The store's clock is Redis's own (real
//! time): the limits are an hour long, so a run never sees them refill
//! more than the refill each check allows for.

/// `fixed_window` 20 an hour, fail closed: never more than 20 admitted.
pub const FW_LIMIT: u64 = 20;
/// `token_bucket` 20 an hour, burst 20, leased (max_units 8), fail closed.
pub const TB_BURST: u64 = 20;
/// `concurrency` 3, fail closed, `max_hold` 60 s.
pub const CC_LIMIT: u64 = 3;

/// `concurrency` 2, fail open (`fleet_size` 1: the local share is 2).
pub const CO_LIMIT: u64 = 2;

/// What the simulation has seen of one client.
#[derive(Clone, Debug, Default)]
pub struct Client {
    /// Requests of `fw` let through.
    pub fw_admitted: u64,
    /// Requests of `tb` let through.
    pub tb_admitted: u64,
    /// Streams of `cc` let through and not ended.
    pub cc_open: u64,
    /// Streams of `cc` a VM reload took away (let through or still
    /// deciding): their slots expire within `max_hold`, nobody releases them.
    pub cc_reloaded: u64,
    /// Streams of `co` let through and not ended.
    pub co_open: u64,
}

/// A violated invariant: its name and what was seen.
pub type Violation = String;

/// `exact.fixed_window`, `exact.token_bucket_leased`, `concurrency.in_flight`.
pub fn check(client: &Client, run_secs: u64) -> Result<(), Violation> {
    if client.fw_admitted > FW_LIMIT {
        return Err(format!("exact.fixed_window: {} admitted of {FW_LIMIT} an hour", client.fw_admitted));
    }
    // 20 an hour: one token every 180 s of the run, and one begun.
    let refill = run_secs / 180 + 1;
    if client.tb_admitted > TB_BURST + refill {
        return Err(format!(
            "exact.token_bucket_leased: {} admitted, more than burst {TB_BURST} + refill {refill}",
            client.tb_admitted
        ));
    }
    if client.cc_open > CC_LIMIT {
        return Err(format!("concurrency.in_flight: {} streams in flight, limit {CC_LIMIT}", client.cc_open));
    }
    Ok(())
}

/// `concurrency.released`: once every stream ended and every call
/// settled, a client's slots left in the store are only those a release
/// the store did not take left to expire (`slot_store_errors`, of every
/// client) and those of streams a VM reload took away.
pub fn check_released(slots_left: u64, release_failures: i64, reloaded: u64) -> Result<(), Violation> {
    let allowed = u64::try_from(release_failures.max(0)).unwrap_or(0) + reloaded;
    if slots_left > allowed {
        return Err(format!(
            "concurrency.released: {slots_left} slots left in the store after every stream ended, {release_failures} releases failed, {reloaded} streams lost in reloads"
        ));
    }
    Ok(())
}

/// `concurrency.after_outage`: a `co` stream the store let through leaves
/// at most the limit in flight, the streams the local share let through
/// during an outage included, but for those let through after its own
/// decision was planned (`unseen`: concurrent with it, during an outage).
pub fn check_after_outage(open: u64, unseen: u64) -> Result<(), Violation> {
    if open.saturating_sub(unseen) > CO_LIMIT {
        return Err(format!(
            "concurrency.after_outage: the store admitted while {open} streams are in flight ({unseen} let through since it was planned), limit {CO_LIMIT}"
        ));
    }
    Ok(())
}
