//! The arguments of one decision-script call (protocol v2, see
//! `lua/driver.lua`): a batch of decisions, each every limit of ONE
//! identity, and the decoding of its reply.

use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::keys::limit_keys;
use crate::model::LimitSpec;
use crate::store::StoreError;

/// What one limit does in a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Consume this many units if the whole decision admits.
    Use(u64),
    /// Allowed iff at least this many units remain; writes nothing.
    Check(u64),
    /// Add this many units unconditionally (a debt past the limit is kept).
    Charge(u64),
}

/// One limit of one decision.
#[derive(Clone, Copy, Debug)]
pub struct LimitCall<'a> {
    /// The rule the limit belongs to (part of its keys).
    pub rule: &'a str,
    /// The limit.
    pub spec: LimitSpec,
    /// What to do with it.
    pub op: Op,
    /// fixed_window: this client's window offset (`None`: aligned).
    pub offset_ms: Option<u64>,
}

/// One decision: limits of ONE identity, decided together.
pub struct DecisionCall<'a> {
    /// The escaped identity (the keys' hash tag).
    pub identity: &'a str,
    /// Its limits, in order.
    pub limits: &'a [LimitCall<'a>],
}

/// KEYS and ARGV of one EVALSHA, and what is needed to decode its reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScriptCall {
    /// Redis keys, each decision's with its identity's hash tag.
    pub keys: Vec<String>,
    /// now, the spec table, then the decisions.
    pub args: Vec<String>,
    /// Per decision, its limits' specs: what the reply must match.
    shape: Vec<Vec<LimitSpec>>,
}

/// The largest value a reply can hold for `spec`, debts included: reset
/// and retry of a window take at most two windows (sliding_window) or one;
/// a bucket's at most the time to refill two buckets (a full one and the
/// capped debt).
fn max_wait_ms(spec: &LimitSpec) -> u64 {
    let window = spec.window_ms;
    match spec.algorithm {
        Algorithm::SlidingWindow => window.saturating_mul(2),
        Algorithm::FixedWindow | Algorithm::SlidingLog => window,
        Algorithm::TokenBucket | Algorithm::Gcra => {
            let units = u128::from(spec.burst) * u128::from(window) * 2;
            u64::try_from(units.div_ceil(u128::from(spec.limit.max(1)))).unwrap_or(u64::MAX)
        }
    }
}

/// The most units a limit can report remaining.
fn capacity(spec: &LimitSpec) -> u64 {
    match spec.algorithm {
        Algorithm::TokenBucket | Algorithm::Gcra => spec.burst,
        _ => spec.limit,
    }
}

/// Whether `d` is a value the script can produce for `spec`.
fn possible(spec: &LimitSpec, d: &Decision) -> bool {
    let wait = max_wait_ms(spec);
    d.remaining <= capacity(spec) && d.reset_ms <= wait && d.retry_after_ms.is_none_or(|r| r <= wait)
}

