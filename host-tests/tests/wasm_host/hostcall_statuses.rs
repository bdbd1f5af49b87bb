//! Every status the ABI defines (proxy-wasm 0.2.1 `WasmResult`, 0 to 12),
//! returned once by every hostcall the module calls, instead of its work:
//! first at the hostcall's first call (configuration time for some), then
//! at its first call in later traffic. The module never traps, and every
//! request ends decided, or paused only when the host took the stream out
//! of the module's hands (see `status_scenario`).
//!
//! Hostcalls the module imports but never calls in this traffic (gRPC,
//! queues, ...) cannot be reached and are listed, not run.

use host_tests::wasm_host::status::{name, ALL};
use host_tests::wasm_host::{Host, Times};

use crate::both_transports;
use crate::fixture::{Kind, Servers};
use crate::status_scenario::{config, gist, round, CLEAN_ROUND};

both_transports!(every_status_of_every_hostcall_once);

/// The hostcalls the traffic reaches, by a run without injections.
fn reached(servers: &Servers, kind: Kind) -> Vec<String> {
    let mut host = servers.host(&config(kind), 1).start();
    assert_eq!(round(&mut host, 0, 1), (CLEAN_ROUND.to_vec(), vec![]));
    assert_eq!(round(&mut host, 0, 4), (CLEAN_ROUND.to_vec(), vec![]));
    let (reached, never): (Vec<String>, Vec<String>) =
        host.hostcalls().into_iter().partition(|h| host.hostcall_count(h).calls > 0);
    eprintln!("{kind:?}: hostcalls reached: {reached:?}; imported, never called: {never:?}");
    reached
}

fn every_status_of_every_hostcall_once(kind: Kind) {
    let servers = Servers::start(kind);
    let mut failures = Vec::new();
    let mut client = 10;
    for hostcall in reached(&servers, kind) {
        for status in ALL {
            let mut host: Host =
                servers.host(&config(kind), 1).status(&hostcall, status, Times::Next(1)).record_traps().start();
            let (_, mut wrong) = round(&mut host, 0, client);
            host.inject_status(&hostcall, status, Times::Next(1));
            wrong.extend(round(&mut host, 0, client + 3).1);
            client += 6;
            wrong.extend(host.traps().iter().map(|t| gist(t)));
            failures.extend(wrong.into_iter().map(|w| format!("{hostcall} -> {status} {}: {w}", name(status))));
        }
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}
