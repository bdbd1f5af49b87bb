//! A Redis error inside one decision of a batch (a client's sliding_log key
//! holds a string: WRONGTYPE) fails that decision alone: that client gets
//! its rule's failure policy (503 closed, fallback open), and a client whose
//! decision went in the same store call is decided by the store.

use std::collections::BTreeSet;

use host_tests::wasm_host::{Fault, Request};

use crate::both_transports;
use crate::fixture::{assert_unavailable, at, Kind, Servers};

both_transports!(one_clients_wrongtype_leaves_the_others_of_its_batch_decided_by_the_store);

const RULES: &str = r#"
  {"name":"closed","match":{"path_prefix":"/closed"},"key":["client_ip"],"failure_mode":"closed",
   "limits":[{"algorithm":"sliding_log","limit":5,"window":"1h"}]},
  {"name":"open","match":{"path_prefix":"/open"},"key":["client_ip"],"failure_mode":"open",
   "limits":[{"algorithm":"sliding_log","limit":5,"window":"1h"}]}"#;

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn keys(servers: &Servers) -> BTreeSet<String> {
    redis::cmd("KEYS").arg("*").query(&mut servers.redis.connect()).unwrap()
}

fn from(path: &str, client: u8) -> Request {
    Request::get(path).from(&format!("10.0.0.{client}:1"))
}

fn one_clients_wrongtype_leaves_the_others_of_its_batch_decided_by_the_store(kind: Kind) {
    let servers = Servers::start(kind);
    // One call in flight at a time, and a timeout long enough that the
    // waiting decisions go together when it returns.
    let config = kind.config_full(RULES, r#","timeout_ms":200,"batch":{"max_in_flight":1}"#, "");
    let mut host = servers.host(&config, 1).start();
    host.advance_to(at(1_000));
    // Clients 2 (closed) and 4 (open) have a log; then a string replaces it.
    let mut broken = Vec::new();
    for (path, client) in [("/closed", 2), ("/open", 4)] {
        let before = keys(&servers);
        assert_eq!(host.send(0, from(path, client)).status, 200);
        let new: Vec<String> = keys(&servers).difference(&before).cloned().collect();
        assert_eq!(new.len(), 1, "{new:?}");
        let _: () = redis::cmd("SET").arg(&new[0]).arg("x").query(&mut servers.redis.connect()).unwrap();
        broken.push(new[0].clone());
    }
    let before = keys(&servers);
    // Client 1's call is out; clients 2, 3 and 4 wait and leave together.
    host.faults([Fault::Delay(10)]);
    let first = host.begin(0, from("/closed", 1));
    let (two, three, four) =
        (host.begin(0, from("/closed", 2)), host.begin(0, from("/closed", 3)), host.begin(0, from("/open", 4)));
    host.advance(10);
    assert_eq!(host.calls().len(), 4, "two requests before, then one call for 1 and one for 2, 3 and 4");
    assert_eq!(servers.command_calls("evalsha"), 4);
    assert_eq!(host.finish(first).header("x-ratelimit-remaining"), Some("4"));
    assert_unavailable(&host.finish(two));
    let three = host.finish(three);
    assert_eq!((three.status, three.header("x-ratelimit-remaining")), (200, Some("4")), "decided by the store");
    let four = host.finish(four);
    assert_eq!((four.status, four.local), (200, false), "the open rule's fallback admits");
    assert_eq!(host.counter("ratelimit.closed.store_errors"), 1);
    assert_eq!(host.counter("ratelimit.closed.fail_closed"), 1);
    assert_eq!(host.counter("ratelimit.open.store_errors"), 1);
    assert_eq!(host.counter("ratelimit.open.fallback_allowed"), 1);
    assert_eq!(
        host.logs_containing("store errors"),
        [format!("ratelimit: redis error: {WRONGTYPE} (1 store errors on this worker since the last such line)")]
    );
    // The broken keys are as they were; client 3's log has its entry, with a TTL.
    let mut conn = servers.redis.connect();
    for key in &broken {
        let value: String = redis::cmd("GET").arg(key).query(&mut conn).unwrap();
        assert_eq!(value, "x", "{key}");
    }
    let new: Vec<String> = keys(&servers).difference(&before).cloned().collect();
    assert_eq!(new.len(), 2, "the logs of clients 1 and 3 only: {new:?}");
    for key in &new {
        let (entries, ttl): (u64, i64) =
            redis::pipe().cmd("ZCARD").arg(key).cmd("PTTL").arg(key).query(&mut conn).unwrap();
        assert_eq!(entries, 1, "{key}");
        assert!(ttl > 0, "{key}: PTTL {ttl}");
    }
}
