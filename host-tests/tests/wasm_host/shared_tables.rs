//! Every table the module keeps in shared data (deny cache, fallback
//! shares, lease table, breakers) stays within `deny_cache.slots` keys
//! however many clients pass, the breakers of Redis Cluster hash slots
//! included: many more clients than slots are denied, leased, counted by
//! the fallback and failed inside Redis, each in a hash slot of its own,
//! and every key written is counted, whatever its name.

use std::collections::BTreeMap;

use host_tests::wasm_host::{Fault, Request};

use crate::both_transports;
use crate::fixture::{at, Kind, Servers};

both_transports!(every_table_keeps_within_the_slots_whatever_the_clients);

const SLOTS: usize = 16;
const CLIENTS: usize = 100;

/// Per user: a leased rule, a limit of 1 (its second request is a
/// denial to cache) and an open rule (the fallback counts it when the
/// store fails).
const RULES: &str = r#"
  {"name":"hot","match":{"path_prefix":"/hot"},"key":["header:x-user"],"failure_mode":"closed",
   "lease":{"max_units":8,"max_age":"5s"},"limits":[{"algorithm":"fixed_window","limit":50,"window":"1m"}]},
  {"name":"deny","match":{"path_prefix":"/deny"},"key":["header:x-user"],"failure_mode":"closed",
   "limits":[{"algorithm":"fixed_window","limit":1,"window":"1h"}]},
  {"name":"open","match":{"path_prefix":"/open"},"key":["header:x-user"],"failure_mode":"open",
   "limits":[{"algorithm":"fixed_window","limit":5,"window":"1h"}]}"#;

fn of(path: &str, c: usize) -> Request {
    Request::get(path).header("x-user", &format!("user-{c}"))
}

/// Each key counted by its table: the name before the plugin's scope
/// (`@` and 16 hex digits), less its last `.<index>`; a key without an
/// index is a table of its own, named `<name> (single)`.
fn tables(keys: &[String]) -> BTreeMap<String, usize> {
    let mut scopes: Vec<&str> = keys.iter().map(|k| k.split_once('@').map_or("", |(_, s)| s)).collect();
    scopes.sort_unstable();
    scopes.dedup();
    assert_eq!(scopes.len(), 1, "one plugin, one scope: {keys:?}");
    let mut by_table = BTreeMap::new();
    for key in keys {
        let name = key.split_once('@').map_or(key.as_str(), |(n, _)| n);
        let table = match name.rsplit_once('.') {
            Some((table, index)) if index.parse::<usize>().is_ok() => table.to_string(),
            _ => format!("{name} (single)"),
        };
        *by_table.entry(table).or_insert(0) += 1;
    }
    by_table
}

fn every_table_keeps_within_the_slots_whatever_the_clients(kind: Kind) {
    let servers = Servers::start(kind);
    let config = kind.config_with(RULES, &format!(r#","deny_cache":{{"slots":{SLOTS}}}"#));
    let mut host = servers.host(&config, 2).start();
    host.advance_to(at(1_000));
    // The store answers: each client hot on a worker (leased while the
    // table has room for it), and denied once.
    for c in 0..CLIENTS {
        for _ in 0..6 {
            assert_eq!(host.send(c % 2, of("/hot", c)).status, 200);
        }
        assert_eq!(host.send(0, of("/deny", c)).status, 200);
        assert_eq!(host.send(1, of("/deny", c)).status, 429);
    }
    let leases = host.counter("ratelimit.hot.leases");
    assert!(leases >= SLOTS as i64, "{leases} leases: more clients leased than the table has slots");
    assert_eq!(host.counter("ratelimit.deny.denied"), CLIENTS as i64);
    // Every decision fails inside Redis, each client in its own hash slot:
    // the slots' breakers count, and the fallback admits.
    host.fault_always(Some(Fault::Error("ERR injected".into())));
    for c in 0..CLIENTS {
        assert_eq!(host.send(c % 2, of("/open", c)).status, 200);
    }
    assert_eq!(host.counter("ratelimit.open.fallback_allowed"), CLIENTS as i64);
    // Then the transport fails: the store's own breaker opens.
    host.fault_always(Some(Fault::ConnectFailure));
    for c in 0..CLIENTS {
        assert_eq!(host.send(c % 2, of("/open", c)).status, 200);
    }
    let by_table = tables(&host.shared_keys());
    let expected: BTreeMap<String, usize> = [
        ("ratelimit.breaker (single)", 1),
        ("ratelimit.breaker", SLOTS),
        ("ratelimit.deny", SLOTS),
        ("ratelimit.fallback", SLOTS),
        ("ratelimit.lease", SLOTS),
    ]
    .into_iter()
    .map(|(t, n)| (t.to_string(), n))
    .collect();
    assert_eq!(by_table, expected, "each table full at its slots, and nothing else");
}
