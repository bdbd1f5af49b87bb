//! A Redis Cluster (3 masters, 3 replicas) behind Envoy's redis_proxy from
//! envoy-config/redis-cluster-proxy.yaml, webdis pointed at it, the filter
//! calling webdis: exact limits on every shard, a master killed with traffic
//! running (its shard follows the failure policy, the others do not notice),
//! exact limits after the failover, and a TTL on every key of every node;
//! with `store.redis_cluster` left false, a call of several hash slots met
//! by CROSSSLOT and resent one slot per call, every decision the store's;
//! the index of overrides polled on its own shard.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use host_tests::fleet::Fleet;
use host_tests::http::Answer;
use host_tests::redis_cluster::RedisCluster;
use host_tests::redis_proxy::RedisProxy;
use host_tests::windows::{start_clear_of_boundary, DAY};

use crate::{now_ms, plugin_config, scan_keys};
use ratelimit::identity::digest;

const DAY_MS: u64 = 86_400_000;

// "closed" takes two limits (three keys on one slot: one EVALSHA through the
// proxy, never CROSSSLOT); "open" has fleet_size 2, so its fallback share is
// 3; "steady" is the long-lived budget of the clients on the healthy shards.
const RULES: &str = r#"
  {"name":"closed","match":{"path_prefix":"/closed"},"key":["header:x-user"],"failure_mode":"closed",
   "limits":[{"algorithm":"sliding_window","limit":5,"window":"1d"},{"algorithm":"token_bucket","limit":50,"window":"1d"}]},
  {"name":"open","match":{"path_prefix":"/open"},"key":["header:x-user"],"failure_mode":"open","fleet_size":2,
   "limits":[{"algorithm":"fixed_window","limit":6,"window":"1d"}]},
  {"name":"steady","match":{"path_prefix":"/steady"},"key":["header:x-user"],"failure_mode":"closed",
   "limits":[{"algorithm":"sliding_log","limit":10000,"window":"1d"}]}"#;

/// The deny cache is off so that every verdict after the failover is the
/// store's own. The breaker keeps its default threshold; a short open
/// period lets the dead shard's slots probe soon after the failover.
fn config() -> String {
    plugin_config(
        r#","timeout_ms":500,"stats_interval":"200ms","circuit_breaker":{"open":"1s"}"#,
        r#""deny_cache":{"enabled":false},"#,
        RULES,
    )
}

/// Ports of the nodes that are masters now.
fn masters(cluster: &RedisCluster) -> BTreeSet<u16> {
    cluster
        .nodes
        .iter()
        .filter(|n| {
            let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut n.connect()).unwrap();
            matches!(role.first(), Some(redis::Value::BulkString(b)) if b == b"master")
        })
        .map(|n| n.port)
        .collect()
}

/// `per_master` fresh identities `<prefix><n>` on every master, by the slot
/// of their hash tag: identity → owner port.
fn spread(cluster: &RedisCluster, prefix: &str, per_master: usize) -> BTreeMap<String, u16> {
    let masters = masters(cluster);
    let mut chosen = BTreeMap::new();
    for n in 0.. {
        let user = format!("{prefix}{n}");
        let owner = cluster.owner_of(&format!("{{{}}}", digest(&user))).port;
        if chosen.values().filter(|p| **p == owner).count() < per_master {
            chosen.insert(user, owner);
        }
        if chosen.len() == per_master * masters.len() {
            return chosen;
        }
        assert!(n < 10_000);
    }
    unreachable!()
}

fn remaining(a: &Answer) -> Option<u64> {
    a.header("x-ratelimit-remaining").and_then(|v| v.parse().ok())
}

