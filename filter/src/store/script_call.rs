//! The decision script's protocol (v5) on the Rust side, and its only
//! owner here: the KEYS and ARGV of one call carrying a batch of
//! decisions, and the decoding of its reply.
//!
//! Their layout is written once, at the top of `lua/driver.lua` (its
//! `@keys`, `@argv` and `@reply` lines, and what they mean); the tests in
//! `layout.rs` read those lines and check `ScriptCall::new` and
//! `ScriptCall::decode` against them. A batch of decisions doing the same
//! sends what they do once (one shape), so the script reads and checks
//! fewer arguments. A decision that met a Redis error inside the script
//! (`WRONGTYPE`) has the error's text in place of its first value and
//! zeros after it: it failed alone, nothing of it was written, the others
//! were decided.

use crate::algorithm::{Algorithm, CC_RETRY_MS};
use crate::keys::{limit_keys, override_key};
use crate::outcome::{LimitOutcome, Overridden};
use crate::spec::{DecisionCall, LimitSpec, Op, COUNT, TOP};
use crate::store::{redis_error, StoreError};
use crate::time::Instant;

/// The longest error text the script puts in a reply (`ERROR_TEXT` in
/// `lua/driver.lua`): Redis's `WRONGTYPE` message whole.
pub const ERROR_TEXT: usize = 66;

/// The script's reply as the transports read it: its values as integers,
/// and the texts that stood in place of some (the errors of the decisions
/// that failed inside Redis).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScriptReply {
    /// Every value of the reply, in order; 0 where a text stood.
    pub ints: Vec<i64>,
    /// Each text with its index in `ints`, in order.
    pub texts: Vec<(usize, String)>,
}

impl ScriptReply {
    /// An empty reply with room for `n` values.
    pub fn with_capacity(n: usize) -> ScriptReply {
        ScriptReply { ints: Vec::with_capacity(n), texts: Vec::new() }
    }

    /// Appends an integer.
    pub fn push_int(&mut self, value: i64) {
        self.ints.push(value);
    }

    /// Appends a text (a 0 in `ints`).
    pub fn push_text(&mut self, text: String) {
        self.texts.push((self.ints.len(), text));
        self.ints.push(0);
    }
}

impl From<Vec<i64>> for ScriptReply {
    fn from(ints: Vec<i64>) -> ScriptReply {
        ScriptReply { ints, texts: Vec::new() }
    }
}

/// One decision's result: one `LimitOutcome` per limit, or why the store gave
/// none.
pub type DecisionResult = Result<Vec<LimitOutcome>, StoreError>;

/// KEYS and ARGV of one EVALSHA, and what is needed to decode its reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScriptCall {
    /// Redis keys; those of one decision carry its identity's hash tag.
    pub keys: Vec<String>,
    /// The arguments (laid out as `lua/driver.lua`'s `@argv` says).
    pub args: Vec<String>,
    /// Per limit, its spec and op (what its reply may say follows).
    asked: Vec<(LimitSpec, Op)>,
    /// Per decision, its number of limits and whether it reads overrides.
    sizes: Vec<(usize, bool)>,
    /// The caller's clock it decides on (windows' keys are named from it).
    pub now: Instant,
}

