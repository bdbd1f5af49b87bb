//! What happens next, drawn from the seed: one step at a time.

use host_tests::prng::Rng;
use host_tests::wasm_host::Fault;

/// The rules of the simulated configuration, by path.
/// (`ccx` takes a `cc` slot and is refused by a rule of its own.)
pub const RULES: [&str; 9] = ["fw", "tb", "cc", "co", "sl", "gc", "tk", "ccx", "rv"];
/// Clients (the first ones the busiest).
pub const USERS: usize = 4;

/// One step of a schedule.
#[derive(Clone, Debug)]
pub enum Step {
    /// A request of `user` for rule `rule` on worker `vm` of proxy `proxy`.
    Begin { proxy: usize, vm: usize, rule: usize, user: usize },
    /// Deliver what is due (store replies, timeouts).
    Deliver,
    /// The `nth` live stream (modulo how many live) ends: completed by the
    /// upstream if it was let through (its response reporting `usage`
    /// units), or the client goes away.
    End { nth: usize, hang_up: bool, usage: u64 },
    /// The proxies' clock moves forward.
    Advance(u64),
    /// The proxies' clock steps back (an NTP correction).
    Back(u64),
    /// The store forgets everything (`FLUSHALL`, or an eviction of all).
    Flush,
    /// From now on proxy `proxy`'s store calls meet these faults (none:
    /// the store answers).
    Faults { proxy: usize, mix: Vec<(u32, Fault)> },
    /// Worker `vm`'s VM of proxy `proxy` is reloaded (its streams are gone with it).
    Reload { proxy: usize, vm: usize },
}

/// Draws the next step for `proxies` proxies of `vms` workers each. A
/// `calm` schedule has no faults, reloads or flushes: there every charge
/// must reach the store exactly.
pub fn next(rng: &mut Rng, proxies: usize, vms: usize, webdis: bool, calm: bool) -> Step {
    let roll = rng.below(100);
    let proxy = rng.below(proxies as u64) as usize;
    match roll {
        0..=39 => Step::Begin {
            proxy,
            vm: rng.below(vms as u64) as usize,
            rule: rng.below(RULES.len() as u64) as usize,
            user: rng.below(USERS as u64).min(rng.below(USERS as u64)) as usize,
        },
        40..=54 => Step::Deliver,
        55..=69 => {
            Step::End { nth: rng.below(1 << 16) as usize, hang_up: rng.below(3) == 0, usage: 1 + rng.below(500) }
        }
        70..=77 => Step::Advance(1 + rng.below(1_500)),
        78..=85 => Step::Advance(1 + rng.below(40)),
        86..=87 => Step::Back(1 + rng.below(3_000)),
        _ if calm => Step::Deliver,
        88..=96 => Step::Faults { proxy, mix: faults(rng, webdis) },
        97..=98 => Step::Reload { proxy, vm: rng.below(vms as u64) as usize },
        _ => Step::Flush,
    }
}

/// A fault regime: half the time a healthy store; else a mix of delays
/// (past the 25 ms timeout too, so replies come back out of order or not
/// at all), lost calls, timeouts, refused connections, error replies,
/// replies delivered twice and (webdis) calls reset mid-answer.
fn faults(rng: &mut Rng, webdis: bool) -> Vec<(u32, Fault)> {
    if rng.below(2) == 0 {
        return Vec::new();
    }
    let mut mix = vec![
        (4, Fault::Pass),
        (3, Fault::Delay(rng.below(60))),
        (1, Fault::Drop),
        (1, Fault::Timeout),
        (1, Fault::ConnectFailure),
        (1, Fault::Error("ERR simulated".into())),
        (1, Fault::Twice),
    ];
    if webdis {
        mix.push((1, Fault::Reset));
    }
    // A regime of one kind only, sometimes: the store down for a while.
    if rng.below(4) == 0 {
        let i = rng.below(mix.len() as u64) as usize;
        return vec![mix.swap_remove(i)];
    }
    mix
}
