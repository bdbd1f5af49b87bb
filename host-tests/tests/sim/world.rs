//! One simulated proxy: worker VMs of the real module over a real Redis
//! (and webdis), the streams the schedule began, and what each client got.

use std::time::{Duration, Instant};

use host_tests::prng::Rng;
use host_tests::redis_server::RedisServer;
use host_tests::wasm_host::{Artifact, Host, Request, State, StreamId};
use host_tests::webdis::{with_credential, Webdis};
use host_tests::windows::{start_clear_of_boundary, HOUR};
use ratelimit::identity::digest;

use crate::invariants::{self, Client, RV_BODY, RV_RESERVED};
use crate::schedule::{self, Step, RULES, USERS};

/// Worker VMs of the proxy.
const VMS: usize = 3;
/// Slots of each shared-data table (`deny_cache.slots`): few, so that
/// clients and rules share them and push each other out.
const SLOTS: usize = 16;
const CLUSTER: &str = "store";

/// Which build of the module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `ratelimit.wasm`: webdis over HTTP calls.
    Webdis,
    /// `ratelimit-redis.wasm`: Higress's Redis calls.
    Redis,
}

/// The store of one build, started once for every schedule (ports are
/// claimed once per test process: thousands of schedules must not each
/// take new ones); emptied before each schedule.
pub struct Servers {
    pub kind: Kind,
    redis: RedisServer,
    webdis: Option<Webdis>,
}

impl Servers {
    /// Redis with the script loaded, and webdis for the webdis build.
    pub fn start(kind: Kind) -> Servers {
        let redis = RedisServer::start();
        let _: String =
            redis::cmd("SCRIPT").arg("LOAD").arg(ratelimit::script::SCRIPT).query(&mut redis.connect()).unwrap();
        let webdis = (kind == Kind::Webdis).then(|| Webdis::start(redis.port));
        Servers { kind, redis, webdis }
    }
}

/// What runs covered.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub schedules: u64,
    pub requests: u64,
    pub admitted: u64,
    pub checks: u64,
}

impl Stats {
    pub fn add(&mut self, other: &Stats) {
        self.schedules += other.schedules;
        self.requests += other.requests;
        self.admitted += other.admitted;
        self.checks += other.checks;
    }
}

