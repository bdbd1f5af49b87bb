//! Reservation mode in the deterministic host, on a real Redis: the body
//! reaches the filter, the worst case is taken at admission, the response
//! settles it, and a stream gone before the store's answer gives its
//! reservation back whole.

use host_tests::wasm_host::{Host, Request, State};

use crate::both_transports;
use crate::fixture::{at, Kind, Servers};

both_transports!(a_reservation_is_taken_then_settled_or_given_back);

const RULE: &str = r#"{"name":"rv","match":{"path_prefix":"/v1/"},"key":["client_ip"],"failure_mode":"closed",
    "cost":{"response_header":"x-usage","default":7,"max":1000,"reservation":{"default_output":0}},
    "limits":[{"algorithm":"fixed_window","limit":200,"window":"1h"}]}"#;

/// 30 output tokens and 17 bytes: 47 reserved.
const BODY: &[u8] = br#"{"max_tokens":30}"#;

fn held(servers: &Servers) -> u64 {
    let mut c = servers.redis.connect();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*:rv:fw:*").query(&mut c).unwrap();
    keys.iter().map(|k| redis::cmd("GET").arg(k).query::<Option<u64>>(&mut c).unwrap().unwrap_or(0)).sum()
}

fn chat() -> Request {
    Request::new("POST", "/v1/chat").header("content-type", "application/json").body(BODY)
}

fn a_reservation_is_taken_then_settled_or_given_back(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host: Host = servers.host(&kind.config(RULE), 1).start();
    host.advance_to(at(1_000));
    let id = host.begin(0, chat());
    host.run_until_idle();
    assert_eq!(host.state(id), State::Continued);
    assert_eq!(held(&servers), 47, "the worst case, at admission");
    host.finish_with(id, &[("x-usage", "10")]);
    host.run_until_idle();
    assert_eq!(held(&servers), 10, "settled to the usage");
    // Four more fit in 200 (10 + 4 x 47 = 198), the fifth does not.
    let ids: Vec<_> = (0..5).map(|_| host.begin(0, chat())).collect();
    host.run_until_idle();
    let admitted = ids.iter().filter(|id| host.state(**id) == State::Continued).count();
    assert_eq!((admitted, held(&servers)), (4, 198));
    for id in ids {
        host.close(id);
    }
    host.run_until_idle();
    assert_eq!(held(&servers), 10 + 4 * 7, "hung up after admission: the default each");
    // Gone while its decision is in flight: given back whole when it comes.
    let id = host.begin(0, chat());
    host.close(id);
    host.run_until_idle();
    assert_eq!(held(&servers), 10 + 4 * 7);
}
