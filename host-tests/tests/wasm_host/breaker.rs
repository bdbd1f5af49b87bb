//! The circuit breaker in shared data: N consecutive store failures on any
//! workers open it; while open no call is made; after 1 s exactly one probe
//! goes; its success closes it, its failure reopens it for twice as long
//! (at most the open period), and a probe whose client went away still
//! reports: its call belongs to the plugin.

use host_tests::wasm_host::{Fault, Host, Request, State};

use crate::both_transports;
use crate::fixture::{assert_unavailable, at, rule, Kind, Servers};

both_transports!(
    opens_after_three_failures_across_workers,
    half_open_lets_exactly_one_probe_through,
    a_failed_probe_reopens_it,
    a_probe_whose_client_left_still_counts
);

/// A fail-closed rule with room to spare; the breaker opens after 3
/// failures, probes 1 s later, then every 2 s (its open period) while the
/// probes fail; the store call times out after 25 ms.
fn setup(kind: Kind, servers: &Servers) -> Host {
    let config = kind.config(&rule("api", "/api", "closed", "fixed_window", 100, "1h"));
    servers.host(&config, 3).start()
}

/// Three failures at 1 000 on VMs 0, 1, 2: open until 2 000.
fn open_it(host: &mut Host) {
    host.advance_to(at(1_000));
    let before = host.calls().len();
    host.faults([Fault::ConnectFailure, Fault::ConnectFailure, Fault::ConnectFailure]);
    for vm in 0..3 {
        assert_unavailable(&host.send(vm, Request::get("/api")));
    }
    assert_eq!(host.calls().len(), before + 3);
}

fn opens_after_three_failures_across_workers(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = setup(kind, &servers);
    host.advance_to(at(1_000));
    host.faults([Fault::ConnectFailure, Fault::ConnectFailure]);
    for vm in 0..2 {
        assert_unavailable(&host.send(vm, Request::get("/api")));
    }
    // Two failures keep it closed; a success resets the count.
    assert_eq!(host.send(2, Request::get("/api")).status, 200);
    host.faults([Fault::ConnectFailure, Fault::ConnectFailure]);
    for vm in 0..2 {
        assert_unavailable(&host.send(vm, Request::get("/api")));
    }
    assert_eq!(host.send(2, Request::get("/api")).status, 200, "two failures since the success");
    assert_eq!(host.calls().len(), 6);
    open_it(&mut host);
    // Open: no call from any worker, every request fails closed.
    for vm in 0..3 {
        assert_unavailable(&host.send(vm, Request::get("/api")));
    }
    host.advance_to(at(1_999));
    assert_unavailable(&host.send(0, Request::get("/api")));
    assert_eq!(host.calls().len(), 9, "no store call while open");
    assert_eq!(host.counter("ratelimit.api.store_errors"), 7, "a breaker-open refusal is no store error");
    assert_eq!(host.counter("ratelimit.api.fail_closed"), 11);
}

fn half_open_lets_exactly_one_probe_through(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = setup(kind, &servers);
    open_it(&mut host);
    host.advance_to(at(2_000));
    host.faults([Fault::Delay(10)]);
    let probe = host.begin(1, Request::get("/api"));
    assert_eq!(host.state(probe), State::Waiting);
    assert_eq!(host.calls().len(), 4, "the probe");
    // While the probe is out, every other request on every worker is refused without a call.
    for vm in 0..3 {
        assert_unavailable(&host.send(vm, Request::get("/api")));
    }
    host.advance(9);
    assert_unavailable(&host.send(0, Request::get("/api")));
    assert_eq!(host.calls().len(), 4);
    host.advance(1);
    assert_eq!(host.finish(probe).status, 200, "the probe's reply arrived at 2 010");
    // Closed again: every worker calls.
    for vm in 0..3 {
        assert_eq!(host.send(vm, Request::get("/api")).status, 200);
    }
    assert_eq!(host.calls().len(), 7);
}

fn a_failed_probe_reopens_it(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = setup(kind, &servers);
    open_it(&mut host);
    host.advance_to(at(2_000));
    host.faults([Fault::Drop]);
    let probe = host.begin(0, Request::get("/api"));
    host.advance(24);
    assert_eq!(host.state(probe), State::Waiting);
    host.advance(1);
    assert_unavailable(&host.finish(probe));
    // The probe failed at 2 025: open again for twice the first wait, 2 s
    // (the open period caps it), until 4 025.
    host.advance_to(at(4_024));
    assert_unavailable(&host.send(1, Request::get("/api")));
    assert_eq!(host.calls().len(), 4);
    host.advance_to(at(4_025));
    host.faults([Fault::Drop]);
    let probe = host.begin(1, Request::get("/api"));
    host.advance(25);
    assert_unavailable(&host.finish(probe));
    assert_eq!(host.calls().len(), 5, "the second probe");
    // Failed at 4 050: the wait stays at the open period, 2 s.
    host.advance_to(at(6_049));
    assert_unavailable(&host.send(2, Request::get("/api")));
    assert_eq!(host.calls().len(), 5);
    host.advance_to(at(6_050));
    assert_eq!(host.send(2, Request::get("/api")).status, 200, "the third probe, answered");
    assert_eq!(host.calls().len(), 6);
    // Closed: no wait any more.
    assert_eq!(host.send(0, Request::get("/api")).status, 200);
    assert_eq!(host.calls().len(), 7);
}

fn a_probe_whose_client_left_still_counts(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = setup(kind, &servers);
    open_it(&mut host);
    host.advance_to(at(2_000));
    host.faults([Fault::Drop]);
    let probe = host.begin(2, Request::get("/api"));
    host.close(probe);
    // The probe's call is the plugin's, not its client's: it goes on after
    // the client left, times out at 2 025, and that failure opens the
    // breaker again until 4 025 (no stream is left to count it as a store
    // error of the rule).
    host.advance_to(at(4_024));
    assert_unavailable(&host.send(0, Request::get("/api")));
    assert_eq!(host.calls().len(), 4);
    assert_eq!(host.counter("ratelimit.api.store_errors"), 3);
    host.advance_to(at(4_025));
    assert_eq!(host.send(0, Request::get("/api")).status, 200, "a new probe");
    assert_eq!(host.calls().len(), 5);
}
