//! Concurrency limits with real Envoys sharing one Redis: a client may hold
//! at most `limit` streams in flight across the fleet; a slot is taken at
//! admission, released once when its stream ends (the upstream completes
//! it, cuts it, the client hangs up, the request is refused by another
//! rule), renewed while the stream lives, and expires after `max_hold` when
//! its proxy is killed. The upstream (`held_streams`) holds every stream
//! open until the test ends it and counts the streams open at once. The VM
//! reload case runs in the wasmtime host (`concurrency_reload`): Envoy
//! cannot reload the filter's VM on demand.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use host_tests::envoy::{start_edited, Edit, Envoy};
use host_tests::fleet::rss_kib;
use host_tests::held_streams::{open, HeldStreams, OpenStream, Opened};
use host_tests::http::{agent, send, Answer};
use host_tests::paths::dist;
use host_tests::redis_server::RedisServer;
use host_tests::webdis::Webdis;
use ratelimit::identity::digest;

use crate::{plugin_config, scan_keys};

/// The concurrency 429's body for rule `cc`.
pub const REFUSED_BODY: &str = r#"{"error":"rate_limited","rule":"cc","retry_after":1,"reason":"concurrency"}"#;
/// How long something the proxies do at once may take on a loaded machine.
const SOON: Duration = Duration::from_secs(10);

/// Rule `cc` on `/cc`: `limit` streams per `x-user`, slots living `max_hold`.
fn cc_rule(limit: usize, max_hold: &str) -> String {
    format!(
        r#"{{"name":"cc","match":{{"path_prefix":"/cc"}},"key":["header:x-user"],"failure_mode":"closed",
            "limits":[{{"algorithm":"concurrency","limit":{limit},"max_hold":"{max_hold}"}}]}}"#
    )
}

/// Rule `gate`: one request an hour per `x-gate`; requests without it are not its business.
const GATE: &str = r#"{"name":"gate","key":["header:x-gate"],"failure_mode":"closed",
    "limits":[{"algorithm":"sliding_log","limit":1,"window":"1h"}]}"#;

/// Asserts `a` is the concurrency 429, exactly.
pub fn assert_refused(a: &Answer) {
    assert_eq!((a.status, a.body.as_str()), (429, REFUSED_BODY), "{a:?}");
    assert_eq!(a.header("retry-after"), Some("1"), "{a:?}");
}

/// Envoys from envoy.yaml (route timeout raised from 5 s to 60 s: the
/// streams outlive it) in front of one upstream, sharing one webdis and Redis.
struct Proxies {
    envoys: Vec<Envoy>,
    upstream: HeldStreams,
    _webdis: Webdis,
    redis: RedisServer,
    tags: AtomicU64,
}

