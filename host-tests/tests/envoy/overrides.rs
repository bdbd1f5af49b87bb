//! Operators' overrides on real Envoy: one client's limit raised on three
//! proxies, a block, a reset, an expiry, each written in Redis as
//! docs/operations.md shows (the override and its index), and applied by
//! every proxy within twice `overrides.within` (1 s here, as shipped): a
//! poll of the index, then what a proxy trusts without the store. A client
//! the index does not name reads no override.

use std::time::{Duration, Instant};

use host_tests::access_log::wait_until;
use host_tests::fleet::Fleet;
use host_tests::http::Answer;
use host_tests::redis_server::RedisServer;
use host_tests::stack::Stack;
use ratelimit::identity::digest;
use ratelimit::keys::override_key;

use crate::plugin_config;

/// `overrides.within`: how long after an override is read by the store a
/// proxy's cached denials and leases may still decide without it; and how
/// long after an override expires every proxy stops applying it.
const WITHIN: Duration = Duration::from_secs(1);
/// How long after an override is written (and indexed) every proxy
/// applies it: the index polled within `WITHIN`, plus `WITHIN`.
const BOUND: Duration = Duration::from_secs(2);

/// Ten requests an hour per `x-user`, kept exactly (a sliding log: no
/// window ends during a test); overrides read with every decision.
fn config() -> String {
    let rules =
        r#"{"name":"api","key":["header:x-user"],"limits":[{"algorithm":"sliding_log","limit":10,"window":"1h"}]}"#;
    plugin_config(rules).replacen(r#""rules":"#, r#""overrides":{"within":"1s"},"rules":"#, 1)
}

/// What an operator types: `SET <key> <text> PX <ms>` for `user`'s rule
/// `api` (a header key: its identity is the digest of its value), then
/// `SADD t:overrides <key>`; when it was done.
fn set_override(redis: &RedisServer, user: &str, text: &str, px: u64) -> Instant {
    let key = set_unindexed(redis, user, text, px);
    let () = redis::cmd("SADD").arg("t:overrides").arg(&key).query(&mut redis.connect()).unwrap();
    Instant::now()
}

/// The `SET` alone: an override the index does not name; its key.
fn set_unindexed(redis: &RedisServer, user: &str, text: &str, px: u64) -> String {
    let key = override_key("t", &digest(user), "api");
    let () = redis::cmd("SET").arg(&key).arg(text).arg("PX").arg(px).query(&mut redis.connect()).unwrap();
    key
}

/// Requests of `user`, each sent through `send` (given its index) and
/// timed, until `done` says so or 20 s pass: (when sent, the answer).
fn poll(send: impl FnMut(usize) -> Answer, done: impl FnMut(&[(Instant, Answer)]) -> bool) -> Vec<(Instant, Answer)> {
    poll_every(Duration::from_millis(20), send, done)
}

/// `poll`, `gap` between requests: a client with room left that must not
/// use it all before a change applies.
fn poll_every(
    gap: Duration,
    mut send: impl FnMut(usize) -> Answer,
    mut done: impl FnMut(&[(Instant, Answer)]) -> bool,
) -> Vec<(Instant, Answer)> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen: Vec<(Instant, Answer)> = Vec::new();
    while !done(&seen) {
        let last: Vec<u16> = seen.iter().rev().take(10).map(|(_, a)| a.status).collect();
        assert!(Instant::now() < deadline, "not done after 20 s, {} requests; the newest: {last:?}", seen.len());
        let at = Instant::now();
        let a = send(seen.len());
        seen.push((at, a));
        std::thread::sleep(gap);
    }
    seen
}

/// Every answer of `status` in `seen` was sent before `bound`: a request
/// sent later was decided under the change.
fn only_before(seen: &[(Instant, Answer)], status: u16, bound: Instant) {
    for (at, a) in seen {
        if a.status == status {
            assert!(*at < bound, "{status} {:?} after the bound: {a:?}", at.duration_since(bound));
        }
    }
}

