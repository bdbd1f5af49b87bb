//! NGINX without `proxy_wasm_request_headers_in_access on;`: ngx_wasm_module
//! then runs the module's request-headers callback in the rewrite phase,
//! where it does not hold a paused request. The second request of a
//! keep-alive connection (after one that went upstream) goes to the
//! upstream before its decision: its store call then outlived it and
//! crashed the worker process (after ngx_wasm_module's warning
//! `"ResponseHeaders" returned "PAUSE"`), or its decision ran the content
//! handler a second time. The module refuses at the first such request
//! (docs/nginx.md): one line naming the directive, then 503 for every
//! request on every worker process, until a reload with the directive.

use std::collections::BTreeSet;
use std::io::{BufReader, Write};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use host_tests::backend::read_request_target;
use host_tests::http::agent;
use host_tests::nginx::NginxStack;
use host_tests::test_server::TestServer;
use host_tests::windows::{start_clear_of_boundary, HOUR};

const ON: &str = "proxy_wasm_request_headers_in_access on;";
const OFF: &str = "proxy_wasm_request_headers_in_access off;";
/// The module's one line.
const REFUSED: &str = "ratelimit: refused: NGINX let a request through before its decision: add \"proxy_wasm_request_headers_in_access on;\" next to proxy_wasm; every request gets 503 until NGINX reloads";
/// ngx_wasm_module's warning before the crash it reported.
const UNHELD: &str = "\"ResponseHeaders\" returned \"PAUSE\": local response expected but none produced";
const CRASH: &str = "exited on signal";
/// Fail-closed: a worker process that learns of the refusal from shared
/// data when a request's store call is due decides that request as with
/// the store down, which for this rule is the same 503.
const RULE: &str = r#"{"name":"api","match":{"path_prefix":"/api/"},"key":["header:x-user"],"failure_mode":"closed","limits":[{"algorithm":"fixed_window","limit":3,"window":"1h"}]}"#;
/// The plugin configuration: `main.rs`'s, with the store's INFO asked
/// for hourly, so that an idle worker process learns of the refusal from
/// its timer alone (not from that answer).
fn plugin() -> String {
    let store = r#"{"transport":"webdis","cluster":"127.0.0.1:7379","authority":"webdis","timeout_ms":1000,"stats_interval":"1h"}"#;
    format!(r#"{{"domain":"ngx","store":{store},"rules":[{RULE}]}}"#)
}

/// The 503 (ngx_wasm_module ends a local response with a line feed).
const UNAVAILABLE: (u16, &str) = (503, "{\"error\":\"rate_limiter_unavailable\"}\n");
/// How long the upstream takes for `/api/slow`: well past any store call
/// (the store timeout is 1 s), so the decision of a request let through
/// comes while it is upstream.
const SLOW: Duration = Duration::from_secs(3);

/// The shipped configuration with the directive off (as if left out).
fn without_directive(conf: String) -> String {
    assert_eq!(conf.matches(ON).count(), 1, "nginx.conf sets the directive once");
    conf.replace(ON, OFF)
}

/// An upstream answering 200 at once, or after `SLOW` for `/api/slow`.
fn upstream() -> TestServer {
    TestServer::start(|conn, served| {
        let mut reader = BufReader::new(conn.try_clone().unwrap());
        let mut writer = conn;
        while let Some(target) = read_request_target(&mut reader) {
            served.fetch_add(1, Ordering::Relaxed);
            if target.starts_with("/api/slow") {
                std::thread::sleep(SLOW);
            }
            if writer.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n").is_err() {
                return;
            }
        }
    })
}