impl Proxies {
    fn start(proxies: usize, workers: u32, rules: &str) -> Proxies {
        let redis = RedisServer::start();
        let webdis = Webdis::start(redis.port);
        let upstream = HeldStreams::start();
        // A store timeout a loaded machine meets, and no deny cache: every
        // decision goes to the store.
        let config = plugin_config(r#","timeout_ms":1000"#, r#""deny_cache":{"enabled":false},"#, rules);
        let module = dist("ratelimit.wasm");
        let (upstream_port, webdis_port) = (upstream.port(), webdis.port);
        let edits = [Edit { from: "timeout: 5s", to: "timeout: 60s" }];
        let envoys = std::thread::scope(|s| {
            let starting: Vec<_> = (0..proxies)
                .map(|_| s.spawn(|| start_edited(upstream_port, webdis_port, &module, &config, workers, &edits, &[])))
                .collect();
            let started = starting.into_iter().map(|t| t.join().unwrap());
            started.map(|e| e.unwrap_or_else(|e| panic!("envoy refused to start:\n{}", e.log))).collect()
        });
        Proxies { envoys, upstream, _webdis: webdis, redis, tags: AtomicU64::new(0) }
    }

    /// A stream of `user` on `/cc/stream` through proxy `proxy`.
    fn open(&self, proxy: usize, user: &str, extra: &[(&str, &str)]) -> Opened {
        let tag = format!("s{}", self.tags.fetch_add(1, Ordering::Relaxed));
        open(self.envoys[proxy].port, "/cc/stream", user, &tag, extra)
    }

    /// Polls (through the proxies in turn) until a stream of `user` is
    /// admitted; every refusal on the way is the concurrency 429. The
    /// stream and the refusals.
    fn admitted_again(&self, user: &str) -> (OpenStream, u64) {
        let deadline = Instant::now() + SOON;
        for attempt in 0.. {
            match self.open(attempt % self.envoys.len(), user, &[]) {
                Opened::Streaming(s) => return (s, attempt as u64),
                Opened::Answered(a) => assert_refused(&a),
            }
            assert!(Instant::now() < deadline, "no stream of {user} admitted within {SOON:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
        unreachable!()
    }

    /// Counter `ratelimit.cc.<name>` summed over the proxies still running.
    fn stat(&self, name: &str) -> u64 {
        self.envoys.iter().map(|e| e.stat(&format!("wasmcustom.ratelimit.cc.{name}"))).sum()
    }

    fn redis(&self) -> redis::Connection {
        self.redis.connect()
    }

    /// Members of `user`'s slot set, with their expiry (ms on Redis's clock).
    fn slots(&self, user: &str) -> Vec<(String, u64)> {
        let key = cc_key(user);
        let slots: Vec<(String, f64)> =
            redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1).arg("WITHSCORES").query(&mut self.redis()).unwrap();
        slots.into_iter().map(|(m, s)| (m, s as u64)).collect()
    }

    /// ZCARD of `user`'s slot set (expired members not yet swept included).
    fn zcard(&self, user: &str) -> u64 {
        redis::cmd("ZCARD").arg(cc_key(user)).query(&mut self.redis()).unwrap()
    }

    /// Slots of `user` not expired on Redis's clock, and that clock (ms).
    fn live(&self, user: &str) -> (u64, u64) {
        let mut c = self.redis();
        let now = redis_now_ms(&mut c);
        (redis::cmd("ZCOUNT").arg(cc_key(user)).arg(format!("({now}")).arg("+inf").query(&mut c).unwrap(), now)
    }

    /// Asserts `user` holds `n` slots and the upstream has `n` of its streams open.
    fn assert_held(&self, user: &str, n: usize) {
        assert_eq!(self.zcard(user), n as u64, "slots of {user}");
        assert_eq!(self.upstream.open(user), n, "streams of {user} open at the upstream");
    }

    /// Waits until `cond` holds; fails after `SOON` saying `what`.
    fn wait(&self, what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + SOON;
        while !cond() {
            assert!(Instant::now() < deadline, "{what}: not within {SOON:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The Redis key of `user`'s slots (`x-user` identities are digested).
fn cc_key(user: &str) -> String {
    format!("t:{{{}}}:cc:cc", digest(user))
}

/// Redis's clock in ms.
fn redis_now_ms(c: &mut redis::Connection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(c).unwrap();
    s * 1000 + us / 1000
}

/// `n` streams of `user` requested at once, through the proxies in turn.
fn at_once(f: &Arc<Proxies>, user: &str, n: usize) -> Vec<Opened> {
    let barrier = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let (f, barrier, user) = (f.clone(), barrier.clone(), user.to_string());
            std::thread::spawn(move || {
                barrier.wait();
                f.open(i % f.envoys.len(), &user, &[])
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn three_proxies_hold_a_client_to_its_limit_and_each_way_a_stream_ends_frees_its_slot() {
    let f = Arc::new(Proxies::start(3, 2, &format!("{},{GATE}", cc_rule(5, "60s"))));
    // Gate's one request of the hour for x-gate "g", on a path cc does not match.
    let burn = open(f.envoys[0].port, "/short", "nobody", "burn", &[("x-gate", "g")]).stream();
    assert!(burn.read_rest().contains("[DONE]"));

    // Twelve at once, four through each proxy: exactly five admitted.
    let (mut streams, mut refusals) = (Vec::new(), 0);
    for o in at_once(&f, "u", 12) {
        match o {
            Opened::Streaming(s) => streams.push(s),
            Opened::Answered(a) => {
                assert_refused(&a);
                refusals += 1;
            }
        }
    }
    assert_eq!(streams.len(), 5, "admitted of 12 at once");
    f.assert_held("u", 5);
    for p in 0..3 {
        assert_refused(&f.open(p, "u", &[]).answer());
        refusals += 1;
    }
    let mut admitted = 5;
    let mut readmit = |streams: &mut Vec<OpenStream>, refusals: &mut u64| {
        let (s, refused) = f.admitted_again("u");
        streams.push(s);
        *refusals += refused;
        f.assert_held("u", 5);
        admitted += 1;
    };

    // The upstream completes a stream: the client reads it to its end.
    let s = streams.remove(0);
    assert!(f.upstream.complete(&s.tag));
    assert!(s.read_rest().contains("[DONE]"));
    readmit(&mut streams, &mut refusals);

    // The client hangs up mid-stream: Envoy resets the upstream request.
    streams.remove(0).hang_up();
    assert!(f.upstream.wait_open("u", 4, SOON), "the upstream saw the stream end");
    readmit(&mut streams, &mut refusals);

    // The upstream cuts the stream mid-way: the client's stream is cut too.
    let s = streams.remove(0);
    assert!(f.upstream.cut(&s.tag));
    assert!(!s.read_rest().contains("[DONE]"));
    readmit(&mut streams, &mut refusals);

    // A local reply: with one slot free, a request cc admits but gate
    // refuses gives its slot back.
    let s = streams.remove(0);
    assert!(f.upstream.complete(&s.tag));
    s.read_rest();
    f.wait("a completed stream's slot released", || f.zcard("u") == 4);
    let (taken, released) = (f.stat("slots_taken"), f.stat("slots_released"));
    for p in 0..3 {
        let a = f.open(p, "u", &[("x-gate", "g")]).answer();
        let body: serde_json::Value = serde_json::from_str(&a.body).unwrap();
        assert_eq!((a.status, &body["error"], &body["rule"]), (429, &"rate_limited".into(), &"gate".into()), "{a:?}");
        assert_eq!(body.get("reason"), None, "{a:?}");
        assert_eq!(a.header("retry-after").map(str::to_string), Some(body["retry_after"].to_string()));
        let what = || {
            let (t, r) = (f.stat("slots_taken") - taken, f.stat("slots_released") - released);
            let errors = f.stat("slot_store_errors");
            format!("proxy {p}: the refused request's slot released ({t} taken, {r} released, {errors} store errors, ZCARD {})", f.zcard("u"))
        };
        let deadline = Instant::now() + SOON;
        while f.stat("slots_released") - released != f.stat("slots_taken") - taken {
            assert!(Instant::now() < deadline, "{}: not within {SOON:?}", what());
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(f.zcard("u"), 4);
    }
    eprintln!("requests refused by gate took {} slots", f.stat("slots_taken") - taken);
    readmit(&mut streams, &mut refusals);

    // Every stream ends: every slot released once, the key gone.
    for s in streams {
        assert!(f.upstream.complete(&s.tag));
        s.read_rest();
    }
    f.wait("every slot released", || f.stat("slots_released") == f.stat("slots_taken"));
    assert_eq!(f.zcard("u"), 0);
    let exists: u64 = redis::cmd("EXISTS").arg(cc_key("u")).query(&mut f.redis()).unwrap();
    assert_eq!(exists, 0);
    assert_eq!(f.upstream.max_open("u"), 5, "most streams of u open at once at the upstream");
    let gate_taken = f.stat("slots_taken") - admitted;
    assert!(gate_taken <= 3, "{gate_taken}");
    assert_eq!(f.stat("slots_refused"), refusals);
    for zero in ["slots_taken_locally", "slots_expired", "slot_store_errors"] {
        assert_eq!(f.stat(zero), 0, "{zero}");
    }
}

#[test]
fn streams_admitted_while_the_store_was_down_still_count_when_it_comes_back() {
    // Fail open, one proxy: its local share is the whole limit of 2.
    let rule = r#"{"name":"cc","match":{"path_prefix":"/cc"},"key":["header:x-user"],"failure_mode":"open",
        "limits":[{"algorithm":"concurrency","limit":2,"max_hold":"6s"}]}"#;
    let mut f = Proxies::start(1, 2, rule);
    f.redis.process.stop();
    let local: Vec<OpenStream> = (0..2).map(|_| f.open(0, "u", &[]).stream()).collect();
    assert_eq!(f.stat("slots_taken_locally"), 2);
    assert_eq!(f.open(0, "u", &[]).answer().status, 429, "the local share is full");
    f.redis.restart(&[]);
    // Until the store decides again (a stream of another client taken there).
    let deadline = Instant::now() + SOON;
    while f.stat("slots_taken") == 0 {
        assert!(Instant::now() < deadline, "the store never decided again");
        if let Opened::Streaming(s) = f.open(0, "probe", &[]) {
            // The upstream counts a stream once its head is out.
            assert!(f.upstream.wait_open("probe", 1, SOON));
            assert!(f.upstream.complete(&s.tag));
            s.read_rest();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // The two streams the store cannot see still hold the client's limit.
    for _ in 0..2 {
        assert_refused(&f.open(0, "u", &[]).answer());
    }
    // A renewal moves them into the store (every 2 s).
    f.wait("the local streams moved into the store", || f.live("u").0 == 2);
    assert_refused(&f.open(0, "u", &[]).answer());
    assert_eq!(f.upstream.max_open("u"), 2, "never more than 2 streams of u at once");
    // They end: released from the store, and the client streams again.
    assert!(f.upstream.wait_open("u", 2, SOON));
    for s in local {
        assert!(f.upstream.complete(&s.tag));
        s.read_rest();
    }
    f.wait("both released", || f.zcard("u") == 0);
    let (again, _) = f.admitted_again("u");
    assert!(f.upstream.complete(&again.tag));
    again.read_rest();
}

#[test]
fn the_slots_of_a_killed_proxy_expire_within_max_hold_and_the_survivors_keep_theirs() {
    const MAX_HOLD_MS: u64 = 3_000;
    let f = Proxies::start(3, 1, &cc_rule(5, "3s"));
    // A slot expires max_hold after it was taken or last renewed: never
    // before max_hold from here, on Redis's clock.
    let opened = redis_now_ms(&mut f.redis());
    let doomed: Vec<OpenStream> = (0..3).map(|_| f.open(0, "u", &[]).stream()).collect();
    let survivors_opened = redis_now_ms(&mut f.redis());
    let mut survivors: Vec<OpenStream> = (0..2).map(|_| f.open(1, "u", &[]).stream()).collect();
    f.assert_held("u", 5);
    f.envoys[0].process.signal("KILL");
    let killed = Instant::now();
    // Nobody released the dead proxy's slots: they still count.
    assert_refused(&f.open(2, "u", &[]).answer());
    let now = redis_now_ms(&mut f.redis());
    for (member, expiry) in f.slots("u") {
        assert!(expiry <= now + MAX_HOLD_MS, "slot {member} expires at {expiry}, past now {now} + max_hold");
    }
    assert!(f.upstream.wait_open("u", 2, SOON), "the dead proxy's upstream streams ended");
    drop(doomed);
    // They expire on Redis's clock within max_hold (+ a loaded machine's slack).
    let bound = Duration::from_millis(MAX_HOLD_MS) + Duration::from_secs(3);
    loop {
        let (live, now) = f.live("u");
        if live == 2 {
            assert!(now >= opened + MAX_HOLD_MS, "freed at {now}, before max_hold from {opened}");
            break;
        }
        // The three expire a few ms apart, each on its own expiry.
        assert!((2..=5).contains(&live), "{live} slots live");
        assert!(killed.elapsed() < bound, "the dead proxy's slots still live {:?} after the kill", killed.elapsed());
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("the dead proxy's slots expired {:?} after the kill", killed.elapsed());
    // Their places are taken through the survivors, not one more.
    for i in 0..3 {
        survivors.push(f.open(1 + i % 2, "u", &[]).stream());
    }
    assert_refused(&f.open(2, "u", &[]).answer());
    assert_refused(&f.open(1, "u", &[]).answer());
    // The two first survivors' streams outlive their first max_hold:
    // renewed, still held.
    f.wait("max_hold since the survivors opened", || f.live("u").1 > survivors_opened + MAX_HOLD_MS);
    assert_eq!(f.live("u").0, 5);
    assert_eq!(f.upstream.open("u"), 5);
    assert_eq!(f.upstream.max_open("u"), 5);
    for zero in ["slots_expired", "slot_store_errors", "slots_taken_locally"] {
        assert_eq!(f.stat(zero), 0, "{zero} of the survivors");
    }
    for s in survivors {
        assert!(f.upstream.complete(&s.tag));
        s.read_rest();
    }
    f.wait("the survivors' slots released", || f.zcard("u") == 0);
}

#[test]
fn a_stream_longer_than_three_max_holds_keeps_its_one_slot() {
    let f = Proxies::start(1, 2, &cc_rule(1, "2s"));
    let s = f.open(0, "u", &[]).stream();
    let first = f.slots("u");
    assert_eq!(first.len(), 1);
    let start = Instant::now();
    let mut refused = 0;
    // 7 s: more than three times max_hold; refused all along.
    while start.elapsed() < Duration::from_secs(7) {
        assert_refused(&f.open(0, "u", &[]).answer());
        refused += 1;
        assert_eq!(f.zcard("u"), 1);
        std::thread::sleep(Duration::from_millis(250));
    }
    let last = f.slots("u");
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].0, first[0].0, "the same slot all along");
    assert!(last[0].1 >= first[0].1 + 3_000, "renewed: expiry {} then {}", first[0].1, last[0].1);
    assert_eq!(f.stat("slots_refused"), refused);
    assert_eq!((f.stat("slots_expired"), f.stat("slot_store_errors")), (0, 0));
    assert!(f.upstream.complete(&s.tag));
    assert!(s.read_rest().contains("[DONE]"));
    let (again, _) = f.admitted_again("u");
    f.assert_held("u", 1);
    assert!(f.upstream.complete(&again.tag));
    again.read_rest();
    f.wait("every slot released", || f.stat("slots_released") == 2);
    assert_eq!(f.stat("slots_taken"), 2);
}

/// One short stream for each client of `clients`, on `THREADS` threads.
fn one_stream_each(f: &Arc<Proxies>, clients: std::ops::Range<usize>) {
    const THREADS: usize = 8;
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (f, clients) = (f.clone(), clients.clone());
            std::thread::spawn(move || {
                let agent = agent(Duration::from_secs(20));
                let url = format!("http://127.0.0.1:{}/cc/short", f.envoys[0].port);
                for c in clients.skip(t).step_by(THREADS) {
                    let a = send(&agent, "GET", &url, &[("x-user", &format!("c{c}"))]);
                    assert!(a.status == 200 && a.body.contains("[DONE]"), "client c{c}: {a:?}");
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
}

#[test]
fn ten_thousand_clients_of_one_stream_each_leave_no_slot_and_bounded_memory() {
    const WARM: usize = 500;
    const CLIENTS: usize = 10_000;
    let f = Arc::new(Proxies::start(1, 2, &cc_rule(5, "60s")));
    let pid = f.envoys[0].process.pid();
    let start = Instant::now();
    one_stream_each(&f, 0..WARM);
    let before = rss_kib(pid);
    one_stream_each(&f, WARM..WARM + CLIENTS);
    let after = rss_kib(pid);
    eprintln!("{} streams in {:?}; Envoy's RSS {before} KiB, then {after} KiB", WARM + CLIENTS, start.elapsed());
    let all = (WARM + CLIENTS) as u64;
    f.wait("every slot released", || f.stat("slots_released") == all);
    assert_eq!(f.stat("slots_taken"), all);
    for zero in ["slots_refused", "slots_expired", "slot_store_errors", "slots_taken_locally"] {
        assert_eq!(f.stat(zero), 0, "{zero}");
    }
    let mut c = f.redis();
    let keys = scan_keys(&mut c);
    let slot_sets = keys.iter().filter(|k| k.ends_with(":cc:cc")).count();
    assert_eq!(slot_sets, 0, "slot sets left: {slot_sets} of {} keys", keys.len());
    for k in &keys {
        let ttl: i64 = redis::cmd("PTTL").arg(k).query(&mut c).unwrap();
        assert!(ttl > 0, "{k} has no expiry ({ttl})");
    }
    assert!(after <= before + 32 * 1024, "Envoy's RSS grew from {before} to {after} KiB over {CLIENTS} clients");
}
