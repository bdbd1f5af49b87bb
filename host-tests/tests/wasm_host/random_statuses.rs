//! Every status for every hostcall the traffic reaches, injected at random
//! (seeded) into many requests over two VMs: the module never traps, and
//! every request ends decided, or paused only when the host took the
//! stream out of the module's hands (see `status_scenario`).

use host_tests::wasm_host::status::ALL;
use host_tests::wasm_host::Times;

use crate::both_transports;
use crate::fixture::{Kind, Servers};
use crate::status_scenario::{config, gist, round};

both_transports!(random_statuses_over_many_requests);

/// Chance that one call of one hostcall gets one given status: with 13
/// statuses, about 1 call in 40 of each hostcall is answered by a status.
const PROBABILITY: f64 = 0.002;

fn random_statuses_over_many_requests(kind: Kind) {
    let servers = Servers::start(kind);
    let mut failures = Vec::new();
    for (run, seed) in [1u64, 0x9e37_79b9].into_iter().enumerate() {
        let mut host = servers.host(&config(kind), 2).record_traps().start();
        let hostcalls = host.hostcalls();
        for (h, hostcall) in hostcalls.iter().enumerate() {
            for status in ALL {
                let seed = seed ^ ((h as u64) << 32) ^ status as u64;
                host.inject_status(hostcall, status, Times::Random { probability: PROBABILITY, seed });
            }
        }
        // 100 rounds of 6 requests, alternating VMs, until a VM fails.
        for n in 0..100u32 {
            let client = 20_000 + 1_000 * run as u32 + 3 * n;
            let (_, wrong) = round(&mut host, (n % 2) as usize, client);
            failures.extend(wrong.into_iter().map(|w| format!("seed {seed}: {w}")));
            if !host.traps().is_empty() {
                break;
            }
        }
        let injected: u64 = hostcalls.iter().map(|h| host.hostcall_count(h).injected).sum();
        assert!(injected > 50 || !host.traps().is_empty(), "seed {seed}: only {injected} statuses injected");
        failures.extend(host.traps().iter().map(|t| format!("seed {seed}: {}", gist(t))));
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}