/// One request: its status and body, the body read whole so that the
/// connection is kept (status 0: the connection failed, as when the
/// worker process serving it died).
fn get(agent: &ureq::Agent, url: &str, user: &str) -> (u16, String) {
    match agent.get(url).header("x-user", user).call() {
        Ok(mut r) => (r.status().as_u16(), r.body_mut().read_to_string().unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

/// Pairs of requests on kept connections, the second to `/api/{path}`,
/// until the module refuses or `most` pairs were sent (`before_second`
/// runs before each second request); how many were.
fn pairs_until_refused(stack: &NginxStack, path: &str, most: usize, mut before_second: impl FnMut()) -> usize {
    let base = format!("http://127.0.0.1:{}", stack.nginx.port);
    let mut sent = 0;
    while sent < most && !stack.nginx.log().contains(REFUSED) {
        let kept = agent(Duration::from_secs(20));
        get(&kept, &format!("{base}/api/fast?{sent}"), &format!("u{sent}"));
        before_second();
        get(&kept, &format!("{base}/api/{path}?{sent}"), &format!("u{sent}"));
        sent += 1;
    }
    sent
}

/// The worker processes NGINX runs, and those that logged the refusal.
fn workers(log: &str) -> (BTreeSet<&str>, BTreeSet<&str>) {
    let mut live = BTreeSet::new();
    let mut refused = BTreeSet::new();
    for line in log.lines() {
        if let Some((_, pid)) = line.split_once("start worker process ") {
            live.insert(pid.trim());
        } else if let Some((_, rest)) = line.split_once(": worker process ").filter(|_| line.contains(" exited ")) {
            // "[alert] <master>#0: worker process <pid> exited on signal 11"
            live.remove(rest.split(' ').next().unwrap_or_default());
        } else if line.contains(REFUSED) {
            let pid = line.split_once("[error] ").and_then(|(_, r)| r.split_once('#')).map(|(p, _)| p);
            refused.extend(pid);
        }
    }
    (live, refused)
}

/// Waits until every worker process has logged the refusal: the one that
/// found the request let through at once, the others at their next timer
/// tick or store call, one started after a crash when it configures.
fn every_worker_refuses(stack: &NginxStack) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = stack.nginx.log();
        let (live, refused) = workers(&log);
        if !live.is_empty() && live.is_subset(&refused) {
            return;
        }
        assert!(Instant::now() < deadline, "workers {live:?}, refused {refused:?}:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// After the refusal: every request, each on a connection of its own and
/// all at once (the kernel spreads them over both worker processes),
/// whether a rule applies to it (`/api/`) or not, is answered 503 by NGINX
/// and none goes upstream.
fn every_request_is_refused(stack: &NginxStack, up: &TestServer) {
    let served = up.served.load(Ordering::Relaxed);
    let answers: Vec<_> = (0..10)
        .map(|i| {
            let path = if i % 2 == 0 { "api/fast" } else { "free" };
            let url = format!("http://127.0.0.1:{}/{path}?r{i}", stack.nginx.port);
            std::thread::spawn(move || (get(&agent(Duration::from_secs(20)), &url, "r"), url))
        })
        .collect();
    for answer in answers {
        let ((status, body), url) = answer.join().unwrap();
        assert_eq!((status, body.as_str()), UNAVAILABLE, "{url} after the refusal:\n{}", stack.nginx.log());
    }
    assert_eq!(up.served.load(Ordering::Relaxed), served, "a request went upstream after the refusal");
}

#[test]
fn a_request_let_through_before_its_decision_makes_every_worker_refuse_until_a_reload_with_the_directive() {
    start_clear_of_boundary(HOUR, Duration::from_secs(300));
    let up = upstream();
    let stack = NginxStack::start_edited(&plugin(), up.port, without_directive);
    // The first pair's second request is let through: its decision comes
    // while the upstream still holds it.
    let pairs = pairs_until_refused(&stack, "slow", 4, || {});
    let log = stack.nginx.log();
    assert!(log.contains(REFUSED), "no refusal after {pairs} pairs:\n{log}");
    assert!(!log.contains(CRASH) && !log.contains(UNHELD), "{log}");
    every_worker_refuses(&stack);
    every_request_is_refused(&stack, &up);

    // NGINX empties shared memory when it reloads: with the directive, the
    // module decides again, each request held until its decision.
    let refusals = stack.nginx.log().matches(REFUSED).count();
    stack.nginx.reload(|conf| conf.replace(OFF, ON));
    let base = format!("http://127.0.0.1:{}", stack.nginx.port);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut probe = 0;
    while get(&agent(Duration::from_secs(20)), &format!("{base}/api/fast?p{probe}"), &format!("probe{probe}")).0 != 200
    {
        assert!(Instant::now() < deadline, "still refused 30 s after the reload:\n{}", stack.nginx.log());
        probe += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let served = up.served.load(Ordering::Relaxed);
    let mut statuses = Vec::new();
    for i in 0..3 {
        let kept = agent(Duration::from_secs(20));
        statuses.push(get(&kept, &format!("{base}/api/fast?a{i}"), "after").0);
        statuses.push(get(&kept, &format!("{base}/api/fast?b{i}"), "after").0);
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429], "{}", stack.nginx.log());
    assert_eq!(up.served.load(Ordering::Relaxed), served + 3, "exactly the admitted went upstream");
    let log = stack.nginx.log();
    assert_eq!(log.matches(REFUSED).count(), refusals, "refused after the reload:\n{log}");
    assert!(!log.contains(CRASH) && !log.contains(UNHELD), "{log}");
}

#[test]
fn without_the_directive_only_the_first_request_let_through_can_crash_a_worker_process() {
    let up = upstream();
    let stack = NginxStack::start_edited(&plugin(), up.port, without_directive);
    let mut redis = stack.redis.connect();
    // The store held up (Redis paused) while the upstream answers at once:
    // the response of a request let through comes before its decision, as
    // in the reported crash: ngx_wasm_module warns, and the store call then
    // outlives its request. Before the module refused, nearly every pair
    // crashed a worker process; now only the first request let through
    // can, after the module has seen it and refused.
    let pairs = pairs_until_refused(&stack, "fast", 30, || {
        redis::cmd("CLIENT").arg("PAUSE").arg(300).arg("ALL").exec(&mut redis).unwrap();
    });
    let at_most_one = |log: &str| {
        let (crashes, warnings) = (log.matches(CRASH).count(), log.matches(UNHELD).count());
        assert!(crashes <= 1 && warnings <= 1, "{crashes} crashes, {warnings} warnings in {pairs} pairs:\n{log}");
    };
    let log = stack.nginx.log();
    at_most_one(&log);
    assert!(log.contains(REFUSED), "no refusal after {pairs} pairs:\n{log}");
    assert!(log.contains(UNHELD), "the response came before the decision:\n{log}");
    // That request's store call ends within the pause and the store
    // timeout (1 s); what it does to the worker process serving it once
    // its request is gone (the crash, if any) is over by then.
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline && !stack.nginx.log().contains(CRASH) {
        std::thread::sleep(Duration::from_millis(50));
    }
    every_worker_refuses(&stack);
    every_request_is_refused(&stack, &up);
    at_most_one(&stack.nginx.log());
}