/// The plugin configuration: one rule per invariant (see `invariants`).
fn config(kind: Kind) -> String {
    let store = match kind {
        Kind::Webdis => format!(r#""transport":"webdis","cluster":"{CLUSTER}""#),
        Kind::Redis => format!(r#""transport":"redis","cluster":"{CLUSTER}?db=0""#),
    };
    let rules = r#"
      {"name":"fw","match":{"path_prefix":"/fw"},"key":["header:x-user"],"failure_mode":"closed",
       "limits":[{"algorithm":"fixed_window","limit":20,"window":"1h"}]},
      {"name":"tb","match":{"path_prefix":"/tb"},"key":["header:x-user"],"failure_mode":"closed",
       "lease":{"max_units":8,"max_age":"2s"},
       "limits":[{"algorithm":"token_bucket","limit":20,"window":"1h","burst":20}]},
      {"name":"cc","match":{"path_prefix":"/cc"},"key":["header:x-user"],"failure_mode":"closed",
       "limits":[{"algorithm":"concurrency","limit":3,"max_hold":"60s"}]},
      {"name":"co","match":{"path_prefix":"/co"},"key":["header:x-user"],"failure_mode":"open",
       "limits":[{"algorithm":"concurrency","limit":2,"max_hold":"60s"}]},
      {"name":"sl","match":{"path_prefix":"/sl"},"key":["header:x-user"],"failure_mode":"closed",
       "limits":[{"algorithm":"sliding_log","limit":20,"window":"1h"}]},
      {"name":"gc","match":{"path_prefix":"/gc"},"key":["header:x-user"],"failure_mode":"closed",
       "lease":{"max_units":8,"max_age":"2s"},
       "limits":[{"algorithm":"gcra","limit":20,"window":"1h","burst":20}]},
      {"name":"ccx","match":{"path_prefix":"/ccx"},"key":["header:x-user","path"],"failure_mode":"closed",
       "limits":[{"algorithm":"fixed_window","limit":4,"window":"1h"}]},
      {"name":"tk","match":{"path_prefix":"/tk"},"key":["header:x-user"],"failure_mode":"closed",
       "cost":{"response_header":"x-usage","default":7,"max":1000},
       "limits":[{"algorithm":"fixed_window","limit":1000000000,"window":"1h"}]},
      {"name":"rv","match":{"path_prefix":"/rv"},"key":["header:x-user"],"failure_mode":"closed",
       "cost":{"response_header":"x-usage","default":7,"max":1000,"reservation":{"default_output":0}},
       "limits":[{"algorithm":"fixed_window","limit":200,"window":"1h"}]}"#;
    with_credential(&format!(
        r#"{{"domain":"t","store":{{{store},"timeout_ms":25,"circuit_breaker":{{"failures":3,"open":"2s"}},"stats_interval":"1h"}},"deny_cache":{{"slots":{SLOTS}}},"rules":[{rules}]}}"#
    ))
}

/// A stream the schedule began.
struct Tracked {
    proxy: usize,
    id: StreamId,
    rule: usize,
    user: usize,
    /// Let through (counted once).
    admitted: bool,
    /// The step it began at: its decision was planned then.
    begun: usize,
    /// The step it was let through at.
    admitted_at: usize,
    /// `co`: let through by the store for sure (a step in which the local
    /// share took no slot).
    by_store: bool,
}

/// The proxies, their servers and what the schedule did.
struct World {
    hosts: Vec<Host>,
    redis: redis::Connection,
    streams: Vec<Tracked>,
    clients: Vec<Client>,
    stats: Stats,
    started: Instant,
    /// Seeds the fault mixes.
    seed: u64,
    /// `co`'s slots taken in the store and in the local share so far.
    co_taken: (i64, i64),
    /// The step running.
    step: usize,
    /// The last step the store was flushed at (0: never).
    flushed_at: usize,
    /// No faults, reloads or flushes in this schedule.
    calm: bool,
    /// The latest instant the proxies' wall clock showed.
    latest_wall: u64,
    /// `rv` requests begun per client.
    rv_begun: Vec<u64>,
}

/// Runs `steps` steps of `seed`'s schedule on `kind` with `proxies`
/// proxies sharing the store; panics on the first violated invariant with
/// the schedule shrunk to what still violates it.
pub fn run(servers: &Servers, seed: u64, proxies: usize, steps: usize) -> Stats {
    let kind = servers.kind;
    let mut rng = Rng::new(seed ^ (kind as u64) << 63 ^ (proxies as u64) << 48);
    let calm = rng.below(4) == 0;
    let schedule: Vec<Step> =
        (0..steps).map(|_| schedule::next(&mut rng, proxies, VMS, kind == Kind::Webdis, calm)).collect();
    let violation = match replay(servers, seed, proxies, &schedule) {
        Ok(stats) => return stats,
        Err(v) => v,
    };
    let shrunk = shrink(servers, seed, proxies, schedule, &violation);
    panic!(
        "sim: seed {seed} ({kind:?}, {proxies} proxies) violated {violation}\nreplay: SIM_SEED={seed} cargo test -p host-tests --test sim\nshrunk to {} steps; save as a regression (host-tests/tests/sim/regressions/<name>.txt):\n# <what it found>\n{}",
        shrunk.len(),
        crate::regressions::text(kind, proxies, seed, &shrunk)
    );
}

/// The invariant a violation names (its text up to the colon).
fn name(violation: &str) -> &str {
    violation.split(':').next().unwrap_or(violation)
}

/// Cuts `schedule` down while it still violates the invariant `violation`
/// names: chunks of halves, quarters, ... removed in turn (ddmin-like), a
/// bounded number of replays.
fn shrink(servers: &Servers, seed: u64, proxies: usize, mut schedule: Vec<Step>, violation: &str) -> Vec<Step> {
    let mut replays = 0;
    let mut chunk = schedule.len() / 2;
    while chunk > 0 && replays < 200 {
        let mut at = 0;
        while at < schedule.len() && replays < 200 {
            let mut shorter = schedule.clone();
            shorter.drain(at..(at + chunk).min(schedule.len()));
            replays += 1;
            let still = matches!(replay(servers, seed, proxies, &shorter), Err(v) if name(&v) == name(violation));
            if still {
                schedule = shorter;
            } else {
                at += chunk;
            }
        }
        chunk /= 2;
    }
    schedule
}

/// Runs `schedule` on fresh proxies and store: what it covered, or the
/// first violated invariant.
pub fn replay(servers: &Servers, seed: u64, proxies: usize, schedule: &[Step]) -> Result<Stats, String> {
    let kind = servers.kind;
    // Every fixed window and bucket of the run in one real hour.
    start_clear_of_boundary(HOUR, Duration::from_secs(60));
    // A fresh store (the script stays loaded).
    let mut redis = servers.redis.connect();
    let () = redis::cmd("FLUSHALL").query(&mut redis).unwrap();
    let proxy = || {
        let artifact = match kind {
            Kind::Webdis => Artifact::Webdis,
            Kind::Redis => Artifact::Redis,
        };
        let b = Host::builder(artifact, &config(kind)).vms(VMS).record_traps().forget_calls();
        match &servers.webdis {
            Some(w) => b.http_cluster(CLUSTER, w.port),
            None => b.redis_cluster(CLUSTER, servers.redis.port),
        }
        .start()
    };
    let hosts: Vec<Host> = (0..proxies).map(|_| proxy()).collect();
    let mut world = World {
        hosts,
        redis,
        streams: Vec::new(),
        clients: vec![Client::default(); USERS],
        stats: Stats { schedules: 1, ..Stats::default() },
        started: Instant::now(),
        seed,
        co_taken: (0, 0),
        step: 0,
        flushed_at: 0,
        calm: schedule.iter().all(|s| !matches!(s, Step::Faults { .. } | Step::Reload { .. } | Step::Flush)),
        latest_wall: 0,
        rv_begun: vec![0; USERS],
    };
    // SIM_TRACE=1 with SIM_SEED: every step, and the `co` streams after it.
    let trace = std::env::var_os("SIM_TRACE").is_some();
    for (i, step) in schedule.iter().enumerate() {
        world.step = i + 1;
        world.apply(step);
        world.latest_wall = world.hosts.iter().map(Host::now_ms).fold(world.latest_wall, u64::max);
        world.settle();
        if trace {
            world.trace(i, step);
        }
        world.check().map_err(|v| format!("{v} at step {i}"))?;
    }
    world.wind_down()?;
    Ok(world.stats)
}

impl World {
    fn user(&self, user: usize) -> String {
        format!("u{user}")
    }

    fn apply(&mut self, step: &Step) {
        match step {
            Step::Begin { proxy, vm, rule, user } => {
                let path = format!("/{}/x", RULES[*rule]);
                let mut request = Request::get(&path).header("x-user", &self.user(*user));
                if RULES[*rule] == "rv" {
                    request = Request::new("POST", &path).header("x-user", &self.user(*user)).body(RV_BODY.as_bytes());
                    self.rv_begun[*user] += 1;
                }
                let id = self.hosts[*proxy].begin(*vm, request);
                self.stats.requests += 1;
                let (begun, admitted_at, by_store) = (self.step, 0, false);
                self.streams.push(Tracked {
                    proxy: *proxy,
                    id,
                    rule: *rule,
                    user: *user,
                    admitted: false,
                    begun,
                    admitted_at,
                    by_store,
                });
            }
            Step::Deliver => self.hosts.iter_mut().for_each(Host::run_until_idle),
            Step::End { nth, hang_up, usage } => {
                if self.streams.is_empty() {
                    return;
                }
                let t = self.streams.swap_remove(nth % self.streams.len());
                let host = &mut self.hosts[t.proxy];
                let decided = !matches!(host.state(t.id), State::Waiting);
                // An rv response uses at most what its request reserved.
                let usage = if RULES[t.rule] == "rv" { 1 + (usage - 1) % RV_RESERVED } else { *usage };
                if decided && !hang_up {
                    host.finish_with(t.id, &[("x-usage", &usage.to_string())]);
                } else {
                    host.close(t.id);
                }
                if t.admitted {
                    // Let through: it owes its usage, or the default if the
                    // client hung up before the response.
                    let owed = if *hang_up { 7 } else { usage };
                    match RULES[t.rule] {
                        "tk" => self.clients[t.user].tk_owed += owed,
                        "rv" => self.rv_ended(&t, owed),
                        _ => {}
                    }
                    self.close_open(&t);
                }
            }
            // One clock for the fleet.
            Step::Advance(ms) => self.hosts.iter_mut().for_each(|h| h.advance(*ms)),
            Step::Back(ms) => self.hosts.iter_mut().for_each(|h| h.step_back(*ms)),
            Step::Flush => {
                let () = redis::cmd("FLUSHALL").query(&mut self.redis).unwrap();
                self.flushed_at = self.step;
                // Counted afresh: the store's counts start again.
                for (c, begun) in self.clients.iter_mut().zip(&self.rv_begun) {
                    (c.fw_admitted, c.tb_admitted, c.sl_admitted, c.gc_admitted, c.cx_admitted) = (0, 0, 0, 0, 0);
                    (c.rv_held, c.rv_used, c.rv_slack) = (0, 0, begun * RV_RESERVED);
                }
            }
            Step::Faults { proxy, mix } if mix.is_empty() => {
                self.hosts[*proxy].fault_mix(0, Vec::new());
                self.hosts[*proxy].fault_always(None);
            }
            Step::Faults { proxy, mix } => self.hosts[*proxy].fault_mix(self.seed, mix.clone()),
            Step::Reload { proxy, vm } => {
                self.hosts[*proxy].reload_vm(*vm);
                // Its streams went with it (Envoy answered them 503).
                let (gone, kept): (Vec<Tracked>, Vec<Tracked>) =
                    std::mem::take(&mut self.streams).into_iter().partition(|t| t.proxy == *proxy && t.id.vm == *vm);
                self.streams = kept;
                for t in gone {
                    if RULES[t.rule].starts_with("cc") {
                        self.clients[t.user].cc_reloaded += 1;
                    }
                    if t.admitted && RULES[t.rule] == "rv" {
                        // Nobody settles it: the store keeps it whole.
                        self.rv_ended(&t, RV_RESERVED);
                    }
                    if t.admitted {
                        self.close_open(&t);
                    }
                }
            }
        }
    }

    /// Counts the streams let through since the last step. Rate limits
    /// count those begun since the last flush (one begun before it may
    /// have been counted by the store before it forgot).
    fn settle(&mut self) {
        for t in self.streams.iter_mut().filter(|t| !t.admitted) {
            if self.hosts[t.proxy].state(t.id) == State::Continued {
                t.admitted = true;
                t.admitted_at = self.step;
                self.stats.admitted += 1;
                let c = &mut self.clients[t.user];
                let counted = u64::from(t.begun > self.flushed_at);
                match RULES[t.rule] {
                    "fw" => c.fw_admitted += counted,
                    "tb" => c.tb_admitted += counted,
                    "sl" => c.sl_admitted += counted,
                    "gc" => c.gc_admitted += counted,
                    "ccx" => {
                        c.cx_admitted += counted;
                        c.cc_open += 1;
                    }
                    "cc" => c.cc_open += 1,
                    "co" => c.co_open += 1,
                    "rv" => c.rv_held += counted * RV_RESERVED,
                    _ => {}
                }
            }
        }
    }

    fn trace(&self, i: usize, step: &Step) {
        eprintln!(
            "step {i}: {step:?}; co slots taken {} in the store, {} locally",
            self.sum("ratelimit.co.slots_taken"),
            self.sum("ratelimit.co.slots_taken_locally")
        );
        for key in self.hosts[0].shared_keys().iter().filter(|k| k.starts_with("ratelimit.fallback.")) {
            let v = self.hosts[0].shared_value(key).unwrap_or_default();
            let fields: Vec<u64> = v.chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect();
            eprintln!("  {key}: {fields:?}");
        }
        for t in self.streams.iter().filter(|t| RULES[t.rule] == "co") {
            let state = self.hosts[t.proxy].state(t.id);
            eprintln!(
                "  co u{} {:?} begun {} admitted {}@{} by_store {} {state:?}",
                t.user, t.id, t.begun, t.admitted, t.admitted_at, t.by_store
            );
        }
    }

    /// An `rv` stream let through ended owing `owed` units.
    fn rv_ended(&mut self, t: &Tracked, owed: u64) {
        let c = &mut self.clients[t.user];
        c.rv_owed += owed;
        if t.begun > self.flushed_at {
            c.rv_held -= RV_RESERVED;
            c.rv_used += owed;
        }
    }

    /// A stream let through ended (or went with its VM).
    fn close_open(&mut self, t: &Tracked) {
        let c = &mut self.clients[t.user];
        match RULES[t.rule] {
            "cc" | "ccx" => c.cc_open -= 1,
            "co" => c.co_open -= 1,
            _ => {}
        }
    }

    fn check(&mut self) -> Result<(), String> {
        let taken = (self.sum("ratelimit.co.slots_taken"), self.sum("ratelimit.co.slots_taken_locally"));
        let (store_took, local_took) = (taken.0 > self.co_taken.0, taken.1 > self.co_taken.1);
        self.co_taken = taken;
        // With one proxy, a `co` stream the store let through (a step in
        // which the local share took none) was decided counting every
        // stream the local share had let through when it was planned; only
        // those let through since (by the local share, for all it knows:
        // concurrent with an outage) may go past the limit with it. With
        // more proxies another proxy's local streams are unseen until its
        // renewals move them (README's bound): not checked.
        if store_took && !local_took && self.hosts.len() == 1 && self.flushed_at == 0 {
            let step = self.step;
            for s in self.streams.iter_mut().filter(|t| t.admitted_at == step && RULES[t.rule] == "co") {
                s.by_store = true;
            }
            for s in self.streams.iter().filter(|t| t.admitted_at == step && t.by_store) {
                let open: Vec<&Tracked> =
                    self.streams.iter().filter(|t| t.user == s.user && t.admitted && RULES[t.rule] == "co").collect();
                let unseen = open.iter().filter(|t| !t.by_store && t.admitted_at > s.begun).count() as u64;
                invariants::check_after_outage(open.len() as u64, unseen)
                    .map_err(|v| format!("{v} (client u{}, a stream begun at step {})", s.user, s.begun))?;
            }
        }
        for host in &self.hosts {
            let traps = host.traps();
            if !traps.is_empty() {
                return Err(format!("no_trap: {traps:?}"));
            }
        }
        let secs = self.started.elapsed().as_secs();
        // After a flush, what each proxy's workers were leased before it
        // (at most one ask in flight per worker, each of max_units).
        let lease_slack = if self.flushed_at > 0 { (self.hosts.len() * VMS) as u64 * invariants::MAX_UNITS } else { 0 };
        for (user, client) in self.clients.iter().enumerate() {
            self.stats.checks += 1;
            // Streams in flight the store still knows of: begun since the
            // last flush (it forgot the slots of those before).
            let mut seen = client.clone();
            seen.cc_open = self
                .streams
                .iter()
                .filter(|t| {
                    t.user == user && t.admitted && RULES[t.rule].starts_with("cc") && t.begun > self.flushed_at
                })
                .count() as u64;
            invariants::check(&seen, secs, lease_slack).map_err(|v| format!("{v} (client u{user})"))?;
        }
        for host in &self.hosts {
            invariants::check_tables(&host.shared_keys(), SLOTS)?;
        }
        Ok(())
    }

    /// Every stream ends, the store heals, every call settles: no slot is
    /// left but those a failed release leaves to expire; a healthy store
    /// decides (never a 503).
    /// A counter summed over the proxies.
    fn sum(&self, name: &str) -> i64 {
        self.hosts.iter().map(|h| h.counter(name)).sum()
    }

    /// Units of rule `rule` (`tk`, `rv`) the store holds for `user`: its
    /// fixed windows' counts.
    fn charged(&mut self, user: usize, rule: &str) -> u64 {
        let pattern = format!("t:{{{}}}:{rule}:*", digest(&self.user(user)));
        let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query(&mut self.redis).unwrap();
        keys.iter().map(|k| redis::cmd("GET").arg(k).query::<Option<u64>>(&mut self.redis).unwrap().unwrap_or(0)).sum()
    }

    fn wind_down(&mut self) -> Result<(), String> {
        // Past the latest instant the module's wall clock showed (the clock
        // may have stepped back since: a breaker opened then waits on it).
        let latest = self.latest_wall;
        for host in &mut self.hosts {
            host.fault_mix(0, Vec::new());
            host.fault_always(None);
            let behind = latest.saturating_sub(host.now_ms());
            host.advance(behind + 3_000);
        }
        // What the healed store let through counts (it owes its charge).
        self.settle();
        for t in std::mem::take(&mut self.streams) {
            self.hosts[t.proxy].close(t.id);
            if t.admitted && RULES[t.rule] == "tk" {
                self.clients[t.user].tk_owed += 7;
            }
            if t.admitted && RULES[t.rule] == "rv" {
                self.rv_ended(&t, 7);
            }
        }
        self.hosts.iter_mut().for_each(|h| h.advance(3_000));
        let failures = self.sum("ratelimit.cc.slot_store_errors");
        for user in 0..USERS {
            let key = format!("t:{{{}}}:cc:cc", digest(&self.user(user)));
            let left: u64 = redis::cmd("ZCARD").arg(&key).query(&mut self.redis).unwrap();
            self.stats.checks += 1;
            invariants::check_released(left, failures, self.clients[user].cc_reloaded)
                .map_err(|v| format!("{v} (client u{user})"))?;
        }
        for user in 0..USERS {
            let charged = self.charged(user, "tk");
            self.stats.checks += 1;
            invariants::check_charged(charged, self.clients[user].tk_owed, self.calm)
                .map_err(|v| format!("{v} (client u{user})"))?;
            let held = self.charged(user, "rv");
            self.stats.checks += 1;
            let reserved = self.rv_begun[user] * RV_RESERVED;
            invariants::check_settled(held, self.clients[user].rv_owed, reserved, self.calm)
                .map_err(|v| format!("{v} (client u{user})"))?;
        }
        let fresh = self.hosts[0].send(0, Request::get("/fw/x").header("x-user", "after"));
        if fresh.status != 200 {
            return Err(format!("healthy_store_decides: a fresh client got {} once the store healed", fresh.status));
        }
        Ok(())
    }
}
