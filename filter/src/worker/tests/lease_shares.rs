//! No proxy leases more than half of what the store said remains, its
//! first lease included: for any fleet, `max_units`, cost and remaining
//! counts, each lease is exactly min(the client's pace, `max_units`,
//! remaining ÷ cost ÷ (2 × fleet_size)) requests of the tightest limit,
//! counted by the requests it admits without a store call.

use proptest::prelude::*;

use super::*;
use crate::lease::HOT_AFTER;

/// An allowed limit with `remaining` left, resetting in `reset` ms.
fn allow(remaining: u64, reset: i64) -> [i64; 4] {
    [1, remaining as i64, reset, 0]
}

/// Two windowed limits, far above what the tests spend.
fn rule(fleet: u64, max_units: u64, cost: u64) -> String {
    format!(
        r#"{{"name":"hot","match":{{"path_prefix":"/api"}},"key":["header:x-user"],"fleet_size":{fleet},"cost":{cost},
            "lease":{{"max_units":{max_units},"max_age":"1s"}},
            "limits":[{{"algorithm":"fixed_window","limit":1000000,"window":"1m"}},
                      {{"algorithm":"sliding_window","limit":1000000,"window":"1h"}}]}}"#
    )
}

/// The store's answer to call `call`: each decision it carries allowed,
/// the request's with `request` left, a lease's with `lease` left.
fn answer(host: &FakeHost, w: &mut Worker, call: usize, request: (u64, u64), lease: (u64, u64)) {
    let mut values = [allow(request.0, 40_000), allow(request.1, 3_000_000)].concat();
    if host.decisions_in(call) == 2 {
        values.extend([allow(lease.0, 40_000), allow(lease.1, 3_000_000)].concat());
    }
    w.on_answer(host, host.token(call), ints(&values));
}

/// Requests of client "a" admitted without a store call from stream
/// `first` on, until one goes to the store: its call's index.
fn spend(host: &FakeHost, w: &mut Worker, first: u32) -> (u64, usize) {
    let mut leased = 0;
    loop {
        let call = host.sent.borrow().len();
        match w.on_request(host, first + leased as u32, &user("/api", "a")) {
            Action::Continue => leased += 1,
            _ => return (leased, call),
        }
    }
}

/// The requests one lease may hold: `pace`, `max_units`, and the share
/// of the tightest limit's `left`.
fn lease_of(pace: u64, max_units: u64, cost: u64, fleet: u64, left: (u64, u64)) -> u64 {
    let share = (left.0 / cost).min(left.1 / cost) / (2 * fleet);
    pace.min(max_units).min(share)
}

proptest! {
    #[test]
    fn a_lease_is_never_more_than_half_of_what_the_store_said_remains(
        fleet in 1u64..=6,
        max_units in 1u64..=40,
        cost in 1u64..=4,
        view in (0u64..=400, 0u64..=400),
        granted in (0u64..=400, 0u64..=400),
    ) {
        let host = FakeHost::new();
        let mut w = Worker::new(config(r#","batch":{"max_in_flight":1}"#, &rule(fleet, max_units, cost)), Instant::from_ms(NOW));
        // Cold, then hot with no view: each request one decision; the last
        // answer is the view the first lease is sized by.
        for s in 0..HOT_AFTER as u32 {
            let call = host.sent.borrow().len();
            prop_assert_eq!(w.on_request(&host, s, &user("/api", "a")), Action::Pause);
            prop_assert_eq!(host.decisions_in(call), 1);
            answer(&host, &mut w, call, view, (0, 0));
        }
        // The first lease: asked with the next request (its pace: 5).
        let call = host.sent.borrow().len();
        prop_assert_eq!(w.on_request(&host, 100, &user("/api", "a")), Action::Pause);
        let first = lease_of(HOT_AFTER + 1, max_units, cost, fleet, view);
        prop_assert_eq!(host.decisions_in(call), if first > 0 { 2 } else { 1 });
        answer(&host, &mut w, call, view, granted);
        let (leased, call) = spend(&host, &mut w, 200);
        prop_assert_eq!(leased, first);
        prop_assert!(2 * leased * cost <= view.0.min(view.1), "more than half of what remained");
        if first == 0 {
            return Ok(());
        }
        // Spent at once (a pace past any cap): the next lease is sized by
        // what the store said remains after the first.
        let second = lease_of(u64::MAX, max_units, cost, fleet, granted);
        prop_assert_eq!(host.decisions_in(call), if second > 0 { 2 } else { 1 });
        answer(&host, &mut w, call, granted, granted);
        let (leased, _) = spend(&host, &mut w, 400);
        prop_assert_eq!(leased, second);
        prop_assert!(2 * leased * cost <= granted.0.min(granted.1), "more than half of what remained");
    }
}