impl ScriptCall {
    /// Builds the call deciding `decisions` in order at `now_ms`.
    pub fn new(domain: &str, now_ms: u64, decisions: &[DecisionCall<'_>]) -> ScriptCall {
        let mut specs: Vec<LimitSpec> = Vec::new();
        let mut keys = Vec::new();
        let mut tail = Vec::new();
        let mut shape = Vec::with_capacity(decisions.len());
        for d in decisions {
            shape.push(d.limits.iter().map(|l| l.spec).collect());
            tail.push(d.limits.len().to_string());
            for l in d.limits {
                let index = match specs.iter().position(|s| *s == l.spec) {
                    Some(i) => i,
                    None => {
                        specs.push(l.spec);
                        specs.len() - 1
                    }
                };
                let offset = match l.spec.algorithm {
                    Algorithm::FixedWindow => l.offset_ms.map(|o| o % l.spec.window_ms.max(1)),
                    _ => None,
                };
                limit_keys(&mut keys, domain, d.identity, l.rule, &l.spec, now_ms, offset);
                let offset = offset.unwrap_or(0);
                let (op, amount) = match l.op {
                    Op::Use(n) => ("u", n),
                    Op::Check(n) => ("k", n),
                    Op::Charge(n) => ("g", n),
                };
                tail.extend([(index + 1).to_string(), op.to_string(), amount.to_string(), offset.to_string()]);
            }
        }
        let mut args = Vec::with_capacity(3 + specs.len() * 4 + tail.len());
        args.push(now_ms.to_string());
        args.push(specs.len().to_string());
        for s in &specs {
            args.extend([
                s.algorithm.code().to_string(),
                s.limit.to_string(),
                s.window_ms.to_string(),
                s.burst.to_string(),
            ]);
        }
        args.push(decisions.len().to_string());
        args.extend(tail);
        ScriptCall { keys, args, shape }
    }

    /// How many decisions the call carries.
    pub fn decisions(&self) -> usize {
        self.shape.len()
    }

    /// How many integers the reply holds: four per limit.
    pub fn reply_len(&self) -> usize {
        self.shape.iter().map(Vec::len).sum::<usize>() * 4
    }

    /// Splits the flat reply into one `Vec<Decision>` per decision,
    /// refusing values the script cannot produce for the limits asked (a
    /// store that answers `[0,0,i64::MAX,i64::MAX]` must not make a
    /// Retry-After of 290 million years, or a deny-cache entry to match).
    pub fn decode(&self, reply: &[i64]) -> Result<Vec<Vec<Decision>>, StoreError> {
        if reply.len() != self.reply_len() {
            return Err(StoreError::Malformed("wrong number of values for the limits asked"));
        }
        let mut rest = reply;
        let mut out = Vec::with_capacity(self.shape.len());
        for specs in &self.shape {
            let (mine, tail) = rest.split_at(specs.len() * 4);
            rest = tail;
            let decisions: Option<Vec<Decision>> = mine
                .chunks_exact(4)
                .zip(specs)
                .map(|(c, spec)| Decision::from_wire(c[0], c[1], c[2], c[3]).filter(|d| possible(spec, d)))
                .collect();
            out.push(decisions.ok_or(StoreError::Malformed("impossible decision values"))?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn one(spec: LimitSpec) -> ScriptCall {
        let limits = [LimitCall { rule: "r", spec, op: Op::Use(1), offset_ms: None }];
        ScriptCall::new("t", 120_000, &[DecisionCall { identity: "a", limits: &limits }])
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_batch_carries_a_spec_table_and_each_decision_in_order() {
        let sw = LimitSpec { algorithm: Algorithm::SlidingWindow, limit: 100, window_ms: 60_000, burst: 100 };
        let fw = LimitSpec { algorithm: Algorithm::FixedWindow, limit: 10, window_ms: 60_000, burst: 10 };
        let a = [LimitCall { rule: "api", spec: sw, op: Op::Use(1), offset_ms: None }];
        let b = [
            LimitCall { rule: "api", spec: sw, op: Op::Check(5), offset_ms: None },
            LimitCall { rule: "q", spec: fw, op: Op::Charge(7), offset_ms: Some(30_000) },
        ];
        let call = ScriptCall::new(
            "t",
            120_000,
            &[DecisionCall { identity: "a", limits: &a }, DecisionCall { identity: "b", limits: &b }],
        );
        assert_eq!(
            call.keys,
            [
                "t:{a}:api:sw:60000:2",
                "t:{a}:api:sw:60000:1",
                "t:{b}:api:sw:60000:2",
                "t:{b}:api:sw:60000:1",
                "t:{b}:q:fo:60000:2"
            ]
        );
        assert_eq!(
            call.args,
            [
                "120000", "2", "sw", "100", "60000", "100", "fw", "10", "60000", "10", "2", "1", "1", "u", "1", "0",
                "2", "1", "k", "5", "0", "2", "g", "7", "30000"
            ]
        );
        assert_eq!(call.reply_len(), 12);
    }

    #[test]
    #[wasm_bindgen_test]
    fn replies_beyond_what_the_limit_allows_are_refused() {
        let fw = LimitSpec { algorithm: Algorithm::FixedWindow, limit: 5, window_ms: 1000, burst: 5 };
        let call = one(fw);
        assert!(call.decode(&[0, 0, 1000, 1000]).is_ok());
        for bad in [[0, 0, i64::MAX, i64::MAX], [0, 6, 10, 10], [0, 0, 1001, 10], [0, 0, 10, 1001], [1, 0, 0, -2]] {
            assert_eq!(call.decode(&bad), Err(StoreError::Malformed("impossible decision values")), "{bad:?}");
        }
        let tb = LimitSpec { algorithm: Algorithm::TokenBucket, limit: 3, window_ms: 1000, burst: 4 };
        let call = one(tb);
        assert!(call.decode(&[0, 0, 2667, 2667]).is_ok(), "ceil(2 * 4 * 1000 / 3): a full bucket and its capped debt");
        assert!(call.decode(&[0, 0, 2668, 0]).is_err());
        assert!(call.decode(&[1, 5, 0, 0]).is_err(), "more than the burst");
    }
}
