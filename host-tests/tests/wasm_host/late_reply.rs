//! A client that goes away before the store answers. The call belongs to
//! the root context (Envoy's HTTP calls as Higress's Redis calls), so its
//! reply still arrives there, where the module must find the stream gone
//! and drop it: no trap, and the next requests are decided as usual.

use host_tests::wasm_host::{Fault, Outcome, Request};

use crate::both_transports;
use crate::fixture::{at, rule, Kind, Servers};

both_transports!(a_reply_after_the_client_left_is_dropped);

fn config(kind: Kind) -> String {
    kind.config(&rule("api", "/api", "closed", "fixed_window", 5, "1h"))
}

fn a_reply_after_the_client_left_is_dropped(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&config(kind), 1).start();
    host.advance_to(at(1_000));
    host.faults([Fault::Delay(5)]);
    let gone = host.begin(0, Request::get("/api"));
    let stays = host.begin(0, Request::get("/api"));
    host.close(gone);
    host.advance(5);
    let r = host.finish(stays);
    assert_eq!((r.status, r.header("x-ratelimit-remaining")), (200, Some("3")), "the store counted both");
    let outcomes: Vec<Outcome> = host.calls().into_iter().map(|c| c.outcome).collect();
    assert_eq!(outcomes, [Outcome::Delivered(at(1_005)), Outcome::Delivered(at(1_000))]);
    assert_eq!(host.live_streams(0), 0);
    assert_eq!(host.send(0, Request::get("/api")).header("x-ratelimit-remaining"), Some("2"));
}

/// The client leaves while the script is being loaded: the load's reply
/// arrives for a stream that is gone.
#[test]
fn webdis_a_script_load_reply_after_the_client_left_is_dropped() {
    let servers = Servers::start_empty(Kind::Webdis);
    let mut host = servers.host(&config(Kind::Webdis), 1).start();
    host.advance_to(at(1_000));
    // The first EVALSHA meets NOSCRIPT; the client leaves during the load.
    host.faults([Fault::Pass, Fault::Delay(5)]);
    let gone = host.begin(0, Request::get("/api"));
    host.run_until_idle();
    assert_eq!(host.pending_calls(), 1, "the SCRIPT LOAD is out");
    host.close(gone);
    host.advance(5);
    // NOSCRIPT, the load (delayed), then the resent EVALSHA: the gone
    // client's decision is still made, and dropped.
    assert_eq!(
        host.calls().iter().map(|c| c.outcome.clone()).collect::<Vec<_>>(),
        [Outcome::Delivered(at(1_000)), Outcome::Delivered(at(1_005)), Outcome::Delivered(at(1_005))]
    );
    assert_eq!(host.send(0, Request::get("/api")).header("x-ratelimit-remaining"), Some("3"));
}
