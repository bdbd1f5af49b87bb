//! What reached the store, read back from the calls the proxies made
//! (`host_tests::store_decisions`), in the order the store ran them: each
//! request's decision matched to its stream, the reference model fed every
//! decision at the instants the store decided it, and the uses of each
//! limit the bounds are checked against.

use std::collections::BTreeMap;

use host_tests::store_decisions::{decode, StoredDecision};
use host_tests::wasm_host::Call;
use ratelimit::model::Model;
use ratelimit::outcome::LimitOutcome;
use ratelimit::spec::{Mark, Op};

/// One request-time decision of a stream, as the store got it.
#[derive(Clone, Debug)]
pub struct Decided {
    /// The rule it decided.
    pub rule: usize,
    /// The host call that carried it.
    pub call: u64,
    /// Its place among every decision the store ran (across the proxies).
    pub seq: u64,
    /// The caller's clock it was sent with.
    pub caller_ms: u64,
    /// The store's clock when it ran.
    pub store_ms: u64,
    /// How far the store's clock had moved forward in all (its steps back
    /// not taken off): the bounds' clock for the algorithms on store time.
    pub travel_ms: u64,
    /// The flushes before it.
    pub epoch: u32,
    /// Whether the command ran in the store.
    pub reached: bool,
    /// Whether the module got the store's reply (unknown until answered).
    pub answered: Option<bool>,
    /// The model's outcome per limit (while the model follows the store).
    pub model: Option<Vec<LimitOutcome>>,
    /// Its limits and ops as sent.
    pub decision: StoredDecision,
}

/// After-the-fact ops the store ran, per (identity, rule): refunds and
/// charges of reservations, summed.
#[derive(Clone, Debug, Default)]
pub struct Settlements {
    /// Units refunded (op `f`).
    pub refunded: u64,
    /// Units charged (op `g`).
    pub charged: u64,
    /// The host time of the last one.
    pub last_host_ms: u64,
    /// Each refund: the store's clock when it ran, and its units.
    pub refunds: Vec<(u64, u64)>,
}

/// The store as the calls show it.
pub struct Ledger {
    /// The model, while it follows the store (it cannot once the store's
    /// clock stepped back: keys expired on the way are gone in Redis and
    /// kept by the model).
    pub model: Option<Model>,
    /// Settlements per (identity, rule name).
    pub settled: BTreeMap<(String, String), Settlements>,
    /// The last request-time decision's limits per (identity, rule name):
    /// what a cached refusal is checked against.
    pub last: BTreeMap<(String, String), StoredDecision>,
    /// Request-time decisions recorded so far.
    recorded: u64,
}

impl Ledger {
    pub fn new() -> Ledger {
        Ledger { model: Some(Model::new()), settled: BTreeMap::new(), last: BTreeMap::new(), recorded: 0 }
    }

    /// The store forgot everything: so does the model.
    pub fn flush(&mut self) {
        if let Some(m) = &mut self.model {
            *m = Model::new();
        }
    }

    /// Takes one store call, dispatched when the store's clock read
    /// `store_ms` (`travel_ms` in all): feeds the model what it asked,
    /// sums its settlements, and returns its request-time decisions (for
    /// `rule` to tell their rules by name).
    pub fn record(
        &mut self,
        call: &Call,
        store_ms: u64,
        travel_ms: u64,
        epoch: u32,
        rule: impl Fn(&str) -> Option<usize>,
    ) -> Vec<Decided> {
        if call.request.command() != "EVALSHA" {
            return Vec::new();
        }
        let stored = decode(&call.request.args()).unwrap_or_else(|e| panic!("a store call that does not decode: {e}"));
        let reached = call.fault.reaches_store();
        let mut out = Vec::new();
        for d in stored.decisions {
            let model = match (&mut self.model, reached) {
                (Some(m), true) => {
                    let limits = d.limit_calls();
                    let outcomes = m.decide(stored.now_ms, store_ms, &d.call(&limits));
                    // An admitted reservation's reply carries its mark: the
                    // outcome it stands for is what the module shows.
                    let shown = limits.iter().zip(outcomes).map(|(l, o)| match l.op {
                        Op::Reserve(_) => Mark::of(&l.spec, &o).map_or(o, |(o, _)| o),
                        _ => o,
                    });
                    Some(shown.collect())
                }
                _ => None,
            };
            let key = (d.identity.clone(), d.limits[0].rule.clone());
            if !d.at_request() {
                if reached {
                    let s = self.settled.entry(key).or_default();
                    for l in &d.limits {
                        match l.op {
                            Op::Refund { amount, .. } => {
                                s.refunded += amount;
                                s.refunds.push((store_ms, amount));
                            }
                            Op::Charge(amount) => s.charged += amount,
                            _ => {}
                        }
                    }
                    s.last_host_ms = call.dispatched_ms;
                }
                continue;
            }
            let Some(r) = rule(&key.1) else { continue };
            self.last.insert(key, d.clone());
            self.recorded += 1;
            out.push(Decided {
                rule: r,
                call: call.id,
                seq: self.recorded,
                caller_ms: stored.now_ms,
                store_ms,
                travel_ms,
                epoch,
                reached,
                answered: None,
                model,
                decision: d,
            });
        }
        out
    }
}
