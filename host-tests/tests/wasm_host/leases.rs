//! Leases in the wasmtime host with a real Redis: two workers of one proxy
//! spend one lease (shared data), a hot client is admitted exactly its
//! limit with a fraction of the store calls, a cold client beside it is
//! decided per request, and the lease table stays bounded however many
//! clients pass.

use host_tests::wasm_host::{Fault, Request};
use ratelimit::lease::HOT_AFTER;

use crate::both_transports;
use crate::fixture::{at, Kind, Servers};

both_transports!(
    two_workers_spend_one_lease_and_a_hot_client_gets_exactly_its_limit,
    the_lease_table_and_memory_stay_bounded_whatever_the_clients,
    a_reloaded_vm_spends_what_is_left_of_the_lease_and_no_unit_twice,
    a_lease_in_hand_admits_while_the_store_fails_then_the_policy_applies,
    a_client_hot_again_after_a_pause_is_leased_again,
    a_thousand_clients_in_turn_are_each_leased,
    two_workers_spending_large_leases_admit_exactly_the_limit,
    a_reload_loses_no_leased_unit_and_admits_none_twice
);

/// Per client: 50 a minute and 20 a second (a bucket), both leased.
const HOT: &str = r#"{"name":"hot","key":["header:x-user"],"failure_mode":"closed",
  "lease":{"max_units":8,"max_age":"5s"},
  "limits":[{"algorithm":"fixed_window","limit":50,"window":"1m"},
            {"algorithm":"sliding_window","limit":1000,"window":"1m"}]}"#;

/// 300 a minute, leases of up to 128 requests.
const LARGE: &str = r#"{"name":"hot","key":["header:x-user"],"failure_mode":"closed",
  "lease":{"max_units":128,"max_age":"5s"},
  "limits":[{"algorithm":"fixed_window","limit":300,"window":"1m"}]}"#;

fn as_user(user: &str) -> Request {
    Request::get("/api").header("x-user", user)
}

fn two_workers_spend_one_lease_and_a_hot_client_gets_exactly_its_limit(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&kind.config(HOT), 2).start();
    host.advance_to(at(1_000));
    let mut admitted = 0;
    for i in 0..150 {
        let r = host.send(i % 2, as_user("hot"));
        assert!(matches!(r.status, 200 | 429), "{r:?}");
        admitted += u32::from(r.status == 200);
        // A cold client beside it: one request in a while, decided by the store.
        if i % 30 == 0 {
            let calls = host.calls_made();
            assert_eq!(host.send(i % 2, as_user(&format!("cold-{i}"))).status, 200);
            assert_eq!(host.calls_made(), calls + 1, "a cold client's request is one store decision");
        }
    }
    eprintln!(
        "{kind:?}: admitted {admitted} of 150, {} from leases, {} leases, {} store calls for 150 + 5 requests",
        host.counter("ratelimit.hot.lease_allowed"),
        host.counter("ratelimit.hot.leases"),
        host.calls_made()
    );
    assert_eq!(admitted, 50, "exactly the limit: leased units were counted before they were spent");
    let from_leases = host.counter("ratelimit.hot.lease_allowed");
    assert!(from_leases >= 25, "most of the hot client's admissions came from leases: {from_leases}");
    assert!(host.counter("ratelimit.hot.leases") >= 4);
    // Both workers spent leases (the table is the proxy's, not a worker's).
    assert_eq!(host.counter("ratelimit.hot.allowed"), 50 + 5);
}

