//! One Redis, the test build of the script, and one client's limits.

use std::time::Instant;

use host_tests::redis_server::RedisServer;
use host_tests::script::{evalsha, load, test_script};
use ratelimit::algorithm::Algorithm;
use ratelimit::call::{DecisionCall, LimitCall, Op, ScriptCall};
use ratelimit::decision::Decision;
use ratelimit::model::LimitSpec;

pub const T0: u64 = 1_700_000_000_000; // aligned to every window used here

pub fn spec(algorithm: Algorithm, limit: u64, window_ms: u64, burst: u64) -> LimitSpec {
    LimitSpec { algorithm, limit, window_ms, burst }
}

pub struct Fixture {
    pub redis: RedisServer,
    pub conn: redis::Connection,
    pub sha: String,
}

impl Fixture {
    pub fn new() -> Fixture {
        let redis = RedisServer::start();
        let mut conn = redis.connect();
        let sha = load(&mut conn, &test_script());
        Fixture { redis, conn, sha }
    }

    /// The call for `identity` deciding `limits` (one cost for all) at `now`.
    pub fn call(identity: &str, now: u64, limits: &[LimitSpec], cost: u64) -> ScriptCall {
        let calls: Vec<LimitCall> =
            limits.iter().map(|s| LimitCall { rule: "r", spec: *s, op: Op::Use(cost), offset_ms: None }).collect();
        ScriptCall::new("t", now, &[DecisionCall { identity, limits: &calls }])
    }

    /// Decides at `now` on both clocks (caller and test store clock).
    pub fn decide(&mut self, identity: &str, now: u64, limits: &[LimitSpec], cost: u64) -> Vec<Decision> {
        let call = Fixture::call(identity, now, limits, cost);
        evalsha(&mut self.conn, &self.sha, &call, Some(now)).unwrap()
    }

    /// Every key in the database with its PTTL.
    pub fn keys_with_ttl(&mut self) -> Vec<(String, i64)> {
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut self.conn).unwrap();
        let mut out: Vec<(String, i64)> = keys
            .into_iter()
            .map(|k| {
                let ttl: i64 = redis::cmd("PTTL").arg(&k).query(&mut self.conn).unwrap();
                (k, ttl)
            })
            .collect();
        out.sort();
        out
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

/// A test clock that jumps forward at will but never runs slower than real
/// time, so a key Redis expired (in real time) is one the script's clock
/// also considers expired.
pub struct TestClock {
    start: Instant,
    now: u64,
}

impl TestClock {
    pub fn new() -> TestClock {
        TestClock { start: Instant::now(), now: T0 }
    }

    pub fn advance(&mut self, ms: u64) -> u64 {
        let real = T0 + self.start.elapsed().as_millis() as u64 + 1;
        self.now = (self.now + ms).max(real);
        self.now
    }
}
