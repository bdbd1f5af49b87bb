//! Faults a test injects into store calls. Each dispatched call takes the
//! next fault from a queue, or else one drawn from a seeded weighted mix,
//! or else the standing fault, or else none.
//!
//! `Pass`, `Delay` and the faults of the callback itself (`Twice`,
//! `SizeOverclaim`, `BodyStatus`) reach the real store (the command runs
//! when it is dispatched, as with a real proxy); every other fault stands
//! in for the store, so the command never runs.

use std::collections::VecDeque;

use super::header_map::HeaderMap;
use crate::prng::Rng;

/// What happens to one store call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// No fault: the real store answers, delivered as soon as the test
    /// runs the host (`run_until_idle`).
    Pass,
    /// The real store answers, but the reply arrives `ms` after dispatch;
    /// the call's timeout still applies (a reply later than the timeout is
    /// never seen, the timeout is).
    Delay(u64),
    /// The store never answers: only the call's timeout fires, when the
    /// test advances the clock to its deadline (HTTP 504 / Redis status 1).
    Drop,
    /// The host never calls back at all, not even at the timeout (a host
    /// that loses the call). The stream waits until the client leaves.
    NoCallback,
    /// The call times out at once: HTTP 504 (Envoy's "upstream request
    /// timeout") / Redis status 1.
    Timeout,
    /// The connection fails: HTTP 503 (Envoy's "upstream connect error")
    /// / Redis status 1 with no reply.
    ConnectFailure,
    /// A Redis error reply with this text: `-<text>` over RESP, or webdis's
    /// `{"<COMMAND>":[false,"<text>"]}` with HTTP 200.
    Error(String),
    /// These exact reply bytes: RESP for the Redis transport (status 0),
    /// the body of an HTTP 200 for webdis.
    Raw(Vec<u8>),
    /// An HTTP reply with this status and body (webdis only).
    Http(u32, Vec<u8>),
    /// An HTTP reply with exactly these headers (no `:status`, or any bytes
    /// in it) and this body (webdis only).
    HttpReply(HeaderMap, Vec<u8>),
    /// The HTTP call fails, before or after the response headers (a reset,
    /// a body cut short, a stall past the timeout once headers came): as
    /// Envoy does, the callback gets no headers and no body, and neither
    /// the response map nor the body exists during it (webdis only).
    Reset,
    /// The real store answers and the callback is delivered twice, with
    /// the same token.
    Twice,
    /// The real store answers, but the callback claims this many bytes more
    /// than the reply holds (`body_size` / `response_size`); reading the
    /// buffer gives what exists, as proxy-wasm-cpp-host clips it.
    SizeOverclaim(u32),
    /// The real store answers and the callback says how big the reply is,
    /// but reading it (`proxy_get_buffer_bytes`, buffer 4 or 9) answers this
    /// status.
    BodyStatus(i32),
    /// The dispatch hostcall itself returns this status (2 BadArgument, 10
    /// InternalFailure, or anything else to see how the module copes).
    DispatchStatus(i32),
}

impl Fault {
    /// Whether the command reaches the real store.
    pub fn reaches_store(&self) -> bool {
        matches!(self, Fault::Pass | Fault::Delay(_) | Fault::Twice | Fault::SizeOverclaim(_) | Fault::BodyStatus(_))
    }
}

/// The faults still to apply.
#[derive(Debug, Default)]
pub struct FaultPlan {
    queue: VecDeque<Fault>,
    mix: Option<(Rng, Vec<(u32, Fault)>)>,
    standing: Option<Fault>,
}

impl FaultPlan {
    /// Queues faults for the next calls, in order.
    pub fn push(&mut self, faults: impl IntoIterator<Item = Fault>) {
        self.queue.extend(faults);
    }

    /// Sets (or with `None` clears) the fault of every call once the queue is empty.
    pub fn set_standing(&mut self, fault: Option<Fault>) {
        self.standing = fault;
    }

    /// Draws the fault of every call once the queue is empty from `mix`
    /// (weight, fault), with a generator seeded by `seed`; an empty mix
    /// clears it.
    pub fn set_mix(&mut self, seed: u64, mix: Vec<(u32, Fault)>) {
        self.mix = (!mix.is_empty()).then(|| (Rng::new(seed), mix));
    }

    /// Forgets every fault.
    pub fn clear(&mut self) {
        self.queue.clear();
        self.mix = None;
        self.standing = None;
    }

    /// The fault of the next call.
    pub fn take_next(&mut self) -> Fault {
        if let Some(f) = self.queue.pop_front() {
            return f;
        }
        if let Some((rng, mix)) = &mut self.mix {
            let total: u64 = mix.iter().map(|(w, _)| u64::from(*w)).sum();
            let mut pick = rng.below(total.max(1));
            for (w, f) in mix.iter() {
                if pick < u64::from(*w) {
                    return f.clone();
                }
                pick -= u64::from(*w);
            }
        }
        self.standing.clone().unwrap_or(Fault::Pass)
    }

    /// Faults queued and not yet used.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }
}
