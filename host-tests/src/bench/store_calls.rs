//! The store operations measured: a plain INCR (the cheapest thing a rate
//! limiter can do with Redis) and decision-script calls built exactly as the
//! filter builds them (`ScriptCall`), on the allow path.

use ratelimit::algorithm::Algorithm;
use ratelimit::call::{DecisionCall, LimitCall, Op, ScriptCall};
use ratelimit::model::LimitSpec;

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

impl Kind {
    /// Every kind, baseline first.
    pub fn all() -> Vec<Kind> {
        let mut v = vec![Kind::Incr];
        v.extend(Algorithm::ALL.map(Kind::One));
        v.extend([Kind::TwoLimits, Kind::EmptyScript, Kind::BareWindow]);
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
        }
    }

    /// The limits of a script call (none for INCR).
    pub fn limits(&self, limit: u64) -> Vec<LimitSpec> {
        let minute = |algorithm: Algorithm| LimitSpec { algorithm, limit, window_ms: 60_000, burst: limit };
        match self {
            Kind::Incr => vec![],
            Kind::One(a) => vec![minute(*a)],
            Kind::EmptyScript | Kind::BareWindow => vec![minute(Algorithm::SlidingWindow)],
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

    /// The command deciding one request of `identity` at `now_ms`.
    pub fn command(&self, sha: &str, limit: u64, identity: &str, now_ms: u64) -> redis::Cmd {
        if *self == Kind::Incr {
            let mut cmd = redis::cmd("INCR");
            cmd.arg(format!("bench:{{{identity}}}:incr"));
            return cmd;
        }
        script_command(sha, &self.limits(limit), identity, now_ms)
    }

    /// The script it calls (empty for INCR).
    pub fn script(&self) -> &'static str {
        match self {
            Kind::Incr => "",
            Kind::EmptyScript => EMPTY_SCRIPT,
            Kind::BareWindow => BARE_WINDOW_SCRIPT,
            _ => ratelimit::script::SCRIPT,
        }
    }

    /// Whether it is part of the breakdown rather than a real decision.
    pub fn breakdown(&self) -> bool {
        matches!(self, Kind::EmptyScript | Kind::BareWindow)
    }

    /// The keys one identity's call touches.
    pub fn keys(&self, limit: u64, identity: &str, now_ms: u64) -> Vec<String> {
        match self {
            Kind::Incr => vec![format!("bench:{{{identity}}}:incr")],
            _ => script_call(&self.limits(limit), identity, now_ms).keys,
        }
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

/// EVALSHA of the decision script for `limits` of `identity` at `now_ms`.
pub fn script_command(sha: &str, limits: &[LimitSpec], identity: &str, now_ms: u64) -> redis::Cmd {
    let call = script_call(limits, identity, now_ms);
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(call.keys.len()).arg(&call.keys).arg(&call.args);
    cmd
}

/// The filter's call for `limits` of `identity` (rule "api", domain "bench").
pub fn script_call(limits: &[LimitSpec], identity: &str, now_ms: u64) -> ScriptCall {
    let calls: Vec<LimitCall<'_>> =
        limits.iter().map(|&spec| LimitCall { rule: "api", spec, op: Op::Use(1), offset_ms: None }).collect();
    ScriptCall::new("bench", now_ms, &[DecisionCall { identity, limits: &calls }])
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
