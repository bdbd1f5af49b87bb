//! Callbacks the module did not ask for: a token it never got, and a reply
//! delivered twice. The module ignores them (no trap, no second decision,
//! no counter moved) and decides every request by its own reply.

use host_tests::wasm_host::{Fault, HeaderMap, Reply, Request, State};

use crate::both_transports;
use crate::fixture::{at, rule, Kind, Servers};

both_transports!(a_callback_for_a_token_never_given_is_ignored, a_reply_delivered_twice_counts_once);

fn config(kind: Kind) -> String {
    kind.config(&rule("api", "/api", "closed", "fixed_window", 5, "1h"))
}

/// A reply that would admit, for a token of `kind`'s transport that was
/// never handed out (HTTP-call tokens are 0 mod 4, Redis-call tokens 3 mod 4).
fn stray(kind: Kind) -> (u32, Reply) {
    match kind {
        Kind::Webdis => {
            let body = br#"{"EVALSHA":[1,0,1000,0]}"#.to_vec();
            let headers = HeaderMap::from_text(&[(":status", "200"), ("content-length", &body.len().to_string())]);
            (4_000_000, Reply::Http { headers, body })
        }
        Kind::Redis => (4_000_003, Reply::Redis(b"*4\r\n:1\r\n:0\r\n:1000\r\n:0\r\n".to_vec())),
    }
}

fn a_callback_for_a_token_never_given_is_ignored(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&config(kind), 1).start();
    host.advance_to(at(1_000));
    let (token, reply) = stray(kind);
    // Before any call, and while a request waits for its own reply.
    host.call_back(0, token, &reply, 0);
    host.faults([Fault::Delay(5)]);
    let id = host.begin(0, Request::get("/api"));
    host.call_back(0, token, &reply, 0);
    let failure = if kind == Kind::Webdis { Reply::HttpReset } else { Reply::RedisNetworkError };
    host.call_back(0, token + 4, &failure, 0);
    assert_eq!(host.state(id), State::Waiting, "a stray reply decides nothing");
    host.advance(5);
    let r = host.finish(id);
    assert_eq!((r.status, r.header("x-ratelimit-remaining")), (200, Some("4")), "decided by its own reply");
    assert_eq!(host.counter("ratelimit.api.allowed"), 1);
    assert_eq!(host.counter("ratelimit.api.store_errors"), 0);
    assert_eq!(host.send(0, Request::get("/api")).header("x-ratelimit-remaining"), Some("3"));
}

fn a_reply_delivered_twice_counts_once(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&config(kind), 1).start();
    host.advance_to(at(1_000));
    host.faults([Fault::Twice]);
    let r = host.send(0, Request::get("/api"));
    assert_eq!((r.status, r.header("x-ratelimit-remaining")), (200, Some("4")));
    assert_eq!(host.calls().len(), 1);
    assert_eq!(host.counter("ratelimit.api.allowed"), 1, "one request, one decision");
    assert_eq!(host.counter("ratelimit.api.store_errors"), 0);
    assert_eq!(host.histogram("ratelimit.store_latency_ms"), [0], "one latency sample");
    assert_eq!(host.send(0, Request::get("/api")).header("x-ratelimit-remaining"), Some("3"));
}
