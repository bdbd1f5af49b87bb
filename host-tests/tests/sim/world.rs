//! One simulated fleet: worker VMs of the real module over a real Redis
//! (and webdis) on a clock the simulation moves, the streams the schedule
//! began, and what each client got.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Instant;

use host_tests::prng::Rng;
use host_tests::redis_server::RedisServer;
use host_tests::store_clock::StoreClock;
use host_tests::wasm_host::{Artifact, Host, Request, State, StreamId, EPOCH_MS};
use host_tests::webdis::Webdis;

use crate::checks::Checks;
use crate::ledger::{Decided, Ledger};
use crate::rules::{rvt_body, Kind as RuleKind, Rules, RV_BODY, RV_RESERVED};
use crate::schedule::{Draw, Step};

/// Worker VMs of each proxy.
pub const VMS: usize = 3;
/// The cluster name the configuration gives the store.
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
/// take new ones), on a clock the schedules move; emptied before each.
pub struct Servers {
    pub kind: Kind,
    pub clock: RefCell<StoreClock>,
    pub redis: RedisServer,
    webdis: Option<Webdis>,
}

impl Servers {
    /// Redis with the script loaded, and webdis for the webdis build, both
    /// on the store's clock.
    pub fn start(kind: Kind) -> Servers {
        let clock = StoreClock::at(EPOCH_MS);
        let redis = RedisServer::start_on_clock(&clock);
        let _: String =
            redis::cmd("SCRIPT").arg("LOAD").arg(ratelimit::script::SCRIPT).query(&mut redis.connect()).unwrap();
        let webdis = (kind == Kind::Webdis).then(|| Webdis::start_on_clock(redis.port, &clock));
        let servers = Servers { kind, clock: RefCell::new(clock), redis, webdis };
        servers.load_the_builds_script();
        servers
    }

    /// The build's own script loaded too (`RATELIMIT_DIST` may name an
    /// older build, another script): its first request meets `NOSCRIPT`,
    /// loads it and is sent again. No schedule's call meets `NOSCRIPT`
    /// then (the ledger would feed the model the call and its resend).
    fn load_the_builds_script(&self) {
        let rules = Rules::new(2, self.kind, 1, 16);
        let mut host = self.proxy(&rules.json, EPOCH_MS);
        let answer = host.send(0, Request::get("/fw/x").header("x-user", "warm-up"));
        assert_eq!(answer.status, 200, "the store did not decide a first request: {:?}", host.logs());
    }

    /// A proxy of this build over these servers, its clock at `start_ms`.
    fn proxy(&self, json: &str, start_ms: u64) -> Host {
        let artifact = match self.kind {
            Kind::Webdis => Artifact::Webdis,
            Kind::Redis => Artifact::Redis,
        };
        let b = Host::builder(artifact, json).vms(VMS).start_ms(start_ms).record_traps().forget_calls().journal();
        match &self.webdis {
            Some(w) => b.http_cluster(CLUSTER, w.port),
            None => b.redis_cluster(CLUSTER, self.redis.port),
        }
        .start()
    }
}

/// What runs covered.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub schedules: u64,
    pub requests: u64,
    pub admitted: u64,
    pub checks: Checks,
}

impl Stats {
    pub fn add(&mut self, other: &Stats) {
        self.schedules += other.schedules;
        self.requests += other.requests;
        self.admitted += other.admitted;
        self.checks.add(&other.checks);
    }
}

/// One schedule: everything that decides what it does.
#[derive(Clone, Debug)]
pub struct Schedule {
    pub kind: Kind,
    pub proxies: usize,
    /// Seeds the fault mixes (and drew the steps).
    pub seed: u64,
    /// The configuration's version (`rules`).
    pub version: u32,
    /// The clock's start, ms since the epoch.
    pub start_ms: u64,
    /// Slots of each shared-data table.
    pub slots: usize,
    pub steps: Vec<Step>,
}

