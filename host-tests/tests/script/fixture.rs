//! One Redis, the test build of the script, and helpers to build calls.
//!
//! Decisions go through `sim_expiry_script`: Redis never expires a key in
//! real time, the fixture deletes it once the SIMULATED clock passes the TTL
//! the script set. So a test may hold simulated time still for as long as
//! the machine needs, and keys expire exactly when the model says.

use host_tests::redis_server::RedisServer;
use host_tests::script::{evalsha_raw, every_decided, load, sim_expiry_script, test_script, SimulatedExpiry};
use ratelimit::algorithm::Algorithm;
use ratelimit::keys::override_key;
use ratelimit::outcome::LimitOutcome;
use ratelimit::spec::LimitSpec;
use ratelimit::spec::{DecisionCall, LimitCall, Op};
use ratelimit::store::script_call::{DecisionResult, ScriptCall};
use ratelimit::time::Instant;

/// The tests' epoch: aligned to 1 s windows, 20 s into a minute.
pub const T0: u64 = 1_700_000_000_000;

pub fn spec(algorithm: Algorithm, limit: u64, window_ms: u64, burst: u64) -> LimitSpec {
    LimitSpec { algorithm, limit, window_ms, burst }
}

/// A limit of rule "r" doing `op` on aligned windows.
pub fn limit(spec: LimitSpec, op: Op) -> LimitCall<'static> {
    LimitCall { rule: "r", spec, op, offset_ms: None }
}

pub struct Fixture {
    pub redis: RedisServer,
    pub conn: redis::Connection,
    /// The wrapped test build (simulated expiry).
    pub sha: String,
    /// The test build as it is: keys expire in real time.
    pub plain_sha: String,
    expiry: SimulatedExpiry,
    /// The keys the last call wrote, with the PTTL the script gave them.
    pub written: Vec<(String, i64)>,
}

impl Fixture {
    pub fn new() -> Fixture {
        let redis = RedisServer::start();
        let mut conn = redis.connect();
        let sha = load(&mut conn, &sim_expiry_script());
        let plain_sha = load(&mut conn, &test_script());
        Fixture { redis, conn, sha, plain_sha, expiry: SimulatedExpiry::default(), written: Vec::new() }
    }

    /// The call for `identity` using every one of `limits` for `cost` at `now`.
    pub fn call(identity: &str, now: u64, limits: &[LimitSpec], cost: u64) -> ScriptCall {
        let calls: Vec<LimitCall> = limits.iter().map(|s| limit(*s, Op::Use(cost))).collect();
        ScriptCall::new("t", Instant::from_ms(now), &[DecisionCall { identity, limits: &calls }])
    }

    /// Decides a batch at `now` on both clocks (caller and test store
    /// clock); Redis's error text if it refuses the call.
    pub fn run(&mut self, now: u64, batch: &[DecisionCall]) -> Result<Vec<Vec<LimitOutcome>>, String> {
        let call = ScriptCall::new("t", Instant::from_ms(now), batch);
        self.run_call(&call, now)
    }

    /// `run`, each decision reading its client's overrides.
    pub fn run_overrides(&mut self, now: u64, batch: &[DecisionCall]) -> Result<Vec<Vec<LimitOutcome>>, String> {
        let call = ScriptCall::with_overrides("t", Instant::from_ms(now), batch, true);
        self.run_call(&call, now)
    }

    /// An operator writes `text` as the override of `rule` for `identity`,
    /// for `px` ms (`None`: without an expiry).
    pub fn set_override(&mut self, identity: &str, rule: &str, text: &str, px: Option<u64>) {
        let mut cmd = redis::cmd("SET");
        cmd.arg(override_key("t", identity, rule)).arg(text);
        if let Some(px) = px {
            cmd.arg("PX").arg(px);
        }
        let () = cmd.query(&mut self.conn).unwrap();
    }

    /// The override of `rule` for `identity` as Redis holds it, and its PTTL.
    pub fn override_of(&mut self, identity: &str, rule: &str) -> (Option<String>, i64) {
        let key = override_key("t", identity, rule);
        let text: Option<String> = redis::cmd("GET").arg(&key).query(&mut self.conn).unwrap();
        (text, redis::cmd("PTTL").arg(&key).query(&mut self.conn).unwrap())
    }

    /// Runs a prepared call at `now`.
    pub fn run_call(&mut self, call: &ScriptCall, now: u64) -> Result<Vec<Vec<LimitOutcome>>, String> {
        every_decided(self.run_each(call, now)?)
    }

    /// Runs a prepared call at `now`: one result per decision.
    pub fn run_each(&mut self, call: &ScriptCall, now: u64) -> Result<Vec<DecisionResult>, String> {
        self.expiry.expire(&mut self.conn, now);
        let raw = evalsha_raw(&mut self.conn, &self.sha, call, Some(now))?;
        let wrapped = self.expiry.record(call, now, raw);
        self.written = wrapped.written;
        call.decode(&wrapped.reply).map_err(|e| e.to_string())
    }

    /// One decision: `identity` uses every one of `limits` for `cost` at `now`.
    pub fn decide(&mut self, identity: &str, now: u64, limits: &[LimitSpec], cost: u64) -> Vec<LimitOutcome> {
        let call = Fixture::call(identity, now, limits, cost);
        self.run_call(&call, now).unwrap().remove(0)
    }

    /// One decision of `limits` for `identity` at `now`.
    pub fn one(&mut self, identity: &str, now: u64, limits: &[LimitCall]) -> Vec<LimitOutcome> {
        self.run(now, &[DecisionCall { identity, limits }]).unwrap().remove(0)
    }

    /// Every key's serialized value at `now`, once the keys whose TTL is
    /// over are gone: to prove a call at `now` changed nothing.
    pub fn snapshot_at(&mut self, now: u64) -> Vec<(String, Vec<u8>)> {
        self.expiry.expire(&mut self.conn, now);
        self.snapshot()
    }

    /// Every key's serialized value, to prove a call changed nothing.
    pub fn snapshot(&mut self) -> Vec<(String, Vec<u8>)> {
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut self.conn).unwrap();
        let mut out: Vec<(String, Vec<u8>)> = keys
            .into_iter()
            .map(|k| {
                let v: Vec<u8> = redis::cmd("DUMP").arg(&k).query(&mut self.conn).unwrap();
                (k, v)
            })
            .collect();
        out.sort();
        out
    }
}

/// A decision as a table row: (allowed, remaining, reset_ms, retry_after_ms; -1 = never).
pub type Row = (bool, u64, u64, i64);

/// `d` as a table row.
pub fn row(d: &LimitOutcome) -> Row {
    (d.allowed, d.remaining, d.reset_ms, d.retry_after_ms.map_or(-1, |r| r as i64))
}

/// The longest TTL a key of `spec` may need: until the limit is fully
/// available again, debt included (see the bounds in `lua/driver.lua`).
pub fn max_ttl(spec: &LimitSpec) -> i64 {
    let (limit, window, burst) = (spec.limit as i128, spec.window_ms as i128, spec.burst as i128);
    let longest = match spec.algorithm {
        Algorithm::SlidingWindow => 2 * window,
        Algorithm::FixedWindow | Algorithm::SlidingLog => window,
        Algorithm::TokenBucket | Algorithm::Gcra => (2 * burst * window + limit - 1) / limit,
        // A slot's key lives as long as its latest slot: max_hold.
        Algorithm::Concurrency => window,
    };
    longest.min(ratelimit::spec::TOP as i128) as i64
}