impl ScriptCall {
    /// The call deciding `decisions` in order at `now_ms` (the caller's
    /// clock), reading no overrides. Equal specs share one entry of the
    /// spec table.
    pub fn new(domain: &str, now: Instant, decisions: &[DecisionCall<'_>]) -> ScriptCall {
        ScriptCall::with_overrides(domain, now, decisions, false)
    }

    /// `new`, each decision that can be overridden reading its client's
    /// overrides when `overrides` (the `@overrides` line of
    /// `lua/driver.lua`): one override key per rule (a run of its limits),
    /// before its limits' keys.
    pub fn with_overrides(domain: &str, now: Instant, decisions: &[DecisionCall<'_>], overrides: bool) -> ScriptCall {
        ScriptCall::reading(domain, now, decisions, &vec![overrides; decisions.len()])
    }

    /// `with_overrides`, decision `i` reading its client's overrides when
    /// `reads[i]` (the index of overrides names one of its rules: a
    /// decision without reads nothing more than with overrides off).
    pub fn reading(domain: &str, now: Instant, decisions: &[DecisionCall<'_>], reads: &[bool]) -> ScriptCall {
        let now_ms = now.ms();
        // Plain loops and pushes: every iterator adapter here would be code
        // in the shipped module, which has a size budget.
        let mut specs: Vec<LimitSpec> = Vec::new();
        let mut limits = 0;
        for d in decisions {
            limits += d.limits.len();
            for l in d.limits {
                if !specs.contains(&l.spec) {
                    specs.push(l.spec);
                }
            }
        }
        let mut call = ScriptCall {
            keys: Vec::with_capacity(limits * 2),
            args: Vec::new(),
            asked: Vec::with_capacity(limits),
            sizes: Vec::with_capacity(decisions.len()),
            now,
        };
        let mut args = Vec::with_capacity(4 + specs.len() * 4 + decisions.len() * 2 + limits * 4);
        args.push(now_ms.to_string());
        args.push(specs.len().to_string());
        for s in &specs {
            args.push(s.algorithm.code().to_string());
            args.push(s.limit.to_string());
            args.push(s.window_ms.to_string());
            args.push(s.burst.to_string());
        }
        // A decision's shape: its limits' arguments (with their count in
        // front), sent once for every decision doing the same.
        let mut shapes: Vec<Vec<String>> = Vec::new();
        let mut picks: Vec<String> = Vec::with_capacity(decisions.len());
        for (i, d) in decisions.iter().enumerate() {
            let mut shape = Vec::with_capacity(1 + d.limits.len() * 4);
            shape.push(d.limits.len().to_string());
            // Reading overrides: an override key per rule first, and the op
            // of each rule's first limit in capitals.
            let reads = reads.get(i) == Some(&true) && d.limits.iter().any(|l| l.op.reads_overrides());
            let mut previous = None;
            for l in d.limits.iter().filter(|_| reads) {
                if previous != Some(l.rule) {
                    call.keys.push(override_key(domain, d.identity, l.rule));
                }
                previous = Some(l.rule);
            }
            let mut previous = None;
            for l in d.limits {
                let index = specs.iter().position(|s| *s == l.spec).unwrap_or(0);
                shape.push((index + 1).to_string());
                let starts = reads && previous != Some(l.rule);
                previous = Some(l.rule);
                shape.push(if starts { l.op.code().to_ascii_uppercase() } else { l.op.code().to_string() });
                shape.push(l.op.amount().to_string());
                // The offset argument: a concurrency permit's id, a refund's
                // mark, or the offset.
                shape.push(match (l.op.permit_id(), l.op.mark()) {
                    (Some(id), _) => id.0.to_string(),
                    (_, Some(m)) => format!("{}:{}", m.born_ms, m.count),
                    _ => l.offset_ms.unwrap_or(0).to_string(),
                });
                limit_keys(&mut call.keys, domain, d.identity, l.rule, &l.spec, l.offset_ms, l.op.keys_at(now));
                call.asked.push((l.spec, l.op));
            }
            call.sizes.push((d.limits.len(), reads));
            let pick = match shapes.iter().position(|s| *s == shape) {
                Some(i) => i,
                None => {
                    shapes.push(shape);
                    shapes.len() - 1
                }
            };
            picks.push((pick + 1).to_string());
        }
        args.push(shapes.len().to_string());
        for shape in shapes {
            args.extend(shape);
        }
        args.push(decisions.len().to_string());
        args.extend(picks);
        call.args = args;
        call
    }

    /// Splits the reply into one result per decision: its `Vec<LimitOutcome>`,
    /// checking that every value is possible for its limit (as an override
    /// the decision reports left it), or the Redis error that failed it
    /// alone (bounded and printable: its rule's failure policy applies to
    /// it only). A reply that is not one the script gives for this call (a
    /// count of values that is not four per limit, with each limit's limit
    /// after them where an override applied; a text anywhere
    /// but first in a decision's values; a failed decision with values) is
    /// malformed: an error for the whole call. So is a call without
    /// decisions, or with a decision without limits: the script refuses
    /// those, so no reply can be right for them.
    pub fn decode(&self, reply: &ScriptReply) -> Result<Vec<DecisionResult>, StoreError> {
        const WRONG_COUNT: StoreError = StoreError::Malformed("wrong number of values for the limits asked");
        const TEXT: StoreError = StoreError::Malformed("non-integer in the decision");
        if self.sizes.is_empty() || self.sizes.iter().any(|&(n, _)| n == 0) {
            return Err(StoreError::Malformed("a call without decisions or limits"));
        }
        let ints = reply.ints.as_slice();
        let mut texts = reply.texts.iter().peekable();
        let mut out = Vec::with_capacity(self.sizes.len());
        // at: the next value; first: the decision's first limit in `asked`.
        let (mut at, mut first) = (0, 0);
        for &(n, reads) in &self.sizes {
            let (start, end) = (at, at + n * 4);
            let values = ints.get(start..end).ok_or(WRONG_COUNT)?;
            // Reading overrides, the first allowed also says their state,
            // plus twice it (an impossible allowed stays impossible).
            let (state, first_allowed) = match values.first().copied() {
                Some(v) if reads && v >= 6 => (3, v - 6),
                Some(v) if reads && v >= 2 => (1, v - 2),
                v => (0, v.unwrap_or_default()),
            };
            match texts.next_if(|(i, _)| *i < end) {
                Some((i, _)) if *i != start => return Err(TEXT),
                Some((_, text)) => {
                    if state != 0 || values.iter().any(|&v| v != 0) {
                        return Err(StoreError::Malformed("a failed decision with values"));
                    }
                    out.push(Err(redis_error(text)));
                    at = end;
                }
                None => {
                    let limits = if state == 0 { None } else { Some(ints.get(end..end + n).ok_or(WRONG_COUNT)?) };
                    at = end + limits.map_or(0, <[i64]>::len);
                    if texts.next_if(|(i, _)| *i < at).is_some() {
                        return Err(TEXT);
                    }
                    let mut outcomes = Vec::with_capacity(n);
                    for l in 0..n {
                        let &(spec, op) = self.asked.get(first + l).ok_or(WRONG_COUNT)?;
                        let mut four = [0; 4];
                        four.copy_from_slice(values.get(l * 4..l * 4 + 4).unwrap_or(&[0; 4]));
                        if l == 0 {
                            four[0] = first_allowed;
                        }
                        let limit = limits.and_then(|t| t.get(l)).map(|&v| u64::try_from(v).unwrap_or(u64::MAX));
                        let o = decide(spec, op, &four, limit.map(|limit| Overridden { limit, reset: state == 3 }))
                            .ok_or(StoreError::Malformed("impossible decision values"))?;
                        outcomes.push(o);
                    }
                    out.push(Ok(outcomes));
                }
            }
            first += n;
        }
        if at != ints.len() {
            return Err(WRONG_COUNT);
        }
        if texts.next().is_some() {
            return Err(TEXT);
        }
        Ok(out)
    }

    /// How many decisions the call carries.
    pub fn decisions(&self) -> usize {
        self.sizes.len()
    }

    /// How many values the reply holds at most: four per limit; where a
    /// decision reads overrides, each limit's limit too.
    pub fn reply_len(&self) -> usize {
        self.sizes.iter().map(|&(n, reads)| n * 4 + if reads { n } else { 0 }).sum()
    }
}

/// The outcome of one limit asked `op` on `spec` if `values` are possible
/// for it as `overridden` left it (a block: refused, 0 remaining, its time
/// left as reset and retry).
fn decide(spec: LimitSpec, op: Op, values: &[i64], overridden: Option<Overridden>) -> Option<LimitOutcome> {
    let spec = match overridden {
        Some(o) if o.blocked() => {
            let &[0, 0, reset, retry] = values else { return None };
            let ms = u64::try_from(retry)
                .ok()
                .filter(|&ms| ms > 0 && ms <= TOP && reset == retry && op.reads_overrides())?;
            let blocked =
                LimitOutcome { allowed: false, remaining: 0, reset_ms: ms, retry_after_ms: Some(ms), overridden };
            return (!op.after_the_fact()).then_some(blocked);
        }
        Some(o) if o.limit != spec.limit => spec.overridden(o.limit)?,
        _ => spec,
    };
    let mut outcome = Bounds::of(&spec, op).check(values)?;
    outcome.overridden = overridden;
    Some(outcome)
}

/// What the reply for one limit may say (see `lua/driver.lua`: the debts
/// are capped, so every value is bounded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Bounds {
    /// The most units that can remain: the limit, or the burst for
    /// token_bucket and gcra.
    capacity: u64,
    /// The longest reset or retry: sliding_window 2 × window, fixed_window
    /// and sliding_log one window, token_bucket and gcra
    /// ceil(2 × burst × window / limit); never above 2^53 - 1.
    longest_ms: u64,
    /// A use or check of more than the capacity: always denied, retry -1.
    never_fits: bool,
    /// A permit's release or renewal: retry 0, and allowed says whether the
    /// permit was still held.
    never_refused: bool,
    /// A bucket's reservation: admitted, it says its lead after (at most
    /// this tolerance), born and count (see `Mark::of`).
    marked: Option<u64>,
}

impl Bounds {
    fn of(spec: &LimitSpec, op: Op) -> Bounds {
        // burst x window < 2^53 (config and script check it): no overflow.
        let twice = |x: u64| x.saturating_mul(2);
        let (capacity, longest) = match spec.algorithm {
            Algorithm::SlidingWindow => (spec.limit, twice(spec.window_ms)),
            Algorithm::FixedWindow | Algorithm::SlidingLog => (spec.limit, spec.window_ms),
            Algorithm::TokenBucket | Algorithm::Gcra => {
                (spec.burst, twice(spec.burst.saturating_mul(spec.window_ms)).div_ceil(spec.limit.max(1)))
            }
            // A denial's retry is CC_RETRY_MS (lua/driver.lua); reset is 0.
            Algorithm::Concurrency => (spec.limit, spec.window_ms.max(CC_RETRY_MS)),
        };
        let longest_ms = longest.min(TOP);
        // A take counting the streams held outside the store may ask more
        // than the limit: the script refuses it as any full limit (retry
        // CC_RETRY_MS), a permit may free before the next.
        let never_fits = !matches!(op, Op::Charge(_) | Op::Refund { .. } | Op::Take(..)) && op.amount() > capacity;
        // A refund is reported as 1 0 0 0, like a kept permit.
        let never_refused = matches!(op, Op::Release(_) | Op::Renew(_) | Op::Refund { .. });
        let marked = matches!(op, Op::Reserve(_)).then(|| spec.burst.saturating_mul(spec.window_ms));
        Bounds { capacity, longest_ms, never_fits, never_refused, marked }
    }

    /// The outcome if `values` are possible: allowed exactly when the
    /// retry is 0, -1 exactly for an amount that never fits.
    fn check(&self, values: &[i64]) -> Option<LimitOutcome> {
        let &[allowed, remaining, reset, retry] = values else { return None };
        let d = LimitOutcome::from_wire(allowed, remaining, reset, retry)?;
        if let Some(tolerance) = self.marked.filter(|_| d.allowed && !self.never_fits) {
            let fits = d.remaining <= tolerance && d.reset_ms <= TOP && d.retry_after_ms.is_some_and(|c| c < COUNT);
            return fits.then_some(d);
        }
        let retry_ok = match d.retry_after_ms {
            _ if self.never_refused => d.retry_after_ms == Some(0),
            None => self.never_fits && !d.allowed,
            Some(0) => d.allowed && !self.never_fits,
            Some(ms) => !d.allowed && !self.never_fits && ms <= self.longest_ms,
        };
        (retry_ok && d.remaining <= self.capacity && d.reset_ms <= self.longest_ms).then_some(d)
    }
}

#[cfg(test)]
mod layout;
#[cfg(test)]
mod tests;
