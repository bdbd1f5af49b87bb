//! What the decision script is asked: each limit's parameters
//! (`LimitSpec`) and what a decision does with it (`Op`), one decision's
//! limits (`DecisionCall`), and the script's bounds. `store::script_call`
//! writes them as the script's KEYS and ARGV; the reference model
//! (`model`) decides them in Rust.

use crate::algorithm::Algorithm;
use crate::outcome::LimitOutcome;
use crate::time::Instant;

/// One limit's parameters as the script receives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitSpec {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Requests (cost units) per window.
    pub limit: u64,
    /// Window length in milliseconds.
    pub window_ms: u64,
    /// Bucket capacity (token_bucket) or back-to-back requests (gcra).
    pub burst: u64,
}

impl LimitSpec {
    /// This limit as an operator's override of `limit` makes it
    /// (`lua/override.lua`): a token bucket whose burst is its limit takes
    /// the new limit as both; `None` for a limit the script ignores (0,
    /// times the window past 2^53, a sliding_log's past its bound).
    pub fn overridden(&self, limit: u64) -> Option<LimitSpec> {
        let exact = limit >= 1 && limit.checked_mul(self.window_ms).is_some_and(|x| x < TOP + 1);
        if !exact || (self.algorithm == Algorithm::SlidingLog && limit > SLIDING_LOG_MAX) {
            return None;
        }
        let follows = self.algorithm == Algorithm::TokenBucket && self.burst == self.limit;
        Some(LimitSpec { limit, burst: if follows { limit } else { self.burst }, ..*self })
    }
}

/// The largest sliding_log limit (its log holds one entry per request).
pub const SLIDING_LOG_MAX: u64 = 10_000;

/// The most decisions one call may carry (the script refuses more).
pub const MAX_DECISIONS: usize = 256;
/// The most limits one decision may have, and distinct specs one call.
pub const MAX_LIMITS: usize = 64;
/// The largest time or count the script reports: 2^53 - 1.
pub const TOP: u64 = (1 << 53) - 1;

/// What one limit does in a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Consume this many units if every limit of the decision admits.
    Use(u64),
    /// token_bucket and gcra: `Use`, for a reservation; the store's reply,
    /// if it admits, carries the reservation's `Mark` (see `Mark::of`).
    Reserve(u64),
    /// Allowed iff this many units remain (the reserve); consumes nothing.
    Check(u64),
    /// Add this many units whatever is left, going into debt if need be.
    Charge(u64),
    /// Give back this many units of a reservation made at `at` (the
    /// caller's clock then): window counts lose them in the window the
    /// reservation went into (never below 0); a token bucket or GCRA lead
    /// falls by them, but never below what it would be had the request
    /// cost that much less from the start, as its `mark` tells (which
    /// they need; windows take none). Never refused.
    Refund { amount: u64, at: Instant, mark: Option<Mark> },
    /// concurrency: take a permit with this id (unique across the fleet) for
    /// a stream, if every limit of the decision admits; the second number
    /// is the client's streams this proxy admitted from its local share
    /// while the store failed and the store does not hold yet: counted
    /// with the take (admitted iff held + them + 1 <= limit), not written.
    Take(PermitId, u64),
    /// concurrency: the stream holding this slot ended; never refused.
    Release(PermitId),
    /// concurrency: the stream holding this slot lives on; never refused
    /// (a permit that expired meanwhile is taken again).
    Renew(PermitId),
}

/// Where a token bucket or GCRA stood right after a reservation: which
/// bucket (`born_ms`, the store's clock when its key was created: a key
/// created again after it expired is another bucket, which was full
/// meanwhile) and all that had been added to it (`count`, modulo
/// `COUNT`). Its refund carries it: what was added since bounds what the
/// bucket can be given back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mark {
    /// When the bucket's key was created (the store's clock, ms).
    pub born_ms: u64,
    /// What had been added to it, modulo `COUNT`.
    pub count: u64,
}

/// A bucket counts what is added to it modulo this (2^48).
pub const COUNT: u64 = 1 << 48;

