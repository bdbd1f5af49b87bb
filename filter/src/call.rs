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
    shape: Vec<usize>,
}

impl ScriptCall {
    /// Builds the call deciding `decisions` in order at `now_ms`.
    pub fn new(domain: &str, now_ms: u64, decisions: &[DecisionCall<'_>]) -> ScriptCall {
        let mut specs: Vec<LimitSpec> = Vec::new();
        let mut keys = Vec::new();
        let mut tail = Vec::new();
        let mut shape = Vec::with_capacity(decisions.len());
        for d in decisions {
            shape.push(d.limits.len());
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
                    Algorithm::FixedWindow => l.offset_ms.unwrap_or(0) % l.spec.window_ms.max(1),
                    _ => 0,
                };
                limit_keys(&mut keys, domain, d.identity, l.rule, &l.spec, now_ms + offset);
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
        self.shape.iter().sum::<usize>() * 4
    }

    /// Splits the flat reply into one `Vec<Decision>` per decision.
    pub fn decode(&self, reply: &[i64]) -> Result<Vec<Vec<Decision>>, StoreError> {
        if reply.len() != self.shape.iter().sum::<usize>() * 4 {
            return Err(StoreError::Malformed("wrong number of values for the limits asked"));
        }
        let mut rest = reply;
        let mut out = Vec::with_capacity(self.shape.len());
        for &n in &self.shape {
            let (mine, tail) = rest.split_at(n * 4);
            rest = tail;
            let decisions: Option<Vec<Decision>> =
                mine.chunks_exact(4).map(|c| Decision::from_wire(c[0], c[1], c[2], c[3])).collect();
            out.push(decisions.ok_or(StoreError::Malformed("impossible decision values"))?);
        }
        Ok(out)
    }
}
