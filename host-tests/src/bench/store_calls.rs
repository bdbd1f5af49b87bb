//! The store operations measured: a plain INCR (the cheapest thing a rate
//! limiter can do with Redis) and decision-script calls built exactly as the
//! filter builds them (`ScriptCall`), on the allow path.

use ratelimit::algorithm::Algorithm;
use ratelimit::spec::LimitSpec;
use ratelimit::spec::{DecisionCall, LimitCall, Op};
use ratelimit::store::script_call::ScriptCall;
use ratelimit::time::Instant;

/// What one call decides.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// `INCR` of one key per identity: the baseline.
    Incr,
    /// One limit of this algorithm.
    One(Algorithm),
    /// Two limits in one call, as in the README: sliding window per minute
    /// and fixed window per day.
    TwoLimits,
    /// For the breakdown: EVALSHA of a script that only returns, with a
    /// sliding-window call's keys and arguments (the fixed cost of a call).
    EmptyScript,
    /// For the breakdown: only the Redis commands a sliding-window decision
    /// makes (MGET, INCRBY, PEXPIRE), same keys and arguments.
    BareWindow,
    /// One call carrying this many decisions, each one sliding-window limit
    /// of its own identity (consecutive identities), as a batch goes out.
    Batch(u64),
    /// The floor under `Batch(n)`: the same call to a script that only does
    /// its Redis work (see `BATCH_FLOOR_SCRIPT`), on keys of its own.
    BatchFloor(u64),
    /// One sliding-window limit, the call reading the client's overrides
    /// (none is set): what overrides cost a client without one before the
    /// index of overrides, and a client the index names whose override is
    /// gone.
    OverridesRead,
    /// One sliding-window limit with overrides on, of a client the index
    /// of overrides does not name: the call the worker sends for it.
    OverridesUnnamed,
}

/// The breakdown's do-nothing script.
pub const EMPTY_SCRIPT: &str = "return {1, 0, 0, 0}";

/// The breakdown's bare sliding window: the decision script's Redis calls
/// for one sliding-window limit, without its validation and dispatch.
pub const BARE_WINDOW_SCRIPT: &str = "local c = redis.call('MGET', KEYS[1], KEYS[2])
local cur = tonumber(c[1]) or 0
redis.call('INCRBY', KEYS[1], 1)
redis.call('PEXPIRE', KEYS[1], 120000)
return {1, cur, 0, 0}";

/// The floor under a batch's script time: what any script deciding these
/// keys pays Redis whatever its logic (the call's KEYS and ARGV made into
/// Lua, one MGET of every key, one write per decision, four integers back
/// per decision), without any check, arithmetic or coalescing. Its keys
/// expire, as every rate limiter's must (its memory is bounded only so): a
/// count is created by SET ... PX and raised by INCRBY, which keeps the TTL,
/// so each read and write of a held key also finds its expiry, as the
/// script's do. (Its keys without a TTL, as before 2026-12-03, made the
/// floor ~7% cheaper in instructions than any limiter can be.)
pub const BATCH_FLOOR_SCRIPT: &str = "local keys, call, reply = KEYS, redis.call, {}
local got = call('MGET', unpack(keys))
for i = 1, #keys / 2 do
  local held = got[2 * i - 1]
  local cur = (tonumber(held) or 0) + 1
  if held then
    call('INCRBY', keys[2 * i - 1], '1')
  else
    call('SET', keys[2 * i - 1], '1', 'PX', '120000')
  end
  reply[4 * i - 3], reply[4 * i - 2], reply[4 * i - 1], reply[4 * i] = 1, cur, 0, 0
end
return reply";

impl Kind {
    /// Every kind, baseline first.
    pub fn all() -> Vec<Kind> {
        let mut v = vec![Kind::Incr];
        v.extend(Algorithm::RATES.map(Kind::One));
        v.extend([Kind::OverridesRead, Kind::OverridesUnnamed, Kind::TwoLimits, Kind::EmptyScript, Kind::BareWindow]);
        v
    }