impl Schedule {
    /// The schedule `seed` draws for `kind` and `proxies`: `steps` steps.
    pub fn draw(kind: Kind, seed: u64, proxies: usize, steps: usize) -> Schedule {
        let mut rng = Rng::new(seed ^ (kind as u64) << 63 ^ (proxies as u64) << 48);
        let calm = rng.below(4) == 0;
        let store_back = rng.below(3) == 0;
        // Few slots, so that clients and rules share them and push each
        // other out; or enough that a client's fallback entry is its own.
        let slots = if rng.below(2) == 0 { 16 } else { 64 };
        let start_ms = EPOCH_MS + rng.below(600_000);
        let table = Rules::new(2, kind, proxies, slots);
        // A few rules in play: enough requests each to reach their limits.
        let mut pool: Vec<usize> = (0..table.len()).collect();
        let rules: Vec<usize> = (0..4).map(|_| pool.swap_remove(rng.below(pool.len() as u64) as usize)).collect();
        let mut draw = Draw {
            rng,
            proxies,
            vms: VMS,
            webdis: kind == Kind::Webdis,
            calm,
            store_back,
            rules,
            table: &table,
            now_ms: start_ms,
            live: Vec::new(),
            next_id: 0,
            burst: None,
        };
        let steps = (0..steps).map(|_| draw.next()).collect();
        Schedule { kind, proxies, seed, version: 2, start_ms, slots, steps }
    }

    /// No faults, reloads, flushes or clock steps back.
    pub fn calm(&self) -> bool {
        self.steps.iter().all(|s| {
            !matches!(s, Step::Faults { .. } | Step::Reload { .. } | Step::Flush | Step::Back(_) | Step::StoreBack(_))
        })
    }
}

/// Which violations stop a schedule; the others are noted and gone past
/// (the world goes on as it was: a bug found does not hide the next).
#[derive(Clone, Debug, Default)]
pub struct Heed {
    /// Invariants found before (`SIM_KEEP_GOING`).
    pub known: Vec<String>,
    /// `SIM_HUNT=<text>[|<text>...]`: only violations that say one of
    /// them (one way among several to violate an invariant, e.g.
    /// "refused after refunds").
    pub hunt: String,
    /// `SIM_SKIP=<text>[|<text>...]`: not those that say one of these
    /// (e.g. "n > 1", against a build that predates it).
    pub skip: String,
}

impl Heed {
    /// Every violation stops the schedule.
    pub fn all() -> Heed {
        Heed::default()
    }

    /// Whether `violation` stops the schedule.
    pub fn stops(&self, violation: &str) -> bool {
        let says = |texts: &str| texts.split('|').any(|t| violation.contains(t));
        !self.known.iter().any(|k| k == name(violation))
            && says(&self.hunt)
            && (self.skip.is_empty() || !says(&self.skip))
    }
}

/// Runs `steps` steps of `seed`'s schedule on `servers` with `proxies`
/// proxies sharing the store: its first violation `heed` stops at, with
/// the schedule shrunk to what still violates that invariant.
pub fn run(servers: &Servers, seed: u64, proxies: usize, steps: usize, heed: &Heed) -> Result<Stats, Found> {
    let schedule = Schedule::draw(servers.kind, seed, proxies, steps);
    let violation = match replay_heeding(servers, &schedule, heed) {
        Ok(stats) => return Ok(stats),
        Err(v) => v,
    };
    let invariant = name(&violation).to_string();
    let started = Instant::now();
    let shrunk = shrink(servers, schedule, &violation, heed);
    let report = format!(
        "sim: seed {seed} ({:?}, {proxies} proxies) violated {violation}\nreplay: SIM_SEED={seed} cargo test -p host-tests --test sim -- --ignored replay --nocapture\nshrunk to {} steps in {:.0} s; save as a regression (host-tests/tests/sim/regressions/<name>.txt):\n# <what it found>\n{}",
        servers.kind,
        shrunk.steps.len(),
        started.elapsed().as_secs_f64(),
        crate::regressions::text(&shrunk)
    );
    Err(Found { invariant, report, shrinking: started.elapsed() })
}