#[test]
fn a_raised_limit_lets_that_client_only_through_twenty_on_three_proxies_and_a_block_refuses_within_the_bound() {
    let redis = RedisServer::start();
    let fleet = Fleet::start(redis.port, 3, 2, &config());
    // alice and bob at their 10, and refused by every proxy (which caches it).
    for user in ["alice", "bob"] {
        let statuses: Vec<u16> = (0..10).map(|i| fleet.get_as(i % 3, "/api", user).status).collect();
        assert_eq!(statuses, [200; 10], "{user}");
        for proxy in 0..3 {
            assert_eq!(fleet.get_as(proxy, "/api", user).status, 429, "{user} via {proxy}");
        }
    }
    // The operator raises alice's limit to 20 for an hour.
    let set_at = set_override(&redis, "alice", "sl:3600000=20", 3_600_000);
    // Round robin until every proxy has admitted her once: a cached denial
    // may answer until the bound, never after it.
    let admitted = std::cell::Cell::new([false; 3]);
    let seen = poll(
        |i| {
            let a = fleet.get_as(i % 3, "/api", "alice");
            let mut by = admitted.get();
            by[i % 3] |= a.status == 200;
            admitted.set(by);
            a
        },
        |_| admitted.get() == [true; 3],
    );
    only_before(&seen, 429, set_at + BOUND);
    // Then round robin until she is refused again: 10 more in all.
    let first = seen.iter().filter(|(_, a)| a.status == 200).count();
    let rest = poll(|i| fleet.get_as(i % 3, "/api", "alice"), |s| s.last().is_some_and(|(_, a)| a.status == 429));
    let more = first + rest.iter().filter(|(_, a)| a.status == 200).count();
    assert_eq!(more, 10, "alice: exactly 20 in all");
    let shown = seen.iter().find(|(_, a)| a.status == 200).map(|(_, a)| a.header("x-ratelimit-limit"));
    assert_eq!(shown, Some(Some("20")), "her limit as decided");
    // bob is still at his 10 everywhere.
    for proxy in 0..3 {
        assert_eq!(fleet.get_as(proxy, "/api", "bob").status, 429, "bob via {proxy}");
    }
    // A block refuses carol on every proxy within the bound, as 403; dave
    // goes on.
    let set_at = set_override(&redis, "carol", "block", 3_600_000);
    for proxy in 0..3 {
        let seen = poll(|_| fleet.get_as(proxy, "/api", "carol"), |s| s.last().is_some_and(|(_, a)| a.status == 403));
        only_before(&seen, 200, set_at + BOUND);
        let a = &seen[seen.len() - 1].1;
        assert_eq!(a.body.as_str(), r#"{"error":"blocked","rule":"api"}"#, "via {proxy}");
        assert_eq!(a.header("retry-after"), None);
        assert_eq!(fleet.get_as(proxy, "/api", "carol").status, 403, "via {proxy}");
        assert_eq!(fleet.get_as(proxy, "/api", "dave").status, 200);
    }
    // Proxy 0's access log: alice's admissions under the raised limit, carol's block.
    let lines = wait_until(&fleet.envoys[0], |l| l.status() == 403);
    let by_status = |status: u16, field: &str| -> Vec<Option<String>> {
        lines.iter().filter(|l| l.status() == status).map(|l| l.get(field)).collect()
    };
    assert!(by_status(200, "ratelimit_limit").contains(&Some("20/1h".into())), "{lines:?}");
    assert!(by_status(200, "ratelimit_override").contains(&Some("limit".into())), "{lines:?}");
    let blocked = lines.iter().find(|l| l.status() == 403).unwrap_or_else(|| panic!("no 403 logged: {lines:?}"));
    assert_eq!(blocked.get("ratelimit_override").as_deref(), Some("block"));
    assert_eq!(blocked.get("ratelimit_decided_by").as_deref(), Some("store"));
}

#[test]
fn a_reset_gives_a_fresh_window_and_an_expired_override_stops_applying() {
    let stack = Stack::start(&config());
    let use_up = |user: &str| {
        let statuses: Vec<u16> = (0..11).map(|_| stack.send("GET", "/api", &[("x-user", user)]).status).collect();
        assert_eq!(statuses, [&[200; 10][..], &[429]].concat(), "{user}");
    };
    let stack_ref = &stack;
    let as_user = |user: &'static str| move |_| stack_ref.send("GET", "/api", &[("x-user", user)]);
    // erin at her limit, reset: a fresh window of 10, once.
    use_up("erin");
    let set_at = set_override(&stack.redis, "erin", "reset", 60_000);
    let seen = poll(as_user("erin"), |s| s.last().is_some_and(|(_, a)| a.status == 200));
    only_before(&seen, 429, set_at + BOUND);
    let rest = poll(as_user("erin"), |s| s.last().is_some_and(|(_, a)| a.status == 429));
    assert_eq!(1 + rest.iter().filter(|(_, a)| a.status == 200).count(), 10, "a fresh window: 10");
    let key = override_key("t", &digest("erin"), "api");
    let left: Option<String> = redis::cmd("GET").arg(&key).query(&mut stack.redis.connect()).unwrap();
    assert_eq!(left, None, "applied once, the override is gone");
    // frank at his limit, raised to 20 for 3 s: admitted within the bound,
    // 12 in all; refused again once the override expired (12 > 10), within
    // the bound after its expiry.
    use_up("frank");
    let set_at = set_override(&stack.redis, "frank", "sl:3600000=20", 3_000);
    let seen = poll(as_user("frank"), |s| s.iter().filter(|(_, a)| a.status == 200).count() == 2);
    only_before(&seen, 429, set_at + BOUND);
    let after = poll(as_user("frank"), |s| {
        s.last().is_some_and(|(at, _)| *at > set_at + Duration::from_millis(3_000) + WITHIN)
    });
    only_before(&after, 200, set_at + Duration::from_millis(3_000) + WITHIN);
    // gina blocked for 3 s: 403 within the bound, admitted again within
    // `within` after it expired (still a member of the index: harmless).
    let set_at = set_override(&stack.redis, "gina", "block", 3_000);
    // Her 10 not all used before it applies: 8 requests in the bound at most.
    let seen = poll_every(BOUND / 7, as_user("gina"), |s| s.last().is_some_and(|(_, a)| a.status == 403));
    only_before(&seen, 200, set_at + BOUND);
    let seen = poll(as_user("gina"), |s| s.last().is_some_and(|(_, a)| a.status == 200));
    only_before(&seen, 403, set_at + Duration::from_millis(3_000) + WITHIN);
    assert!(seen.iter().all(|(_, a)| matches!(a.status, 200 | 403)), "blocked or admitted, never rate limited");
    // The access log names the reset where it was applied.
    wait_until(&stack.envoy, |l| l.get("ratelimit_override").as_deref() == Some("reset"));
}

#[test]
fn an_override_the_index_does_not_name_is_not_read_and_once_indexed_it_applies_within_the_bound() {
    // One worker (every request on the VM that polled), within 3 s: the
    // index is polled every 1.5 s and trusted for 3 s after each poll, so
    // a loaded machine's late poll does not make every decision read
    // (which this test would take for a read of mallory's override).
    let within = Duration::from_secs(3);
    let config = config().replacen(r#""within":"1s""#, r#""within":"3s""#, 1);
    let stack = Stack::try_start(&config, 1).unwrap_or_else(|e| panic!("envoy refused to start:\n{}", e.log));
    let stack_ref = &stack;
    let as_user = |user: &'static str| move |_| stack_ref.send("GET", "/api", &[("x-user", user)]);
    // mallory's block, not indexed: read while the index is unknown (the
    // proxy just started), then never: she is admitted, 3 s long.
    let key = set_unindexed(&stack.redis, "mallory", "block", 3_600_000);
    poll_every(Duration::from_millis(100), as_user("mallory"), |s| s.last().is_some_and(|(_, a)| a.status == 200));
    let statuses: Vec<u16> = (0..5)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(600));
            stack.send("GET", "/api", &[("x-user", "mallory")]).status
        })
        .collect();
    assert_eq!(statuses, [200; 5], "an override the index does not name");
    // Indexed: refused within the bound (rate limited first, maybe: she
    // has 4 left), then every time.
    let () = redis::cmd("SADD").arg("t:overrides").arg(&key).query(&mut stack.redis.connect()).unwrap();
    let set_at = Instant::now();
    let seen = poll(as_user("mallory"), |s| s.last().is_some_and(|(_, a)| a.status == 403));
    only_before(&seen, 200, set_at + 2 * within);
    assert_eq!(stack.send("GET", "/api", &[("x-user", "mallory")]).status, 403);
    // SREM: no longer read (the override still there): refused no more
    // for the block once the bound passed (rate limited or admitted).
    let () = redis::cmd("SREM").arg("t:overrides").arg(&key).query(&mut stack.redis.connect()).unwrap();
    let removed_at = Instant::now();
    let seen = poll(as_user("mallory"), |s| s.last().is_some_and(|(_, a)| a.status != 403));
    only_before(&seen, 403, removed_at + 2 * within);
}