    /// The name in tables.
    pub fn name(&self) -> String {
        match self {
            Kind::Incr => "INCR (baseline)".into(),
            Kind::One(a) => a.name().into(),
            Kind::TwoLimits => "two limits (sw 1m + fw 1d)".into(),
            Kind::EmptyScript => "breakdown: EVALSHA of `return` only".into(),
            Kind::BareWindow => "breakdown: MGET+INCRBY+PEXPIRE in Lua".into(),
            Kind::OverridesRead => "sliding_window, reading overrides (none set)".into(),
            Kind::OverridesUnnamed => "sliding_window, overrides on, client not in their index".into(),
            Kind::Batch(n) => format!("batch of {n}"),
            Kind::BatchFloor(n) => format!("floor, batch of {n}"),
        }
    }

    /// The limits of a script call (none for INCR).
    pub fn limits(&self, limit: u64) -> Vec<LimitSpec> {
        let minute = |algorithm: Algorithm| LimitSpec { algorithm, limit, window_ms: 60_000, burst: limit };
        match self {
            Kind::Incr => vec![],
            Kind::One(a) => vec![minute(*a)],
            Kind::EmptyScript
            | Kind::BareWindow
            | Kind::Batch(_)
            | Kind::BatchFloor(_)
            | Kind::OverridesRead
            | Kind::OverridesUnnamed => {
                vec![minute(Algorithm::SlidingWindow)]
            }
            Kind::TwoLimits => vec![
                minute(Algorithm::SlidingWindow),
                LimitSpec {
                    algorithm: Algorithm::FixedWindow,
                    limit: 100 * limit,
                    window_ms: 86_400_000,
                    burst: 100 * limit,
                },
            ],
        }
    }

    /// Decisions one call carries.
    pub fn decisions(&self) -> u64 {
        match self {
            Kind::Batch(n) | Kind::BatchFloor(n) => *n,
            _ => 1,
        }
    }

    /// The command deciding `decisions()` requests at `now_ms`, of the
    /// identities numbered from `first` on.
    pub fn command(&self, sha: &str, limit: u64, first: u64, now_ms: u64) -> redis::Cmd {
        if *self == Kind::Incr {
            let mut cmd = redis::cmd("INCR");
            cmd.arg(format!("bench:{{{}}}:incr", identity(first)));
            return cmd;
        }
        let domain = if matches!(self, Kind::BatchFloor(_)) { "floor" } else { "bench" };
        let reads = vec![*self == Kind::OverridesRead; self.decisions() as usize];
        evalsha(sha, &batch_call_in(domain, &self.limits(limit), first, self.decisions(), now_ms, &reads))
    }

    /// The script it calls (empty for INCR).
    pub fn script(&self) -> &'static str {
        match self {
            Kind::Incr => "",
            Kind::EmptyScript => EMPTY_SCRIPT,
            Kind::BareWindow => BARE_WINDOW_SCRIPT,
            Kind::BatchFloor(_) => BATCH_FLOOR_SCRIPT,
            _ => ratelimit::script::SCRIPT,
        }
    }

    /// Whether it is part of the breakdown rather than a real decision (or
    /// one compared with its like, without a target of its own).
    pub fn breakdown(&self) -> bool {
        matches!(self, Kind::EmptyScript | Kind::BareWindow | Kind::OverridesRead | Kind::OverridesUnnamed)
    }

    /// The INFO commandstats name of the command it sends.
    pub fn command_name(&self) -> &'static str {
        if *self == Kind::Incr {
            "incr"
        } else {
            "evalsha"
        }
    }
}

/// The decision script the store parts measure: the file BENCH_SCRIPT names
/// (trying a change of `lua/` without rebuilding the driver), else the
/// built one.
pub fn script_under_test() -> String {
    std::env::var("BENCH_SCRIPT").map_or_else(
        |_| ratelimit::script::SCRIPT.to_string(),
        |p| std::fs::read_to_string(p).expect("BENCH_SCRIPT readable"),
    )
}

/// EVALSHA of the decision script for `limits` of `identity` at `now_ms`.
pub fn script_command(sha: &str, limits: &[LimitSpec], identity: &str, now_ms: u64) -> redis::Cmd {
    evalsha(sha, &script_call(limits, identity, now_ms))
}

fn evalsha(sha: &str, call: &ScriptCall) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(call.keys.len()).arg(&call.keys).arg(&call.args);
    cmd
}

