//! What happens next, drawn from the seed: one step at a time.

use host_tests::prng::Rng;
use host_tests::wasm_host::Fault;

use crate::rules::{Kind, Rules};

/// Clients (the first ones the busiest).
pub const USERS: usize = 4;
/// Shapes of a response body (`End`'s `shape`): JSON with usage, JSON
/// without, an event stream with usage in its last event, one without.
pub const SHAPES: u64 = 4;

/// One step of a schedule.
#[derive(Clone, Debug)]
pub enum Step {
    /// Request `id` of `user` for rule `rule` on worker `vm` of proxy
    /// `proxy`; `n`: the output bound its body states (`rvt`), `choices`:
    /// the completions it asks for (`rvt`: its body's `n` when above 1);
    /// `trailers`: the request ends with trailers (HTTP/2) after its body
    /// (an empty one for a rule that reads none).
    Begin { id: usize, proxy: usize, vm: usize, rule: usize, user: usize, n: u64, choices: u64, trailers: bool },
    /// Deliver what is due (store replies, timeouts).
    Deliver,
    /// Stream `stream` (a `Begin`'s id; nothing if it is not live) ends:
    /// completed by the upstream if it was let through (its response
    /// reporting `usage` units, a body of shape `shape`), or the client
    /// goes away: before the response (`cut` 0), or after its headers and
    /// `cut - 1` chunks of its body.
    End { stream: usize, hang_up: bool, usage: u64, cut: u64, shape: u64 },
    /// The first regressions' `End`: the `nth` live stream (modulo how
    /// many live) ends, as `End` says.
    EndNth { nth: usize, hang_up: bool, usage: u64 },
    /// The clock moves forward (proxies and store).
    Advance(u64),
    /// The proxies' wall clock steps back (an NTP correction).
    Back(u64),
    /// The store's clock steps back.
    StoreBack(u64),
    /// The store forgets everything (`FLUSHALL`, or an eviction of all).
    Flush,
    /// From now on proxy `proxy`'s store calls meet these faults (none:
    /// the store answers).
    Faults { proxy: usize, mix: Vec<(u32, Fault)> },
    /// Worker `vm`'s VM of proxy `proxy` is reloaded (its streams are gone with it).
    Reload { proxy: usize, vm: usize },
}

/// Draws the steps of one schedule.
pub struct Draw<'a> {
    pub rng: Rng,
    pub proxies: usize,
    pub vms: usize,
    pub webdis: bool,
    /// No faults, reloads, flushes or clock steps back: there every
    /// charge must reach the store exactly, and the model follows the
    /// store throughout.
    pub calm: bool,
    /// Whether the store's clock may step back in this schedule.
    pub store_back: bool,
    /// The rules this schedule sends requests to.
    pub rules: Vec<usize>,
    pub table: &'a Rules,
    /// The host's time so far (ms since the epoch).
    pub now_ms: u64,
    /// The streams begun and not ended: (id, proxy, vm).
    pub live: Vec<(usize, usize, usize)>,
    /// The next `Begin`'s id.
    pub next_id: usize,
    /// Requests of a burst still to come: (client, rule) and how many.
    pub burst: Option<(usize, usize, u64)>,
}

impl Draw<'_> {
    /// The next step.
    pub fn next(&mut self) -> Step {
        let rng = &mut self.rng;
        // A burst: the same client's requests to one rule, back to back.
        let burst = self.burst.take();
        let roll = if burst.is_some() { 0 } else { rng.below(100) };
        let proxy = rng.below(self.proxies as u64) as usize;
        let step = match roll {
            0..=39 => {
                let (user, rule) = match burst {
                    Some((user, rule, left)) => {
                        self.burst = (left > 1).then_some((user, rule, left - 1));
                        (user, rule)
                    }
                    None => {
                        let rule = self.rules[rng.below(self.rules.len() as u64) as usize];
                        let user = rng.below(USERS as u64).min(rng.below(USERS as u64)) as usize;
                        if rng.below(10) < 3 {
                            self.burst = Some((user, rule, 1 + rng.below(4)));
                        }
                        (user, rule)
                    }
                };
                // rvt: large reservations of a bucket of 1000, now and then one of most of it.
                let n = match self.table.get(rule).kind {
                    Kind::ReservedBody if rng.below(4) == 0 => 700 + rng.below(250),
                    Kind::ReservedBody => 50 + rng.below(400),
                    _ => 0,
                };
                // rvt: now and then two or three completions (a worst case
                // past the bucket is capped at it).
                let choices = match self.table.get(rule).kind {
                    Kind::ReservedBody if rng.below(5) == 0 => 2 + rng.below(2),
                    _ => 1,
                };
                let trailers = match self.table.get(rule).kind {
                    Kind::Reserved | Kind::ReservedBody => rng.below(3) == 0,
                    _ => rng.below(10) == 0,
                };
                let (id, vm) = (self.next_id, rng.below(self.vms as u64) as usize);
                self.next_id += 1;
                self.live.push((id, proxy, vm));
                Step::Begin { id, proxy, vm, rule, user, n, choices, trailers }
            }
            40..=53 => Step::Deliver,
            54..=68 if !self.live.is_empty() => {
                let hang_up = rng.below(3) == 0;
                let (stream, _, _) = self.live.swap_remove(rng.below(self.live.len() as u64) as usize);
                Step::End {
                    stream,
                    hang_up,
                    usage: 1 + rng.below(500),
                    cut: if hang_up { rng.below(5) } else { 0 },
                    shape: rng.below(SHAPES),
                }
            }
            54..=68 => Step::Deliver,
            69..=75 => Step::Advance(1 + rng.below(1_500)),
            76..=81 => Step::Advance(1 + rng.below(40)),
            82..=84 => self.past_a_boundary(),
            85 => Step::Advance(1 + self.rng.below(30_000)),
            _ if self.calm => Step::Deliver,
            86..=87 => Step::Back(1 + rng.below(3_000)),
            88 if self.store_back => Step::StoreBack(1 + rng.below(3_000)),
            89..=96 => Step::Faults { proxy, mix: faults(rng, self.webdis) },
            97..=98 => {
                let vm = rng.below(self.vms as u64) as usize;
                self.live.retain(|&(_, p, v)| (p, v) != (proxy, vm));
                Step::Reload { proxy, vm }
            }
            99 => Step::Flush,
            _ => Step::Deliver,
        };
        if let Step::Advance(ms) = step {
            self.now_ms += ms;
        }
        step
    }

    /// A move to just past (or onto) the end of a window, refill period or
    /// slot lifetime of a rule in play: where counts start afresh.
    fn past_a_boundary(&mut self) -> Step {
        let rule = self.table.get(self.rules[self.rng.below(self.rules.len() as u64) as usize]);
        let spec = rule.specs[self.rng.below(rule.specs.len() as u64) as usize];
        // A window (or max_hold); for a bucket, now and then one token's refill.
        let period = match self.rng.below(3) {
            0 => (spec.window_ms / spec.limit.max(1)).max(1),
            _ => spec.window_ms,
        };
        let next = (self.now_ms / period + 1) * period;
        let past = [0, 1, 2, 30, 300][self.rng.below(5) as usize];
        let ms = (next + past - self.now_ms).min(60_000);
        Step::Advance(ms)
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