/// A violated invariant, and the report of the schedule that violated it.
#[derive(Debug)]
pub struct Found {
    pub invariant: String,
    pub report: String,
    /// How long shrinking it took (the violation was found before).
    pub shrinking: std::time::Duration,
}

/// The invariant a violation names (its text up to the colon).
pub fn name(violation: &str) -> &str {
    violation.split(':').next().unwrap_or(violation)
}

/// Cuts `schedule` down while it still violates the invariant `violation`
/// names: chunks of halves, quarters, ... down to single steps removed in
/// turn (ddmin-like), a bounded number of replays.
fn shrink(servers: &Servers, mut schedule: Schedule, violation: &str, heed: &Heed) -> Schedule {
    const REPLAYS: usize = 500;
    let mut replays = 0;
    let mut chunk = schedule.steps.len() / 2;
    while chunk > 0 && replays < REPLAYS {
        let mut at = 0;
        while at < schedule.steps.len() && replays < REPLAYS {
            let mut shorter = schedule.clone();
            shorter.steps.drain(at..(at + chunk).min(schedule.steps.len()));
            replays += 1;
            let still = matches!(replay_heeding(servers, &shorter, heed), Err(v) if name(&v) == name(violation));
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

/// A stream the schedule began.
pub struct Tracked {
    /// Its `Begin`'s id.
    pub begin_id: usize,
    pub proxy: usize,
    pub id: StreamId,
    pub rule: usize,
    pub user: usize,
    /// Units it reserves at admission (`rv`, `rvt`).
    pub reserved: u64,
    /// The completions its body asks for (`rvt`'s `n`; else 1).
    pub choices: u64,
    /// Its request body's bytes.
    pub prompt_bytes: u64,
    /// Still live (not ended, not gone with its VM).
    pub live: bool,
    /// The step it began at.
    pub begun: usize,
    /// The module's wall clock then.
    pub begun_wall: u64,
    /// The flushes before it began.
    pub epoch: u32,
    /// The store decisions it still waits to see dispatched: (identity, rule).
    pub expected: Vec<(String, usize)>,
    /// How many store decisions it needs (one per identity).
    pub wanted: usize,
    /// Its request-time decisions, as the store got them.
    pub decisions: Vec<Decided>,
    /// Decided by the proxy alone (deny cache, lease, breaker, local share).
    pub local: bool,
    /// Refused from the deny cache.
    pub cached: bool,
    /// Where the filter left it once decided (`None`: still waiting).
    pub verdict: Option<State>,
    /// Let through (counted once), at this host time, at this step.
    pub admitted: Option<u64>,
    pub admitted_step: usize,
    /// Gone with its VM (a reload).
    pub reloaded: bool,
    /// What it was charged in the end (`tk`, `tkb`, `rv`, `rvt`), once it ended.
    pub charged: Option<u64>,
}

impl Tracked {
    /// Whether every decision of it reached the module from the store.
    pub fn by_store(&self) -> bool {
        self.decisions.len() == self.wanted && self.decisions.iter().all(|d| d.answered == Some(true))
    }
}

/// The proxies, their servers and what the schedule did.
pub struct World<'a> {
    pub servers: &'a Servers,
    pub rules: Rules,
    pub hosts: Vec<Host>,
    pub redis: redis::Connection,
    /// Every stream begun, in order (indices are stable).
    pub streams: Vec<Tracked>,
    pub ledger: Ledger,
    /// Per proxy: the streams each call in flight carries decisions of.
    open_calls: Vec<BTreeMap<u64, Vec<usize>>>,
    pub stats: Stats,
    pub seed: u64,
    /// The step running (from 1).
    pub step: usize,
    /// Flushes so far.
    pub epoch: u32,
    /// No faults, reloads, flushes or clock steps back in this schedule.
    pub calm: bool,
    /// The host's time (every proxy's), and how far the store's clock and
    /// the proxies' wall clock stand behind it.
    pub host_ms: u64,
    pub start_ms: u64,
    pub store_behind: u64,
    pub wall_behind: u64,
    /// The store's clock steps back so far: (host time, ms).
    pub store_backs: Vec<(u64, u64)>,
    /// The proxies' wall clock steps back so far: (host time, the wall
    /// clock before, ms).
    pub wall_backs: Vec<(u64, u64, u64)>,
    /// Violations seen while a step ran (reported after it).
    pub violations: Vec<String>,
    /// Checks made, by invariant.
    tally: RefCell<Checks>,
    /// Per proxy: intervals (host ms) its store calls met faults.
    pub faulty: Vec<Vec<(u64, u64)>>,
    /// The latest instant the proxies' wall clock showed.
    latest_wall: u64,
    /// Which violations stop the schedule.
    heed: Heed,
    /// The invariants violated and gone past (printed once each).
    gone_past: Vec<String>,
}

/// Runs `schedule` on fresh proxies and store: what it covered, or the
/// first violated invariant.
pub fn replay(servers: &Servers, schedule: &Schedule) -> Result<Stats, String> {
    replay_heeding(servers, schedule, &Heed::all())
}

/// `replay`, going past the violations `heed` does not stop at (each
/// printed the first time in the schedule).
pub fn replay_heeding(servers: &Servers, schedule: &Schedule, heed: &Heed) -> Result<Stats, String> {
    let kind = servers.kind;
    let rules = Rules::new(schedule.version, kind, schedule.proxies, schedule.slots);
    // A fresh store (the script stays loaded), its clock at the start.
    servers.clock.borrow_mut().set_ms(schedule.start_ms);
    let mut redis = servers.redis.connect();
    let () = redis::cmd("FLUSHALL").query(&mut redis).unwrap();
    let hosts: Vec<Host> = (0..schedule.proxies).map(|_| servers.proxy(&rules.json, schedule.start_ms)).collect();
    for vm in 0..VMS {
        assert!(hosts[0].configured(vm), "the simulated configuration is refused: {:?}", hosts[0].logs());
    }
    let mut world = World {
        servers,
        rules,
        hosts,
        redis,
        streams: Vec::new(),
        ledger: Ledger::new(),
        open_calls: vec![BTreeMap::new(); schedule.proxies],
        stats: Stats { schedules: 1, ..Stats::default() },
        seed: schedule.seed,
        step: 0,
        epoch: 0,
        calm: schedule.calm(),
        host_ms: schedule.start_ms,
        start_ms: schedule.start_ms,
        store_behind: 0,
        wall_behind: 0,
        store_backs: Vec::new(),
        wall_backs: Vec::new(),
        violations: Vec::new(),
        tally: RefCell::new(Checks::default()),
        faulty: vec![Vec::new(); schedule.proxies],
        latest_wall: schedule.start_ms,
        heed: heed.clone(),
        gone_past: Vec::new(),
    };
    // The configuration itself reaches the store (INFO): take it.
    world.drain_all();
    // SIM_TRACE=1: every step, and the streams after it.
    let trace = std::env::var_os("SIM_TRACE").is_some();
    for (i, step) in schedule.steps.iter().enumerate() {
        world.step = i + 1;
        world.apply(step);
        world.latest_wall = world.latest_wall.max(world.host_ms - world.wall_behind);
        if trace {
            world.trace(i, step);
        }
        world.check().map_err(|v| format!("{v} at step {i}"))?;
    }
    world.wind_down()?;
    world.stats.checks = world.tally.take();
    Ok(world.stats)
}

impl World<'_> {
    /// The module's wall clock now.
    pub fn wall_ms(&self) -> u64 {
        self.host_ms - self.wall_behind
    }

    /// The store's clock now.
    pub fn store_ms(&self) -> u64 {
        self.host_ms - self.store_behind
    }

    /// How far the store's clock moved forward in all by host time `host_ms`
    /// (each step back is time it goes over again).
    pub fn travel_at(&self, host_ms: u64) -> u64 {
        host_ms - self.start_ms + self.store_backs.iter().map(|(_, ms)| ms).sum::<u64>()
    }

    fn user(&self, user: usize) -> String {
        format!("u{user}")
    }

    /// The identity (keys' hash tag) of `user` for rule `rule` (see
    /// `Rules::new` for the keys).
    pub fn identity_of(&self, user: usize, rule: usize) -> String {
        let mut escaped = String::new();
        ratelimit::identity::escape_into(&mut escaped, self.user(user).as_bytes());
        let name = self.rules.get(rule).name;
        let second = match (self.rules.get(rule).kind, self.rules.version) {
            (RuleKind::SlotAndWindow, _) => Some(format!("/{name}/x")),
            (_, 1) => None,
            _ => Some(name.to_string()),
        };
        if let Some(part) = second {
            escaped.push_str("~~");
            ratelimit::identity::escape_into(&mut escaped, part.as_bytes());
        }
        ratelimit::identity::digest(&escaped)
    }

    fn apply(&mut self, step: &Step) {
        match step {
            Step::Begin { id, proxy, vm, rule, user, n, choices, trailers } => {
                self.begin(*id, *proxy, *vm, *rule, *user, (*n, *choices), *trailers)
            }
            Step::Deliver => {
                for p in 0..self.hosts.len() {
                    self.hosts[p].run_until_idle();
                    self.drain(p);
                }
                self.settle();
            }
            Step::End { stream, hang_up, usage, cut, shape } => {
                if let Some(i) = self.streams.iter().position(|t| t.begin_id == *stream && t.live) {
                    self.end(i, *hang_up, *usage, *cut, *shape);
                }
            }
            Step::EndNth { nth, hang_up, usage } => {
                let live: Vec<usize> = (0..self.streams.len()).filter(|&i| self.streams[i].live).collect();
                if !live.is_empty() {
                    self.end(live[nth % live.len()], *hang_up, *usage, 0, 0);
                }
            }
            Step::Advance(ms) => self.advance(*ms),
            Step::Back(ms) => {
                // One clock for the fleet.
                let ms = (*ms).min(self.wall_ms() - self.start_ms);
                self.wall_backs.push((self.host_ms, self.wall_ms(), ms));
                self.hosts.iter_mut().for_each(|h| h.step_back(ms));
                self.wall_behind += ms;
                // Window keys now expire on the store's clock before their
                // window ends on the proxies': the model keeps them.
                self.ledger.model = None;
            }
            Step::StoreBack(ms) => {
                let ms = (*ms).min(self.store_ms() - self.start_ms);
                self.store_behind += ms;
                self.store_backs.push((self.host_ms, ms));
                self.servers.clock.borrow_mut().set_ms(self.store_ms());
                // Keys the store expired on the way are gone there, kept by the model.
                self.ledger.model = None;
            }
            Step::Flush => {
                let () = redis::cmd("FLUSHALL").query(&mut self.redis).unwrap();
                self.epoch += 1;
                self.ledger.flush();
            }
            Step::Faults { proxy, mix } => {
                let host = &mut self.hosts[*proxy];
                if mix.is_empty() {
                    host.fault_mix(0, Vec::new());
                    host.fault_always(None);
                    if let Some(last) = self.faulty[*proxy].last_mut().filter(|f| f.1 == u64::MAX) {
                        last.1 = self.host_ms;
                    }
                } else {
                    host.fault_mix(self.seed, mix.clone());
                    if self.faulty[*proxy].last().is_none_or(|f| f.1 != u64::MAX) {
                        self.faulty[*proxy].push((self.host_ms, u64::MAX));
                    }
                }
            }
            Step::Reload { proxy, vm } => {
                self.hosts[*proxy].reload_vm(*vm);
                // Its streams went with it (Envoy answered them 503).
                let gone: Vec<usize> = (0..self.streams.len())
                    .filter(|&i| {
                        self.streams[i].live && self.streams[i].proxy == *proxy && self.streams[i].id.vm == *vm
                    })
                    .collect();
                for i in gone {
                    let t = &mut self.streams[i];
                    t.live = false;
                    t.reloaded = true;
                    t.expected.clear();
                    // Nobody settles what a reload took: a reservation
                    // stays whole, a charge is never made.
                    if t.admitted.is_some() {
                        t.charged = Some(t.reserved);
                    }
                }
                self.drain(*proxy);
                self.settle();
            }
        }
    }

    /// Request `begin_id` of `user` for `rule` on worker `vm` of proxy
    /// `proxy`; `(n, choices)`: the output bound and completions an `rvt`
    /// body states.
    #[allow(clippy::too_many_arguments)]
    fn begin(
        &mut self,
        begin_id: usize,
        proxy: usize,
        vm: usize,
        rule: usize,
        user: usize,
        (n, choices): (u64, u64),
        trailers: bool,
    ) {
        let r = self.rules.get(rule).clone();
        let path = format!("/{}/x", r.name);
        let (request, reserved) = match r.kind {
            RuleKind::Reserved => (Request::new("POST", &path).body(RV_BODY.as_bytes()), RV_RESERVED),
            RuleKind::ReservedBody => {
                let (body, reserved) = rvt_body(n.max(1), choices);
                (Request::new("POST", &path).body(body.as_bytes()), reserved)
            }
            _ => (Request::get(&path), 0),
        };
        let mut request = request.header("x-user", &self.user(user));
        if trailers {
            request = request.trailers(&[("x-trailer", "1")]);
        }
        let prompt_bytes = request.body.as_ref().map_or(0, |b| b.len() as u64);
        let expected = match r.kind {
            RuleKind::SlotAndWindow => {
                let cc = self.rules.index("cc").unwrap();
                vec![(self.identity_of(user, cc), cc), (self.identity_of(user, rule), rule)]
            }
            _ => vec![(self.identity_of(user, rule), rule)],
        };
        let hits = format!("ratelimit.{}.deny_cache_hits", r.name);
        let before = self.hosts[proxy].counter_or_zero(&hits);
        let id = self.hosts[proxy].begin(vm, request);
        let cached = self.hosts[proxy].counter_or_zero(&hits) > before;
        self.stats.requests += 1;
        self.streams.push(Tracked {
            begin_id,
            prompt_bytes,
            proxy,
            id,
            rule,
            user,
            reserved,
            choices,
            live: true,
            begun: self.step,
            begun_wall: self.wall_ms(),
            epoch: self.epoch,
            wanted: expected.len(),
            expected,
            decisions: Vec::new(),
            local: false,
            cached,
            verdict: None,
            admitted: None,
            admitted_step: 0,
            reloaded: false,
            charged: None,
        });
        self.drain(proxy);
        self.settle();
    }

    /// Takes what proxy `proxy` sent the store and what it was answered.
    fn drain(&mut self, proxy: usize) {
        let calls = self.hosts[proxy].take_dispatched();
        for call in calls {
            if std::env::var_os("SIM_TRACE").is_some() {
                eprintln!(
                    "  call {} vm {} {:?} at {}: {:?}",
                    call.id,
                    call.vm,
                    call.fault,
                    call.dispatched_ms,
                    call.request.args()
                );
            }
            let behind = self.store_behind;
            let store_ms = call.dispatched_ms - behind;
            let travel = self.travel_at(call.dispatched_ms);
            let rules = &self.rules;
            let decided = self.ledger.record(&call, store_ms, travel, self.epoch, |name| rules.index(name));
            for d in decided {
                // The oldest live stream of that worker waiting for it.
                let found = self.streams.iter().position(|t| {
                    t.proxy == proxy
                        && t.id.vm == call.vm
                        && t.expected.iter().any(|(id, r)| *r == d.rule && *id == d.decision.identity)
                });
                let Some(i) = found else { continue };
                let t = &mut self.streams[i];
                t.expected.retain(|(id, r)| !(*r == d.rule && *id == d.decision.identity));
                // A reservation takes its body's worst case, no less.
                for l in &d.decision.limits {
                    if let ratelimit::spec::Op::Reserve(a) = l.op {
                        if a != t.reserved {
                            self.violations.push(format!(
                                "reserved.never_over: {} reserved {a} units, its body's worst case is {} (stream #{i})",
                                l.rule, t.reserved
                            ));
                        }
                    }
                }
                t.decisions.push(d);
                self.open_calls[proxy].entry(call.id).or_default().push(i);
            }
        }
        for (id, from_store) in self.hosts[proxy].take_answers() {
            for i in self.open_calls[proxy].remove(&id).unwrap_or_default() {
                for d in self.streams[i].decisions.iter_mut().filter(|d| d.call == id) {
                    d.answered = Some(from_store);
                }
            }
        }
    }

    fn drain_all(&mut self) {
        for p in 0..self.hosts.len() {
            self.drain(p);
        }
    }

    /// Moves every clock `ms` forward, event by event across the proxies,
    /// so that each store call runs at the store's instant it was made.
    fn advance(&mut self, ms: u64) {
        let target = self.host_ms + ms;
        loop {
            for p in 0..self.hosts.len() {
                self.hosts[p].run_until_idle();
                self.drain(p);
            }
            self.settle();
            let next = self.hosts.iter().filter_map(Host::next_event_ms).filter(|t| *t <= target).min();
            let t = next.unwrap_or(target).max(self.host_ms);
            self.host_ms = t;
            self.servers.clock.borrow_mut().set_ms(self.store_ms());
            for p in 0..self.hosts.len() {
                self.hosts[p].advance_to(t);
                self.drain(p);
            }
            self.settle();
            if next.is_none() {
                break;
            }
        }
    }

    /// Notes the streams decided since the last step.
    fn settle(&mut self) {
        for i in 0..self.streams.len() {
            let t = &self.streams[i];
            if !t.live || t.verdict.is_some() {
                continue;
            }
            let state = self.hosts[t.proxy].state(t.id);
            if state == State::Waiting {
                continue;
            }
            let host_ms = self.host_ms;
            let t = &mut self.streams[i];
            if t.decisions.is_empty() {
                t.local = true;
            }
            t.expected.clear();
            if state == State::Continued {
                t.admitted = Some(host_ms);
                t.admitted_step = self.step;
                self.stats.admitted += 1;
            }
            t.verdict = Some(state);
            crate::checks::on_verdict(self, i);
        }
    }

    /// Stream `i` ends.
    fn end(&mut self, i: usize, hang_up: bool, usage: u64, cut: u64, shape: u64) {
        crate::streams::end(self, i, hang_up, usage, cut, shape);
        self.drain(self.streams[i].proxy);
        self.settle();
    }

    fn trace(&mut self, i: usize, step: &Step) {
        let keys: Vec<String> = redis::cmd("KEYS").arg("t:*").query(&mut self.redis).unwrap();
        for k in keys {
            let v: redis::Value = redis::cmd("DUMP").arg(&k).query(&mut self.redis).unwrap();
            let ty: String = redis::cmd("TYPE").arg(&k).query(&mut self.redis).unwrap();
            let shown = if ty == "zset" {
                let m: Vec<String> =
                    redis::cmd("ZRANGE").arg(&k).arg(0).arg(-1).arg("WITHSCORES").query(&mut self.redis).unwrap();
                format!("zset {m:?}")
            } else if ty == "string" {
                redis::cmd("GET").arg(&k).query::<String>(&mut self.redis).unwrap()
            } else {
                format!("{ty} {v:?}").chars().take(40).collect()
            };
            let ttl: i64 = redis::cmd("PTTL").arg(&k).query(&mut self.redis).unwrap();
            eprintln!("  key {k} = {shown} pttl {ttl}");
        }
        let time: Vec<String> = redis::cmd("TIME").query(&mut self.redis).unwrap();
        eprintln!(
            "step {i}: {step:?} host {} wall {} store {} (clock {}, TIME {time:?})",
            self.host_ms,
            self.wall_ms(),
            self.store_ms(),
            self.servers.clock.borrow().now_ms()
        );
        for (p, h) in self.hosts.iter().enumerate() {
            eprintln!(
                "  proxy {p}: {} calls made, logs {:?}",
                h.calls_made(),
                h.logs().iter().rev().take(3).collect::<Vec<_>>()
            );
        }
        for (n, t) in self.streams.iter().enumerate().filter(|(_, t)| t.live) {
            eprintln!(
                "  #{n} {} u{} p{} {:?} begun {} admitted {:?} local {} cached {} decisions {:?}",
                self.rules.get(t.rule).name,
                t.user,
                t.proxy,
                t.id,
                t.begun,
                t.admitted,
                t.local,
                t.cached,
                t.decisions.iter().map(|d| (d.caller_ms, d.store_ms, d.answered, d.model.clone())).collect::<Vec<_>>()
            );
        }
    }

    fn check(&mut self) -> Result<(), String> {
        let mut found = std::mem::take(&mut self.violations);
        found.extend(crate::checks::after_step(self));
        self.heeded(found)
    }

    /// The first of `found` that stops the schedule; the others printed
    /// (the first of each invariant) and gone past.
    fn heeded(&mut self, found: Vec<String>) -> Result<(), String> {
        for v in found {
            if self.heed.stops(&v) {
                return Err(v);
            }
            if !self.gone_past.iter().any(|g| g == name(&v)) {
                eprintln!("sim: seed {} went past {v} at step {}", self.seed, self.step.saturating_sub(1));
                self.gone_past.push(name(&v).to_string());
            }
        }
        Ok(())
    }

    /// Every stream ends, the store heals, every call settles: then the
    /// checks that need everything settled.
    fn wind_down(&mut self) -> Result<(), String> {
        // Past the latest instant the module's wall clock showed (the clock
        // may have stepped back since: a breaker opened then waits on it).
        for host in &mut self.hosts {
            host.fault_mix(0, Vec::new());
            host.fault_always(None);
        }
        for f in self.faulty.iter_mut().flat_map(|f| f.last_mut()).filter(|f| f.1 == u64::MAX) {
            f.1 = self.host_ms;
        }
        let behind = self.latest_wall.saturating_sub(self.wall_ms());
        self.advance(behind + 3_000);
        for i in 0..self.streams.len() {
            if self.streams[i].live {
                crate::streams::end(self, i, false, 7, 0, 0);
                self.drain(self.streams[i].proxy);
            }
        }
        self.advance(3_000);
        self.check()?;
        let found = crate::checks::wind_down(self);
        self.heeded(found)?;
        let fresh = self.hosts[0].send(0, Request::get("/fw/x").header("x-user", "after"));
        self.drain(0);
        self.count("healthy_store_decides");
        if fresh.status != 200 {
            let v = format!("healthy_store_decides: a fresh client got {} once the store healed", fresh.status);
            return self.heeded(vec![v]);
        }
        Ok(())
    }

    /// A counter summed over the proxies.
    pub fn sum(&self, name: &str) -> i64 {
        self.hosts.iter().map(|h| h.counter_or_zero(name)).sum()
    }

    /// Units of rule `rule` the store holds for `user` in its fixed windows.
    pub fn window_counts(&mut self, user: usize, rule: usize) -> u64 {
        let pattern = format!("t:{{{}}}:{}:*", self.identity_of(user, rule), self.rules.get(rule).name);
        let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query(&mut self.redis).unwrap();
        if std::env::var_os("SIM_TRACE").is_some() {
            eprintln!("{pattern}: {keys:?}");
        }
        keys.iter().map(|k| redis::cmd("GET").arg(k).query::<Option<u64>>(&mut self.redis).unwrap().unwrap_or(0)).sum()
    }

    /// Slots the store holds for `user` of concurrency rule `rule`.
    pub fn slots_held(&mut self, user: usize, rule: usize) -> u64 {
        let key = format!("t:{{{}}}:{}:cc", self.identity_of(user, rule), self.rules.get(rule).name);
        let now = self.store_ms();
        redis::cmd("ZCOUNT").arg(&key).arg(format!("({now}")).arg("+inf").query(&mut self.redis).unwrap()
    }

    /// One more check of invariant `name`.
    pub fn count(&self, name: &'static str) {
        self.tally.borrow_mut().count(name);
    }
}