fn the_lease_table_and_memory_stay_bounded_whatever_the_clients(kind: Kind) {
    let clients: u64 = std::env::var("LEASE_CLIENTS").ok().and_then(|v| v.parse().ok()).unwrap_or(4_000);
    let servers = Servers::start(kind);
    let config = kind.config_with(HOT, r#","deny_cache":{"slots":256}"#);
    let mut host = servers.host(&config, 1).start();
    host.advance_to(at(1_000));
    let mut after_quarter = None;
    for c in 0..clients {
        // Each client hot (4 requests: the 4th's answer is its view of
        // the limits), leased (the 5th brings a lease), then one from it.
        for _ in 0..6 {
            assert_eq!(host.send(0, as_user(&format!("c{c}"))).status, 200);
        }
        // 40 ms a client: about 125 leases live at once (max_age 5 s) in
        // 256 slots, each new one in a slot whose lease ended (swept).
        host.advance(40);
        if c == clients / 4 {
            after_quarter = Some(host.memory_bytes(0));
        }
        // The curve, for a long run's record (LEASE_CLIENTS=1000000).
        if clients >= 100_000 && c % (clients / 10) == 0 {
            eprintln!("{kind:?}: {c} clients, linear memory {} bytes", host.memory_bytes(0));
        }
    }
    let leases = host.shared_keys().iter().filter(|k| k.starts_with("ratelimit.lease.")).count();
    assert!(leases <= 256, "{leases} lease slots");
    let leased = host.counter("ratelimit.hot.lease_allowed");
    assert!(leased >= clients as i64 * 95 / 100, "{leased} requests of {clients} clients admitted from leases");
    let (end, quarter) = (host.memory_bytes(0), after_quarter.unwrap());
    eprintln!("{kind:?}: {clients} clients, {leased} requests from leases, {leases} lease slots, memory {quarter} then {end} bytes");
    assert!(end <= quarter + 65_536, "memory grew from {quarter} to {end} bytes over {clients} clients");
}

/// A host of one VM whose client "hot" holds a lease: its requests so far.
fn with_a_lease(host: &mut host_tests::wasm_host::Host) -> u32 {
    let mut sent = 0;
    while host.counter("ratelimit.hot.leases") == 0 {
        assert_eq!(host.send(0, as_user("hot")).status, 200);
        sent += 1;
        assert!(sent < 20, "no lease after {sent} requests");
    }
    sent
}

fn a_reloaded_vm_spends_what_is_left_of_the_lease_and_no_unit_twice(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&kind.config(HOT), 1).start();
    host.advance_to(at(1_000));
    let mut admitted = with_a_lease(&mut host);
    // One request from the lease, then the VM is reloaded (a trap, FAIL_RELOAD).
    admitted += u32::from(host.send(0, as_user("hot")).status == 200);
    let leased = host.counter("ratelimit.hot.lease_allowed");
    host.reload_vm(0);
    // The fresh VM reads the proxy's lease table once the client is hot on
    // it again (HOT_AFTER requests), and spends what is left of the lease.
    for _ in 0..HOT_AFTER {
        admitted += u32::from(host.send(0, as_user("hot")).status == 200);
    }
    assert!(host.counter("ratelimit.hot.lease_allowed") > leased, "the fresh VM spent the lease");
    for _ in 0..150 {
        admitted += u32::from(host.send(0, as_user("hot")).status == 200);
    }
    assert_eq!(admitted, 50, "every unit the store counted, none twice");
}

fn a_lease_in_hand_admits_while_the_store_fails_then_the_policy_applies(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&kind.config(HOT), 1).start();
    host.advance_to(at(1_000));
    with_a_lease(&mut host);
    let leased = host.counter("ratelimit.hot.lease_allowed");
    host.fault_always(Some(Fault::ConnectFailure));
    let statuses: Vec<u32> = (0..20).map(|_| host.send(0, as_user("hot")).status).collect();
    let paid = statuses.iter().take_while(|s| **s == 200).count();
    assert!(paid >= 1, "the lease in hand admits: {statuses:?}");
    assert!(statuses[paid..].iter().all(|s| *s == 503), "then the rule fails closed: {statuses:?}");
    assert_eq!(host.counter("ratelimit.hot.lease_allowed") - leased, paid as i64);
}