impl Mark {
    /// The outcome an admitted `Reserve` of a bucket of `spec` stands for,
    /// and its mark: the script's reply says the lead after (in units of
    /// 1/limit ms; remaining and reset follow from it, as the script
    /// computes them for a use), born and count instead of remaining,
    /// reset and retry. `None` for any other outcome.
    pub fn of(spec: &LimitSpec, reply: &LimitOutcome) -> Option<(LimitOutcome, Mark)> {
        let count = reply.retry_after_ms.filter(|_| reply.allowed)?;
        let lead = reply.remaining;
        let tolerance = spec.burst.saturating_mul(spec.window_ms);
        let outcome = LimitOutcome {
            allowed: true,
            remaining: tolerance.saturating_sub(lead) / spec.window_ms.max(1),
            reset_ms: lead.div_ceil(spec.limit.max(1)),
            retry_after_ms: Some(0),
            overridden: reply.overridden,
        };
        Some((outcome, Mark { born_ms: reply.reset_ms, count }))
    }
}

/// A concurrency permit: the id of one stream's member in its client's set
/// (drawn at random per stream), not a count, a hash slot or a table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PermitId(pub u64);

impl Op {
    /// The op's code in ARGV.
    pub(crate) fn code(self) -> &'static str {
        match self {
            Op::Use(_) => "u",
            Op::Reserve(_) => "v",
            Op::Check(_) => "k",
            Op::Charge(_) => "g",
            Op::Refund { .. } => "f",
            Op::Take(..) => "u",
            Op::Release(_) => "r",
            Op::Renew(_) => "n",
        }
    }

    /// Its amount: the cost, the reserve or the charge.
    pub(crate) fn amount(self) -> u64 {
        match self {
            Op::Use(a) | Op::Reserve(a) | Op::Check(a) | Op::Charge(a) | Op::Refund { amount: a, .. } => a,
            Op::Take(_, here) => here.saturating_add(1),
            Op::Release(_) | Op::Renew(_) => 1,
        }
    }

    /// The permit a concurrency op is about.
    pub fn permit_id(self) -> Option<PermitId> {
        match self {
            Op::Take(id, _) | Op::Release(id) | Op::Renew(id) => Some(id),
            _ => None,
        }
    }

    /// A refund's mark.
    pub fn mark(self) -> Option<Mark> {
        match self {
            Op::Refund { mark, .. } => mark,
            _ => None,
        }
    }

    /// Whether a decision doing it reads its client's overrides: requests,
    /// leases and charges do; refunds, releases and renewals decide
    /// nothing an override changes (`ScriptCall::with_overrides`).
    pub fn reads_overrides(self) -> bool {
        !matches!(self, Op::Refund { .. } | Op::Release(_) | Op::Renew(_))
    }

    /// Whether the op is applied whatever the limits say (a charge, or a
    /// slot's release or renewal): a decision of such ops is never refused.
    pub fn after_the_fact(self) -> bool {
        matches!(self, Op::Charge(_) | Op::Refund { .. } | Op::Release(_) | Op::Renew(_))
    }

    /// The clock its keys are named from: a refund's reservation time, or
    /// `now` for every other op.
    pub fn keys_at(self, now: Instant) -> Instant {
        match self {
            Op::Refund { at, .. } => at,
            _ => now,
        }
    }
}

/// One limit of one decision.
#[derive(Clone, Copy, Debug)]
pub struct LimitCall<'a> {
    /// The rule the limit belongs to (part of its keys).
    pub rule: &'a str,
    /// The limit.
    pub spec: LimitSpec,
    /// What the decision does with it.
    pub op: Op,
    /// fixed_window only: shifts its window boundaries by this many ms
    /// (less than the window); `None` = aligned windows (offset 0). (A
    /// concurrency limit's permit id and a refund's mark ride in the same
    /// argument: see `Op`.)
    pub offset_ms: Option<u64>,
}

/// One decision: limits of ONE identity, decided together (all or nothing
/// when they use and check; a charge is always applied).
pub struct DecisionCall<'a> {
    /// The client's escaped identity (the keys' hash tag).
    pub identity: &'a str,
    /// Its limits, in reply order.
    pub limits: &'a [LimitCall<'a>],
}
