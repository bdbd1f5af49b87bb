//! The decisions a store call carried, read back from its `EVALSHA`'s KEYS
//! and ARGV as `lua/driver.lua`'s `@keys` and `@argv` lines lay them out:
//! so a test can feed the reference model (`ratelimit::model`) exactly
//! what the store was asked, in the order it was asked.

use ratelimit::algorithm::Algorithm;
use ratelimit::spec::{DecisionCall, LimitCall, LimitSpec, Mark, Op, PermitId};
use ratelimit::time::Instant;

/// One limit of a decision, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredLimit {
    /// The rule's name (in its keys).
    pub rule: String,
    /// The limit.
    pub spec: LimitSpec,
    /// What the decision did with it.
    pub op: Op,
    /// A fixed window's offset (its keys' code `fo`).
    pub offset_ms: Option<u64>,
}

/// One decision: the limits of one identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredDecision {
    /// The identity (the keys' hash tag).
    pub identity: String,
    /// Its limits, in reply order.
    pub limits: Vec<StoredLimit>,
}

impl StoredDecision {
    /// Whether the decision is a request's (uses, checks, takes), not a
    /// charge, refund, release or renewal made after the fact.
    pub fn at_request(&self) -> bool {
        !self.limits.iter().any(|l| l.op.after_the_fact())
    }

    /// Its limits as the model takes them.
    pub fn limit_calls(&self) -> Vec<LimitCall<'_>> {
        self.limits
            .iter()
            .map(|l| LimitCall { rule: &l.rule, spec: l.spec, op: l.op, offset_ms: l.offset_ms })
            .collect()
    }

    /// The decision as the model takes it, over `limits` (`limit_calls`).
    pub fn call<'a>(&'a self, limits: &'a [LimitCall<'a>]) -> DecisionCall<'a> {
        DecisionCall { identity: &self.identity, limits }
    }
}

/// What one script call asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredCall {
    /// The caller's clock it was sent with (ms).
    pub now_ms: u64,
    /// Its decisions, in order.
    pub decisions: Vec<StoredDecision>,
}

/// Reads an `EVALSHA`'s arguments after its name (`sha numkeys KEYS ARGV`).
pub fn decode(args: &[String]) -> Result<StoredCall, String> {
    let n: usize = args.get(1).ok_or("no numkeys")?.parse().map_err(|e| format!("numkeys: {e}"))?;
    let keys = args.get(2..2 + n).ok_or("fewer keys than numkeys")?;
    let mut argv = Argv { args: args.get(2 + n..).unwrap_or_default(), at: 0 };
    let now_ms = argv.num()?;
    let specs: Vec<LimitSpec> = (0..argv.num()?)
        .map(|_| {
            let code = argv.text()?;
            let algorithm = Algorithm::ALL.into_iter().find(|a| a.code() == code).ok_or(format!("algorithm {code}"))?;
            Ok(LimitSpec { algorithm, limit: argv.num()?, window_ms: argv.num()?, burst: argv.num()? })
        })
        .collect::<Result<_, String>>()?;
    // A shape: per limit (spec index, op code, amount, and an offset, a
    // slot id or a refund's mark `born:count`).
    let shapes: Vec<Vec<(usize, String, u64, String)>> = (0..argv.num()?)
        .map(|_| {
            (0..argv.num()?)
                .map(|_| Ok((argv.num::<usize>()?, argv.text()?, argv.num()?, argv.text()?)))
                .collect::<Result<_, String>>()
        })
        .collect::<Result<_, String>>()?;
    let mut keys = keys.iter();
    let mut decisions = Vec::new();
    for _ in 0..argv.num::<usize>()? {
        let shape = shapes.get(argv.num::<usize>()?.wrapping_sub(1)).ok_or("no such shape")?;
        let mut identity = None;
        let mut limits = Vec::new();
        for (spec, code, amount, last) in shape {
            let spec = *specs.get(spec.wrapping_sub(1)).ok_or("no such spec")?;
            let mark = last.split_once(':').map(|(born, count)| -> Result<Mark, String> {
                let n = |t: &str| t.parse::<u64>().map_err(|_| format!("a mark {last}"));
                Ok(Mark { born_ms: n(born)?, count: n(count)? })
            });
            let mark = mark.transpose()?;
            let offset = &if mark.is_some() { 0 } else { last.parse::<u64>().map_err(|_| format!("ARGV {last}"))? };
            let key = keys.next().ok_or("fewer keys than limits")?;
            if spec.algorithm == Algorithm::SlidingWindow {
                keys.next().ok_or("fewer keys than limits")?;
            }
            let parts = KeyParts::of(key)?;
            identity.get_or_insert(parts.identity.clone());
            let offset_ms = (parts.code == "fo").then_some(*offset);
            let op = match (code.as_str(), spec.algorithm) {
                ("u", Algorithm::Concurrency) => Op::Take(PermitId(*offset), amount.saturating_sub(1)),
                ("u", _) => Op::Use(*amount),
                ("v", _) => Op::Reserve(*amount),
                ("k", _) => Op::Check(*amount),
                ("g", _) => Op::Charge(*amount),
                // The window the reservation went into is in the key's name.
                ("f", _) => Op::Refund {
                    amount: *amount,
                    at: Instant::from_ms(
                        parts.index.map_or(now_ms, |i| (i * spec.window_ms).saturating_sub(offset_ms.unwrap_or(0))),
                    ),
                    mark,
                },
                ("r", _) => Op::Release(PermitId(*offset)),
                ("n", _) => Op::Renew(PermitId(*offset)),
                (other, _) => return Err(format!("op {other}")),
            };
            limits.push(StoredLimit { rule: parts.rule, spec, op, offset_ms });
        }
        decisions.push(StoredDecision { identity: identity.ok_or("a decision without limits")?, limits });
    }
    Ok(StoredCall { now_ms, decisions })
}

