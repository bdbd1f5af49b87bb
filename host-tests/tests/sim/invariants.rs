//! The invariants checked after every step, each named as README's
//! Guarantees table names it. The store's clock is Redis's own (real
//! time): the limits are an hour long, so a run never sees them refill
//! more than the refill each check allows for.

/// `fixed_window` 20 an hour, fail closed: never more than 20 admitted.
pub const FW_LIMIT: u64 = 20;
/// `token_bucket` 20 an hour, burst 20, leased (max_units 8), fail closed.
pub const TB_BURST: u64 = 20;
/// `sliding_log` 20 an hour, fail closed.
pub const SL_LIMIT: u64 = 20;
/// `gcra` 20 an hour, burst 20, leased (max_units 8), fail closed.
pub const GC_BURST: u64 = 20;
/// Requests one lease admits at most (`tb` and `gc`).
pub const MAX_UNITS: u64 = 8;
/// `concurrency` 3, fail closed, `max_hold` 60 s.
pub const CC_LIMIT: u64 = 3;
/// `ccx`: a `fixed_window` of 4 an hour per client and path, fail closed,
/// on requests that also take a `cc` slot (in another decision).
pub const CX_LIMIT: u64 = 4;

/// `concurrency` 2, fail open (`fleet_size` 1: the local share is 2).
pub const CO_LIMIT: u64 = 2;

/// `rv`: a `fixed_window` of 200 units an hour in reservation mode, fail
/// closed; each request's body (`RV_BODY`) makes it reserve `RV_RESERVED`
/// and its response uses 1 to `RV_RESERVED` of them.
pub const RV_LIMIT: u64 = 200;
/// The body of an `rv` request: 30 output tokens, 17 bytes.
pub const RV_BODY: &str = r#"{"max_tokens":30}"#;
/// What an `rv` request reserves: 30 + 17.
pub const RV_RESERVED: u64 = 47;

/// What the simulation has seen of one client. Counts of admissions are
/// of streams begun since the store last forgot everything (a flush).
#[derive(Clone, Debug, Default)]
pub struct Client {
    /// Requests of `fw` let through.
    pub fw_admitted: u64,
    /// Requests of `tb` let through.
    pub tb_admitted: u64,
    /// Requests of `sl` let through.
    pub sl_admitted: u64,
    /// Requests of `gc` let through.
    pub gc_admitted: u64,
    /// Requests of `ccx` let through.
    pub cx_admitted: u64,
    /// Streams of `cc` let through and not ended.
    pub cc_open: u64,
    /// Streams of `cc` a VM reload took away (let through or still
    /// deciding): their slots expire within `max_hold`, nobody releases them.
    pub cc_reloaded: u64,
    /// Streams of `co` let through and not ended.
    pub co_open: u64,
    /// Units `tk` streams that ended owe: the usage their response
    /// reported, or `default` (7) for a client gone before it.
    pub tk_owed: u64,
    /// Units `rv` streams let through and not ended hold: their
    /// reservations (streams begun since the last flush).
    pub rv_held: u64,
    /// Units `rv` streams let through and ended used: their usage, the
    /// default (7) for a client gone before the response, the whole
    /// reservation for one a VM reload took (nobody settles it).
    pub rv_used: u64,
    /// What reservations taken before the last flush may still give back
    /// into the counts after it (their refunds land in windows the store
    /// counts afresh): `RV_RESERVED` for every `rv` stream begun before.
    pub rv_slack: u64,
    /// What every `rv` stream that ended owes, flushes or not.
    pub rv_owed: u64,
}

/// A violated invariant: its name and what was seen.
pub type Violation = String;

/// `exact.fixed_window`, `exact.sliding_log`, `exact.token_bucket_leased`,
/// `exact.gcra_leased`, `concurrency.in_flight`. `run_secs`: the store's
/// time so far (its buckets refill one unit every 180 s); `lease_slack`:
/// after a flush, what leases granted before it may still admit (the
/// store forgot their units), else 0.
pub fn check(client: &Client, run_secs: u64, lease_slack: u64) -> Result<(), Violation> {
    if client.fw_admitted > FW_LIMIT {
        return Err(format!("exact.fixed_window: {} admitted of {FW_LIMIT} an hour", client.fw_admitted));
    }
    if client.cx_admitted > CX_LIMIT {
        return Err(format!("exact.fixed_window: {} admitted of {CX_LIMIT} an hour (ccx)", client.cx_admitted));
    }
    if client.sl_admitted > SL_LIMIT {
        return Err(format!("exact.sliding_log: {} admitted of {SL_LIMIT} an hour", client.sl_admitted));
    }
    // 20 an hour: one token every 180 s of the run, and one begun.
    let refill = run_secs / 180 + 1;
    for (name, admitted, burst) in
        [("token_bucket_leased", client.tb_admitted, TB_BURST), ("gcra_leased", client.gc_admitted, GC_BURST)]
    {
        if admitted > burst + refill + lease_slack {
            return Err(format!(
                "exact.{name}: {admitted} admitted, more than burst {burst} + refill {refill} + {lease_slack} leased before a flush"
            ));
        }
    }
    if client.rv_held + client.rv_used > RV_LIMIT + client.rv_slack {
        return Err(format!(
            "reserved.never_over: {} units held and {} used of {RV_LIMIT} an hour ({} refunds of reservations before a flush may add)",
            client.rv_held, client.rv_used, client.rv_slack
        ));
    }
    if client.cc_open > CC_LIMIT {
        return Err(format!("concurrency.in_flight: {} streams in flight, limit {CC_LIMIT}", client.cc_open));
    }
    Ok(())
}

/// `charges.once`: the store never holds more units of a client's budget
/// than its ended streams owe; `charges.exact`: in a calm schedule (no
/// fault, reload or flush), exactly what they owe, once every call settled.
pub fn check_charged(charged: u64, owed: u64, calm: bool) -> Result<(), Violation> {
    if charged > owed {
        return Err(format!("charges.once: {charged} units charged, the ended streams owe {owed}"));
    }
    if calm && charged != owed {
        return Err(format!("charges.exact: {charged} units charged, the ended streams owe {owed} (a calm schedule)"));
    }
    Ok(())
}

/// `reserved.settled`: in a calm schedule, once every call settled, the
/// store holds exactly what the ended `rv` streams used (every reservation
/// settled to its usage, or given back whole for a request that never
/// went on); in any schedule, never more than they reserved.
pub fn check_settled(held: u64, owed: u64, reserved: u64, calm: bool) -> Result<(), Violation> {
    if held > reserved {
        return Err(format!("reserved.settled: the store holds {held} units, more than the {reserved} reserved"));
    }
    if calm && held != owed {
        return Err(format!(
            "reserved.settled: the store holds {held} units, the ended streams used {owed} (a calm schedule)"
        ));
    }
    Ok(())
}

/// `memory.shared`: each shared-data table keeps within its slots.
pub fn check_tables(keys: &[String], slots: usize) -> Result<(), Violation> {
    for table in ["ratelimit.lease.", "ratelimit.deny.", "ratelimit.fallback.", "ratelimit.breaker."] {
        let n = keys.iter().filter(|k| k.starts_with(table)).count();
        if n > slots {
            return Err(format!("memory.shared: {n} keys of {table}*, {slots} slots"));
        }
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