/// Exactly `limit` admitted with remaining limit-1 .. 0, then a 429 of `rule`.
fn exact(fleet: &Fleet, path: &str, rule: &str, user: &str, limit: u64) {
    for expect in (0..limit).rev() {
        let a = fleet.get_as(0, path, user);
        assert_eq!((a.status, remaining(&a)), (200, Some(expect)), "{user} on {path}: {a:?}");
    }
    let a = fleet.get_as(0, path, user);
    assert_eq!(a.status, 429, "{user} on {path}: {a:?}");
    assert!(a.body.contains(&format!(r#""rule":"{rule}""#)), "{a:?}");
}

/// The keys the filter writes for `user` after /closed and /open.
fn expected_keys(user: &str, day: u64) -> [String; 3] {
    [
        format!("t:{{{}}}:closed:sw:{DAY_MS}:{day}", digest(user)),
        format!("t:{{{}}}:closed:tb:{DAY_MS}", digest(user)),
        format!("t:{{{}}}:open:fw:{DAY_MS}:{day}", digest(user)),
    ]
}

#[test]
fn limits_are_exact_on_every_shard_and_follow_the_failure_policy_through_a_master_failover() {
    // The limits count per day (the keys carry the day's index): all of the
    // test in one day, failover included.
    start_clear_of_boundary(DAY, Duration::from_secs(300));
    // Without this (Redis's default is yes), every node refuses every command
    // (CLUSTERDOWN) from the moment the dead master is marked failed until its
    // replica is promoted: about half a second in which the healthy shards
    // fail too.
    let mut cluster = RedisCluster::start_with(3, 1, &["--cluster-require-full-coverage", "no"]);
    let seeds: Vec<u16> = cluster.nodes.iter().map(|n| n.port).collect();
    let proxy = RedisProxy::start(&seeds);
    let fleet = Fleet::start(proxy.port, 1, 2, &config());
    let day = now_ms() / DAY_MS;

    // 1. Two identities on each master: exact limits, keys exactly where the
    // slot says, on no other node.
    let first = spread(&cluster, "a", 2);
    for user in first.keys() {
        exact(&fleet, "/closed", "closed", user, 5);
        exact(&fleet, "/open", "open", user, 6);
    }
    let masters_before = masters(&cluster);
    assert_eq!(first.values().collect::<BTreeSet<_>>().len(), 3, "identities on all three masters: {first:?}");
    for port in &masters_before {
        let node = cluster.nodes.iter().find(|n| n.port == *port).unwrap();
        let keys: BTreeSet<String> = scan_keys(&mut node.connect()).into_iter().collect();
        let want: BTreeSet<String> =
            first.iter().filter(|(_, p)| *p == port).flat_map(|(u, _)| expected_keys(u, day)).collect();
        assert_eq!(keys, want, "keys on master {port}");
    }

    // INFO passes through the redis_proxy, aggregated over the masters: the
    // filter's eviction guard sees the sum of their maxmemory.
    for node in &cluster.nodes {
        let mut c = node.connect();
        let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("64mb").query(&mut c).unwrap();
        let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("volatile-ttl").query(&mut c).unwrap();
    }
    let info: String = redis::cmd("INFO").query(&mut proxy.connect()).unwrap();
    assert!(info.contains("redis_mode:cluster") && info.contains("maxmemory:201326592"), "INFO through the proxy");
    let envoy = &fleet.envoys[0];
    let deadline = Instant::now() + Duration::from_secs(30);
    while envoy.stat("wasmcustom.ratelimit.store.maxmemory_bytes") != 3 * 64 * 1024 * 1024 {
        assert!(Instant::now() < deadline, "the store's INFO never reached the filter through the proxy");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(envoy.stat("wasmcustom.ratelimit.store.evicting_policy"), 0);

    // 2. Kill the master of the first identity (after its replica has every
    // write), with traffic running on all shards.
    let (exhausted, victim_port) = first.iter().next().map(|(u, p)| (u.clone(), *p)).unwrap();
    cluster.wait_replicated(cluster.owner_of(&format!("{{{}}}", digest(&exhausted))), Duration::from_secs(60));
    let fresh = spread(&cluster, "b", 1);
    let victim = fresh.iter().find(|(_, p)| **p == victim_port).map(|(u, _)| u.clone()).unwrap();
    let healthy: Vec<String> = fresh.iter().filter(|(_, p)| **p != victim_port).map(|(u, _)| u.clone()).collect();
    let mut steady_sent = 0u64;
    let script_loads = proxy.envoy.stat("redis.ratelimit_store.command.script.success");
    let at = cluster.nodes.iter().position(|n| n.port == victim_port).unwrap();
    let dead = cluster.nodes.remove(at);
    dead.process.signal("KILL");
    let killed = Instant::now();

    let mut closed_failures = 0;
    let mut open_answers = Vec::new();
    let deadline = killed + Duration::from_secs(60);
    let recovered = loop {
        // The failing shard: closed → 503, never 429.
        let c = fleet.get_as(0, "/closed", &victim);
        if c.status == 200 {
            assert_eq!((c.header("x-ratelimit-limit"), remaining(&c)), (Some("5"), Some(4)), "{c:?}");
            break killed.elapsed();
        }
        assert_eq!(c.status, 503, "{c:?}");
        assert_eq!(c.body, r#"{"error":"rate_limiter_unavailable"}"#);
        closed_failures += 1;
        // ...open → this proxy's share (6 / 2 = 3), then 429, never 503.
        open_answers.push(fleet.get_as(0, "/open", &victim));
        // The healthy shards: every request decided by the store, exactly.
        steady_sent += 1;
        for user in &healthy {
            let s = fleet.get_as(0, "/steady", user);
            assert_eq!(
                (s.status, remaining(&s)),
                (200, Some(10_000 - steady_sent)),
                "{user} during the failover: {s:?}"
            );
        }
        assert!(Instant::now() < deadline, "the shard of {victim_port} did not come back in 60 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!(
        "failover: {recovered:?} from SIGKILL to the first store decision on that shard; \
         {closed_failures} fail-closed answers; {steady_sent} exact decisions on each healthy shard meanwhile"
    );
    assert!(closed_failures >= 1, "the failover was not seen at all");
    // The promoted replica had no script (Redis does not replicate SCRIPT
    // LOAD): the filter's NOSCRIPT recovery loaded it through the proxy,
    // unseen by the client.
    assert!(proxy.envoy.stat("redis.ratelimit_store.command.script.success") > script_loads, "no SCRIPT LOAD");
    let (fallback, store): (Vec<&Answer>, Vec<&Answer>) =
        open_answers.iter().partition(|a| a.header("x-ratelimit-limit") == Some("3"));
    for (i, a) in fallback.iter().enumerate() {
        assert_eq!(a.status, if i < 3 { 200 } else { 429 }, "fallback answer {i}: {a:?}");
    }
    // A store decision may slip in just before the closed rule's own first success.
    assert!(store.len() <= 1 && store.iter().all(|a| a.status == 200 && a.header("x-ratelimit-limit") == Some("6")));
    assert_eq!(fleet.stat_sum("wasmcustom.ratelimit.open.fallback_allowed"), fallback.len().min(3) as u64);

    // 3. After the failover: the promoted replica serves the shard with the
    // counters it replicated, and limits are exact on every shard again.
    cluster.wait_ok(Duration::from_secs(20));
    let masters_after = masters(&cluster);
    assert_eq!(masters_after.len(), 3);
    assert!(!masters_after.contains(&victim_port));
    let a = fleet.get_as(0, "/closed", &exhausted);
    assert_eq!(a.status, 429, "{exhausted} spent its 5 before the failover: {a:?}");
    let open_left = 6 - store.len() as u64;
    exact(&fleet, "/open", "open", &victim, open_left);
    let after = spread(&cluster, "c", 1);
    assert_eq!(after.values().copied().collect::<BTreeSet<_>>(), masters_after);
    for user in after.keys() {
        exact(&fleet, "/closed", "closed", user, 5);
    }

    // 4. Every key on every live node (masters and replicas) has a TTL, and
    // every key is one of the filter's.
    let mut total = 0;
    for node in &cluster.nodes {
        let mut c = node.connect();
        let _: () = redis::cmd("READONLY").query(&mut c).unwrap();
        let keys = scan_keys(&mut c);
        for key in &keys {
            let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut c).unwrap();
            assert!(pttl > 0, "{key} on {} has PTTL {pttl}", node.port);
            let known = [":closed:sw:", ":closed:tb:", ":open:fw:", ":steady:sl:"].iter().any(|p| key.contains(p));
            assert!(key.starts_with("t:{") && known, "{key}");
        }
        total += keys.len();
    }
    assert!(total > 0);
    drop(dead);
}

/// With the breaker a user gets by default (3 failures, open 30 s), one dead
/// shard opens only its own slots' breakers: clients of the other shards
/// are still decided by the store.
#[test]
fn one_dead_shard_leaves_the_other_shards_decided_by_the_store_with_the_default_breaker() {
    start_clear_of_boundary(DAY, Duration::from_secs(120));
    let mut cluster = RedisCluster::start_with(3, 0, &["--cluster-require-full-coverage", "no"]);
    let proxy = RedisProxy::start(&cluster.nodes.iter().map(|n| n.port).collect::<Vec<_>>());
    let config = plugin_config(r#","timeout_ms":500"#, r#""deny_cache":{"enabled":false},"#, RULES);
    let fleet = Fleet::start(proxy.port, 1, 1, &config);
    let users = spread(&cluster, "d", 1);
    for user in users.keys() {
        assert_eq!(fleet.get_as(0, "/steady", user).status, 200);
    }
    let (victim, victim_port) = users.iter().next().map(|(u, p)| (u.clone(), *p)).unwrap();
    let at = cluster.nodes.iter().position(|n| n.port == victim_port).unwrap();
    let dead = cluster.nodes.remove(at);
    dead.process.signal("KILL");
    // Three clients of the dead shard in a row: each fails closed.
    for _ in 0..3 {
        assert_eq!(fleet.get_as(0, "/closed", &victim).status, 503);
    }
    // A client of a healthy shard: its shard answers, so the store should decide.
    for user in users.keys().filter(|u| **u != victim) {
        let a = fleet.get_as(0, "/steady", user);
        assert_eq!(
            (a.status, a.header("x-ratelimit-remaining")),
            (200, Some("9998")),
            "{user}'s shard is up, yet: {a:?} (store calls: {})",
            fleet.envoys[0].stat("wasmcustom.ratelimit.store_calls")
        );
    }
    drop(dead);
}

/// How many CROSSSLOT errors the cluster's nodes answered (INFO errorstats).
fn crossslot_errors(cluster: &RedisCluster) -> u64 {
    let count = |node: &host_tests::redis_server::RedisServer| -> u64 {
        let info: String = redis::cmd("INFO").arg("errorstats").query(&mut node.connect()).unwrap();
        info.lines().find_map(|l| l.strip_prefix("errorstat_CROSSSLOT:count=")).map_or(0, |n| n.trim().parse().unwrap())
    };
    cluster.nodes.iter().map(count).sum()
}

/// "user" and "org" on /both, keyed by two headers: one request is two
/// identities, so two decisions in one call; "burst" is one identity.
const TWO_IDENTITIES: &str = r#"
  {"name":"user","match":{"path_prefix":"/both"},"key":["header:x-user"],"failure_mode":"closed",
   "limits":[{"algorithm":"fixed_window","limit":3,"window":"1d"}]},
  {"name":"org","match":{"path_prefix":"/both"},"key":["header:x-org"],"failure_mode":"closed",
   "limits":[{"algorithm":"fixed_window","limit":4,"window":"1d"}]},
  {"name":"burst","match":{"path_prefix":"/burst"},"key":["header:x-user"],"failure_mode":"closed",
   "limits":[{"algorithm":"sliding_window","limit":20,"window":"1d"}]}"#;

/// `store.redis_cluster` left false in front of a cluster: the first call
/// holding two hash slots meets CROSSSLOT, its decisions are resent one
/// slot per call, the worker says once to set the flag, and from then on
/// every decision is the store's, exactly, on every master.
#[test]
fn without_the_flag_crossslot_resends_by_slot_and_every_decision_is_the_stores() {
    start_clear_of_boundary(DAY, Duration::from_secs(180));
    let cluster = RedisCluster::start_with(3, 0, &["--cluster-require-full-coverage", "no"]);
    let proxy = RedisProxy::start(&cluster.nodes.iter().map(|n| n.port).collect::<Vec<_>>());
    let config = plugin_config(
        r#","timeout_ms":1000,"batch":{"max_in_flight":1}"#,
        r#""deny_cache":{"enabled":false},"#,
        TWO_IDENTITIES,
    );
    assert!(!config.contains("redis_cluster"), "the flag is left to its default");
    let fleet = Fleet::start(proxy.port, 1, 1, &config);
    let envoy = &fleet.envoys[0];
    let day = now_ms() / DAY_MS;
    let ports: Vec<u16> = masters(&cluster).into_iter().collect();
    let on = |chosen: &BTreeMap<String, u16>, port: u16| chosen.iter().find(|(_, p)| **p == port).unwrap().0.clone();
    let (users, orgs) = (spread(&cluster, "u", 1), spread(&cluster, "o", 1));
    let store_errors =
        || ["user", "org", "burst"].map(|r| envoy.stat(&format!("wasmcustom.ratelimit.{r}.store_errors")));

    // 1. Each user with an org of the next master: one request, two slots.
    for i in 0..3 {
        let (user, org) = (on(&users, ports[i]), on(&orgs, ports[(i + 1) % 3]));
        for n in 1..=3 {
            let a = fleet.send(0, "GET", "/both", &[("x-user", &user), ("x-org", &org)]);
            assert_eq!(a.status, 200, "{user} and {org}, request {n}: {a:?}");
        }
        let a = fleet.send(0, "GET", "/both", &[("x-user", &user), ("x-org", &org)]);
        assert_eq!(a.status, 429, "{a:?}");
        assert!(a.body.contains(r#""rule":"user""#), "{a:?}");
        // The counts, where the slots say: the user's 3, the org's 4 (the
        // fourth request was its own decision, and it allowed).
        for (key, port, count) in [
            (format!("t:{{{}}}:user:fw:{DAY_MS}:{day}", digest(&user)), ports[i], "3"),
            (format!("t:{{{}}}:org:fw:{DAY_MS}:{day}", digest(&org)), ports[(i + 1) % 3], "4"),
        ] {
            let node = cluster.nodes.iter().find(|n| n.port == port).unwrap();
            let (value, ttl): (Option<String>, i64) =
                redis::pipe().cmd("GET").arg(&key).cmd("PTTL").arg(&key).query(&mut node.connect()).unwrap();
            assert_eq!(value.as_deref(), Some(count), "{key} on {port}");
            assert!(ttl > 0, "{key}: PTTL {ttl}");
        }
    }
    assert_eq!(store_errors(), [0, 0, 0]);
    let said: Vec<String> =
        envoy.log().lines().filter(|l| l.contains("store.redis_cluster")).map(String::from).collect();
    assert_eq!(said.len(), 1, "one line, one worker: {said:?}");
    assert!(said[0].contains("ratelimit: the store is a Redis Cluster (CROSSSLOT)"), "{said:?}");
    assert_eq!(crossslot_errors(&cluster), 1, "the first call alone met CROSSSLOT");

    // 2. A burst of many clients of every master at once: calls of one slot
    // each, every decision the store's, exactly 20 admitted per client.
    let clients = spread(&cluster, "b", 4);
    let (calls, decisions) =
        (envoy.stat("wasmcustom.ratelimit.store_calls"), envoy.stat("wasmcustom.ratelimit.store_decisions"));
    let admitted: BTreeMap<String, usize> = std::thread::scope(|s| {
        let running: Vec<_> = clients
            .keys()
            .map(|user| {
                let fleet = &fleet;
                s.spawn(move || {
                    let statuses: Vec<u16> = (0..25).map(|_| fleet.get_as(0, "/burst", user).status).collect();
                    assert!(statuses.iter().all(|s| *s == 200 || *s == 429), "{user}: {statuses:?}");
                    (user, statuses.iter().filter(|s| **s == 200).count())
                })
            })
            .collect();
        let mut admitted = BTreeMap::new();
        for t in running {
            let (user, n) = t.join().unwrap();
            admitted.insert(user.clone(), n);
        }
        admitted
    });
    assert!(admitted.values().all(|n| *n == 20), "25 requests each, 20 admitted: {admitted:?}");
    assert_eq!(store_errors(), [0, 0, 0]);
    assert_eq!(crossslot_errors(&cluster), 1, "no CROSSSLOT again");
    let (calls, decisions) = (
        envoy.stat("wasmcustom.ratelimit.store_calls") - calls,
        envoy.stat("wasmcustom.ratelimit.store_decisions") - decisions,
    );
    eprintln!(
        "burst of {} requests from {} clients, one hash slot per call: {decisions} decisions in {calls} calls ({:.2} per call)",
        clients.len() * 25,
        clients.len(),
        decisions as f64 / calls as f64
    );
    assert_eq!(envoy.log().lines().filter(|l| l.contains("store.redis_cluster")).count(), 1);
}

/// The index of overrides on a Redis Cluster: one key in its own slot,
/// polled through redis_proxy by a call of its own; an override on another
/// master, not named, is not read (once the index answered), then named,
/// read.
#[test]
fn the_index_of_overrides_is_polled_on_its_own_shard_and_an_override_on_another_applies_once_named() {
    let cluster = RedisCluster::start_with(3, 0, &["--cluster-require-full-coverage", "no"]);
    let proxy = RedisProxy::start(&cluster.nodes.iter().map(|n| n.port).collect::<Vec<_>>());
    let config = plugin_config(r#","redis_cluster":true"#, r#""overrides":{"within":"1s"},"#, RULES);
    let fleet = Fleet::start(proxy.port, 1, 1, &config);
    let index = cluster.owner_of("t:overrides").port;
    let user = spread(&cluster, "o", 1).into_iter().find(|(_, p)| *p != index).map(|(u, _)| u).unwrap();
    let key = ratelimit::keys::override_key("t", &digest(&user), "steady");
    let () = redis::cmd("SET")
        .arg(&key)
        .arg("block")
        .arg("PX")
        .arg(3_600_000)
        .query(&mut cluster.owner_of(&key).connect())
        .unwrap();
    // Requests of `user` until one answers `status`: each one's send time and status.
    let until = |status: u16| {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seen = Vec::new();
        loop {
            let at = Instant::now();
            let a = fleet.get_as(0, "/steady", &user);
            seen.push((at, a.status));
            if a.status == status {
                return seen;
            }
            assert!(Instant::now() < deadline, "no {status} after 20 s: {a:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    // Read while the index is unknown; once it answered, not named: admitted.
    until(200);
    let mut c = cluster.owner_of("t:overrides").connect();
    let () = redis::cmd("SADD").arg("t:overrides").arg(&key).query(&mut c).unwrap();
    let named = Instant::now();
    // Refused within the bound, twice within (1 s): no admission sent later.
    for (at, status) in until(403) {
        assert!(status != 200 || at < named + Duration::from_secs(2), "{status} {:?} after the SADD", at - named);
    }
    // Every call reached the store's shards: none CROSSSLOT.
    assert_eq!(crossslot_errors(&cluster), 0);
}