/// Leased once, then quiet for a minute (its last lease says it was slow),
/// then hot again: it is leased again at its pace now, not left to the
/// store for every request (the bug a full bench sitting found).
fn a_client_hot_again_after_a_pause_is_leased_again(kind: Kind) {
    let servers = Servers::start(kind);
    // Limits far from reach: only the pace sizes the leases.
    let config = kind.config(&HOT.replace(r#""limit":50,"window":"1m""#, r#""limit":100000,"window":"1h""#));
    let mut host = servers.host(&config, 1).start();
    host.advance_to(at(1_000));
    with_a_lease(&mut host);
    host.advance(60_000);
    let (calls, leases) = (host.calls_made(), host.counter("ratelimit.hot.leases"));
    for _ in 0..100 {
        assert_eq!(host.send(0, as_user("hot")).status, 200);
    }
    assert!(host.counter("ratelimit.hot.leases") > leases, "leased again");
    let made = host.calls_made() - calls;
    assert!(made <= 30, "{made} store calls for 100 requests of a hot client");
}

/// 1,000 clients in turn, 10 requests a second each (a bench's round
/// robin): every one is hot after 4 requests and leased, none pushed out
/// of the heat or lease table by another (with one slot each, a fifth of
/// them shared one and were decided per request, or lost leases).
fn a_thousand_clients_in_turn_are_each_leased(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&kind.config(HOT), 1).start();
    host.advance_to(at(1_000));
    let clients = 1_000;
    let mut admitted = 0;
    for _ in 0..10 {
        for c in 0..clients {
            admitted += u32::from(host.send(0, as_user(&format!("c{c}"))).status == 200);
            if c % 10 == 9 {
                host.advance(1);
            }
        }
    }
    assert_eq!(admitted, 10 * clients);
    let (leased, leases) = (host.counter("ratelimit.hot.lease_allowed"), host.counter("ratelimit.hot.leases"));
    eprintln!("{kind:?}: {leases} leases, {leased} requests from them, {} store calls", host.calls_made());
    // Rounds 1-5 decided by the store (the 4th's answer is the client's
    // view of its limits, 46 left; the 5th asks for a lease of its heat,
    // 5), 6-10 from it: 5 of 10 from leases. But for a client whose 4
    // candidate slots of the 4,096 all hold live leases of others, about
    // (1000 / 4096)^4 of them: no lease until one ends. (With one slot
    // each, measured: 3,825 from leases.)
    assert!(leased >= 5 * i64::from(clients) - 15 && leased <= 5 * i64::from(clients), "{leased}");
    assert!(leases >= i64::from(clients) - 3 && leases <= i64::from(clients), "{leases}");
}

fn two_workers_spending_large_leases_admit_exactly_the_limit(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&kind.config(LARGE), 2).start();
    host.advance_to(at(1_000));
    let reads = |host: &host_tests::wasm_host::Host| host.hostcall_count("proxy_get_shared_data").calls;
    let mut admitted = 0;
    let (mut leased_reads, mut leased) = (0, 0);
    for i in 0..600 {
        let (before, from_leases) = (reads(&host), host.counter("ratelimit.hot.lease_allowed"));
        let r = host.send(i % 2, as_user("hot"));
        assert!(matches!(r.status, 200 | 429), "{r:?}");
        admitted += u32::from(r.status == 200);
        if host.counter("ratelimit.hot.lease_allowed") > from_leases {
            leased += 1;
            leased_reads += reads(&host) - before;
        }
    }
    eprintln!(
        "{kind:?}: admitted {admitted} of 600, {leased} from leases with {leased_reads} shared-data reads, {} leases, {} store calls",
        host.counter("ratelimit.hot.leases"),
        host.calls_made()
    );
    // Every unit the store counted was admitted, none twice.
    assert_eq!(admitted, 300);
    assert!(leased >= 200, "{leased} of 300 from leases");
    // A leased request reads one shared-data entry: its lease.
    assert_eq!(leased_reads, leased, "{leased_reads} reads for {leased} leased requests");
}

fn a_reload_loses_no_leased_unit_and_admits_none_twice(kind: Kind) {
    let servers = Servers::start(kind);
    let mut host = servers.host(&kind.config(LARGE), 1).start();
    host.advance_to(at(1_000));
    let mut admitted = with_a_lease(&mut host);
    // Hot enough for larger leases, one of them live when the VM is
    // reloaded: its units are in shared data, which the reload keeps.
    for _ in 0..40 {
        admitted += u32::from(host.send(0, as_user("hot")).status == 200);
    }
    host.reload_vm(0);
    for _ in 0..600 {
        admitted += u32::from(host.send(0, as_user("hot")).status == 200);
    }
    eprintln!("{kind:?}: admitted {admitted} of 300 after a reload");
    assert_eq!(admitted, 300, "no unit lost, none admitted twice");
}