#[test]
fn the_identity_the_docs_compute_is_the_one_the_filter_writes() {
    // The one line docs/operations.md gives, run as it is written (its
    // example values: an Authorization credential, then a model).
    let page = std::fs::read_to_string(host_tests::paths::root().join("docs/operations.md")).unwrap();
    let line = page.lines().find(|l| l.starts_with("python3 -c ")).expect("docs/operations.md shows the line");
    let out = std::process::Command::new("sh").arg("-c").arg(line).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let identity = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(identity.starts_with("~H") && identity.len() == 34, "{identity}");
    let rules = r#"{"name":"api","key":["header:authorization","query:model"],"limits":[{"limit":10,"window":"1m"}]}"#;
    let stack = Stack::start(&plugin_config(rules).replacen(r#""rules":"#, r#""overrides":{},"rules":"#, 1));
    let ask = || stack.send("GET", "/api?model=gpt-4o", &[("authorization", "Bearer sk-live-abc123")]);
    assert_eq!(ask().status, 200);
    let mut c = stack.redis.connect();
    let keys: Vec<String> = redis::cmd("KEYS").arg("t:*").query(&mut c).unwrap();
    assert!(!keys.is_empty() && keys.iter().all(|k| k.starts_with(&format!("t:{{{identity}}}:api:"))), "{keys:?}");
    // And an override written under it (and indexed) applies to that client.
    let key = override_key("t", &identity, "api");
    let () = redis::cmd("SET").arg(&key).arg("block").arg("PX").arg(60_000).query(&mut c).unwrap();
    let () = redis::cmd("SADD").arg("t:overrides").arg(&key).query(&mut c).unwrap();
    poll(|_| ask(), |s| s.last().is_some_and(|(_, a)| a.status == 403));
}
