//! Store calls against the clock: a reply that never comes fails at the
//! call's timeout, not a millisecond before; a reply inside the timeout is
//! used, and its latency recorded exactly; one later than the timeout is
//! never seen.

use host_tests::wasm_host::{Fault, Outcome, Request, State};

use crate::both_transports;
use crate::fixture::{assert_unavailable, at, rule, Kind, Servers};

both_transports!(
    a_lost_reply_fails_at_the_timeout_exactly,
    a_slow_reply_inside_the_timeout_is_used,
    a_reply_after_the_timeout_is_never_seen,
    an_open_rule_admits_through_the_fallback_on_timeout
);

fn rules() -> String {
    format!(
        "{},{}",
        rule("closed", "/closed", "closed", "fixed_window", 5, "1h"),
        rule("open", "/open", "open", "fixed_window", 5, "1h")
    )
}

fn a_lost_reply_fails_at_the_timeout_exactly(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&kind.config(&rules()), 1).start();
    host.advance_to(at(1_000));
    host.faults([Fault::Drop]);
    let id = host.begin(0, Request::get("/closed"));
    host.advance(24);
    assert_eq!(host.state(id), State::Waiting, "1 ms before the timeout");
    assert_eq!(host.pending_calls(), 1);
    host.advance(1);
    assert_unavailable(&host.finish(id));
    assert_eq!(host.calls()[0].outcome, Outcome::TimedOut(at(1_025)));
    assert_eq!(host.counter("ratelimit.closed.store_errors"), 1);
    assert_eq!(host.counter("ratelimit.closed.fail_closed"), 1);
    if kind == Kind::Webdis {
        assert_eq!(
            host.logs_containing("store answered HTTP 504"),
            ["ratelimit: store answered HTTP 504 (1 store errors on this worker since the last such line)"]
        );
    }
}

fn a_slow_reply_inside_the_timeout_is_used(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&kind.config(&rules()), 1).start();
    host.advance_to(at(1_000));
    assert_eq!(host.send(0, Request::get("/closed")).status, 200);
    host.faults([Fault::Delay(24)]);
    let id = host.begin(0, Request::get("/closed"));
    host.advance(23);
    assert_eq!(host.state(id), State::Waiting);
    host.advance(1);
    let r = host.finish(id);
    assert_eq!((r.status, r.header("x-ratelimit-remaining")), (200, Some("3")));
    assert_eq!(host.histogram("ratelimit.store_latency_ms"), [0, 24]);
    assert_eq!(host.counter("ratelimit.closed.store_errors"), 0);
}

fn a_reply_after_the_timeout_is_never_seen(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&kind.config(&rules()), 1).start();
    host.advance_to(at(1_000));
    host.faults([Fault::Delay(26)]);
    let id = host.begin(0, Request::get("/closed"));
    host.advance(25);
    assert_unavailable(&host.finish(id));
    host.advance(10);
    assert_eq!(host.calls()[0].outcome, Outcome::TimedOut(at(1_025)), "the reply due at 1 026 was dropped");
    assert_eq!(host.pending_calls(), 0);
    // The store did count it (the command ran): the next request sees 3 left.
    assert_eq!(host.send(0, Request::get("/closed")).header("x-ratelimit-remaining"), Some("3"));
}

fn an_open_rule_admits_through_the_fallback_on_timeout(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&kind.config(&rules()), 1).start();
    host.advance_to(at(1_000));
    host.faults([Fault::Timeout]);
    let r = host.send(0, Request::get("/open"));
    // The fallback share of fleet_size 1 is the whole limit.
    assert_eq!(
        (r.status, r.header("x-ratelimit-limit"), r.header("x-ratelimit-remaining")),
        (200, Some("5"), Some("4"))
    );
    assert_eq!(host.counter("ratelimit.open.fallback_allowed"), 1);
    assert_eq!(host.counter("ratelimit.open.store_errors"), 1);
}