/// The filter's call for `limits` of `identity` (rule "api", domain "bench").
pub fn script_call(limits: &[LimitSpec], identity: &str, now_ms: u64) -> ScriptCall {
    let calls = uses(limits);
    ScriptCall::new("bench", Instant::from_ms(now_ms), &[DecisionCall { identity, limits: &calls }])
}

/// The filter's call for a batch: one decision of `limits` per identity,
/// identities `first` to `first + n - 1` in order.
pub fn batch_call(limits: &[LimitSpec], first: u64, n: u64, now_ms: u64) -> ScriptCall {
    batch_call_in("bench", limits, first, n, now_ms, &[])
}

/// `batch_call` under another domain (keys apart from the real script's),
/// decision `i` reading overrides if `reads[i]` (as the worker marks it).
fn batch_call_in(domain: &str, limits: &[LimitSpec], first: u64, n: u64, now_ms: u64, reads: &[bool]) -> ScriptCall {
    let calls = uses(limits);
    let names: Vec<String> = (first..first + n).map(identity).collect();
    let decisions: Vec<DecisionCall<'_>> =
        names.iter().map(|identity| DecisionCall { identity, limits: &calls }).collect();
    ScriptCall::reading(domain, Instant::from_ms(now_ms), &decisions, reads)
}

/// Each limit used once, as an allowed request does.
fn uses(limits: &[LimitSpec]) -> Vec<LimitCall<'static>> {
    limits.iter().map(|&spec| LimitCall { rule: "api", spec, op: Op::Use(1), offset_ms: None }).collect()
}

/// The identity numbered `i`.
pub fn identity(i: u64) -> String {
    format!("client-{i:06}")
}

/// Milliseconds since the epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Whether a script reply allowed every limit (INCR replies count as allowed).
pub fn allowed(reply: &redis::Value) -> bool {
    match reply {
        redis::Value::Array(items) => items.chunks(4).all(|c| matches!(c.first(), Some(redis::Value::Int(1)))),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_decides_consecutive_identities_each_on_its_own_keys() {
        let limits = Kind::Batch(3).limits(10);
        let call = batch_call(&limits, 7, 3, 120_000);
        assert_eq!(call.decisions(), 3);
        // sliding_window: two keys per decision, each under its identity's tag.
        assert_eq!(call.keys.len(), 6);
        for (pair, i) in call.keys.chunks(2).zip(7..) {
            assert!(pair.iter().all(|k| k.contains(&format!("{{{}}}", identity(i)))), "{pair:?}");
        }
        assert_eq!(call.reply_len(), 12);
    }

    #[test]
    fn one_decision_kinds_carry_one() {
        assert_eq!(Kind::One(Algorithm::Gcra).decisions(), 1);
        assert_eq!(Kind::Batch(16).decisions(), 16);
        assert_eq!(
            batch_call(&Kind::Batch(1).limits(10), 0, 1, 0),
            script_call(&Kind::Batch(1).limits(10), &identity(0), 0)
        );
    }

    #[test]
    fn the_floor_does_a_batchs_redis_work_on_keys_of_its_own() {
        let redis = crate::redis_server::RedisServer::start();
        let mut conn = redis.connect();
        let sha = crate::script::load(&mut conn, BATCH_FLOOR_SCRIPT);
        let now = 7 * 60_000 + 5;
        let floor = Kind::BatchFloor(3);
        let reply: Vec<i64> = floor.command(&sha, 10, 4, now).query(&mut conn).unwrap();
        assert_eq!(reply, [1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0]);
        let again: Vec<i64> = floor.command(&sha, 10, 4, now).query(&mut conn).unwrap();
        assert_eq!(again, [1, 2, 0, 0, 1, 2, 0, 0, 1, 2, 0, 0]);
        // One INCRBY per decision on its current window; nothing of the real
        // script's keys, so the batches measured after it stay allowed.
        let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
        keys.sort();
        assert_eq!(
            keys,
            [
                "floor:{client-000004}:api:sw:60000:7",
                "floor:{client-000005}:api:sw:60000:7",
                "floor:{client-000006}:api:sw:60000:7"
            ]
        );
    }
}