/// ARGV read in order.
struct Argv<'a> {
    args: &'a [String],
    at: usize,
}

impl Argv<'_> {
    fn text(&mut self) -> Result<String, String> {
        let s = self.args.get(self.at).ok_or(format!("ARGV ends at {}", self.at))?;
        self.at += 1;
        Ok(s.clone())
    }

    fn num<T: std::str::FromStr>(&mut self) -> Result<T, String> {
        let s = self.text()?;
        s.parse().map_err(|_| format!("ARGV[{}] = {s}: not a number", self.at))
    }
}

/// `<domain>:{<identity>}:<rule>:<code>[:<window>[:<index>]]`.
struct KeyParts {
    identity: String,
    rule: String,
    code: String,
    index: Option<u64>,
}

impl KeyParts {
    fn of(key: &str) -> Result<KeyParts, String> {
        let open = key.find(":{").ok_or(format!("key {key}: no hash tag"))?;
        let close = key.find("}:").ok_or(format!("key {key}: no hash tag"))?;
        let identity = key.get(open + 2..close).ok_or(format!("key {key}"))?.to_string();
        let mut rest = key[close + 2..].split(':');
        let rule = rest.next().ok_or(format!("key {key}: no rule"))?.to_string();
        let code = rest.next().ok_or(format!("key {key}: no code"))?.to_string();
        let index = rest.nth(1).and_then(|i| i.parse().ok());
        Ok(KeyParts { identity, rule, code, index })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelimit::store::script_call::ScriptCall;

    #[test]
    fn a_call_reads_back_as_it_was_made() {
        let sw = LimitSpec { algorithm: Algorithm::SlidingWindow, limit: 10, window_ms: 10_000, burst: 10 };
        let fw = LimitSpec { algorithm: Algorithm::FixedWindow, limit: 4, window_ms: 5_000, burst: 4 };
        let tb = LimitSpec { algorithm: Algorithm::TokenBucket, limit: 100, window_ms: 10_000, burst: 100 };
        let cc = LimitSpec { algorithm: Algorithm::Concurrency, limit: 2, window_ms: 20_000, burst: 2 };
        let now = 1_700_000_012_345;
        let a = [
            LimitCall { rule: "a", spec: sw, op: Op::Use(1), offset_ms: None },
            LimitCall { rule: "a", spec: fw, op: Op::Check(2), offset_ms: Some(1234) },
            LimitCall { rule: "a", spec: cc, op: Op::Take(PermitId(77), 1), offset_ms: None },
        ];
        let mark = Some(Mark { born_ms: 1_700_000_000_001, count: 1234 });
        let b = [
            LimitCall {
                rule: "b",
                spec: tb,
                op: Op::Refund { amount: 30, at: Instant::from_ms(now), mark },
                offset_ms: None,
            },
            LimitCall {
                rule: "b",
                spec: fw,
                op: Op::Refund { amount: 3, at: Instant::from_ms(1_700_000_000_000), mark: None },
                offset_ms: None,
            },
            LimitCall { rule: "b", spec: cc, op: Op::Release(PermitId(9)), offset_ms: None },
        ];
        let c = [
            LimitCall { rule: "a", spec: sw, op: Op::Use(1), offset_ms: None },
            LimitCall { rule: "a", spec: tb, op: Op::Reserve(40), offset_ms: None },
        ];
        let batch = [
            DecisionCall { identity: "~Hx", limits: &a },
            DecisionCall { identity: "u1", limits: &b },
            DecisionCall { identity: "u2", limits: &c },
        ];
        let call = ScriptCall::new("t", Instant::from_ms(now), &batch);
        let mut args = vec!["sha".to_string(), call.keys.len().to_string()];
        args.extend(call.keys.iter().cloned());
        args.extend(call.args.iter().cloned());
        let got = decode(&args).unwrap();
        assert_eq!(got.now_ms, now);
        let ids: Vec<&str> = got.decisions.iter().map(|d| d.identity.as_str()).collect();
        assert_eq!(ids, ["~Hx", "u1", "u2"]);
        for (d, want) in got.decisions.iter().zip(batch) {
            let ops: Vec<(String, Op, Option<u64>)> =
                d.limits.iter().map(|l| (l.rule.clone(), l.op, l.offset_ms)).collect();
            let want: Vec<(String, Op, Option<u64>)> =
                want.limits.iter().map(|l| (l.rule.to_string(), l.op, l.offset_ms)).collect();
            assert_eq!(ops, want);
        }
        assert!(got.decisions[0].at_request() && !got.decisions[1].at_request());
    }
}
