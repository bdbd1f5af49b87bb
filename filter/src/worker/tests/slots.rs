//! Concurrency slots on the worker: taken with the decision, released
//! once when the stream ends (however it ends), renewed every third of
//! max_hold while it lives, released when the store admits a decision
//! whose stream is gone, and held in the local share while the store fails.

use super::*;

const LLM: &str = r#"{"name":"llm","key":["header:x-user"],"fleet_size":1,
    "limits":[{"algorithm":"concurrency","limit":2,"max_hold":"3s"}]}"#;

/// The store's answer for one concurrency limit: allowed (or the slot was
/// held), `remaining` slots free.
fn slot(allowed: bool, remaining: i64) -> Answer {
    if allowed {
        ints(&[1, remaining, 0, 0])
    } else {
        ints(&[0, remaining, 0, 1000])
    }
}

/// The op and permit id of the n-th call's only limit (`u`, `r` or `n`).
fn op_of(host: &FakeHost, n: usize) -> (String, String) {
    let body = host.body(n);
    let parts: Vec<&str> = body.split('/').collect();
    // ... H, L, spec, op, amount, permit id, D, shape.
    let at = parts.len() - 5;
    (parts[at].to_string(), parts[at + 2].to_string())
}

fn worker() -> Worker {
    Worker::new(config("", LLM), Instant::from_ms(NOW))
}

#[test]
#[wasm_bindgen_test]
fn a_slot_taken_at_admission_is_released_once_when_the_stream_ends() {
    let host = FakeHost::new();
    let mut w = worker();
    assert_eq!(w.on_request(&host, 1, &user("/", "a")), Action::Pause);
    let (op, id) = op_of(&host, 0);
    assert_eq!(op, "u");
    w.on_answer(&host, host.token(0), slot(true, 1));
    assert_eq!(*host.resumed.borrow(), [1]);
    assert_eq!(host.metrics.get(0, Event::PermitTaken), 1);
    // The response passes: the stream still holds its slot.
    assert!(w.on_response_headers(&host, 1, &NoHeaders, false).is_empty());
    assert_eq!(host.sent.borrow().len(), 1);
    w.on_stream_end(&host, 1);
    assert_eq!(op_of(&host, 1), ("r".to_string(), id));
    w.on_answer(&host, host.token(1), slot(true, 2));
    assert_eq!(host.metrics.get(0, Event::PermitReleased), 1);
    w.on_stream_end(&host, 1);
    assert_eq!(host.sent.borrow().len(), 2, "released once");
    assert_eq!(w.sizes(), (0, 0, 0));
}

#[test]
#[wasm_bindgen_test]
fn each_stream_takes_its_own_slot_and_a_refusal_says_concurrency() {
    let host = FakeHost::new();
    let mut w = worker();
    w.on_request(&host, 1, &user("/", "a"));
    w.on_answer(&host, host.token(0), slot(true, 1));
    w.on_request(&host, 2, &user("/", "a"));
    assert_ne!(op_of(&host, 0).1, op_of(&host, 1).1, "two streams, two slot ids");
    w.on_answer(&host, host.token(1), slot(false, 0));
    let replied = host.replied.borrow();
    let (stream, reply) = &replied[0];
    assert_eq!((*stream, reply.status), (2, 429));
    assert_eq!(reply.body, r#"{"error":"rate_limited","rule":"llm","retry_after":1,"reason":"concurrency"}"#);
    assert!(reply.headers.contains(&("retry-after", "1".into())));
    assert_eq!(host.metrics.get(0, Event::PermitRefused), 1);
    // A refusal is not cached: the next request asks the store again.
    drop(replied);
    w.on_request(&host, 3, &user("/", "a"));
    assert_eq!(host.sent.borrow().len(), 3);
}

#[test]
#[wasm_bindgen_test]
fn a_live_stream_renews_its_slot_every_third_of_max_hold_and_retries_a_failed_renewal() {
    let host = FakeHost::new();
    let mut w = worker();
    assert!(w.tick_period_ms() <= 500, "a sixth of max_hold at most");
    w.on_request(&host, 1, &user("/", "a"));
    let id = op_of(&host, 0).1;
    w.on_answer(&host, host.token(0), slot(true, 1));
    host.now.set(NOW + 999);
    w.on_tick(&host);
    assert_eq!(host.sent.borrow().len(), 1, "not yet due");
    host.now.set(NOW + 1000);
    w.on_tick(&host);
    assert_eq!(op_of(&host, 1), ("n".to_string(), id.clone()));
    host.now.set(NOW + 1500);
    w.on_tick(&host);
    assert_eq!(host.sent.borrow().len(), 2, "one renewal in flight at a time");
    w.on_answer(&host, host.token(1), Answer::Http { status: Some(503), body: Vec::new() });
    assert_eq!(host.metrics.get(0, Event::PermitStoreFailed), 1);
    host.now.set(NOW + 1600);
    w.on_tick(&host);
    assert_eq!(op_of(&host, 2), ("n".to_string(), id.clone()), "a failed renewal is tried again");
    // The store had let it expire (and took it again): counted.
    w.on_answer(&host, host.token(2), ints(&[0, 1, 0, 0]));
    assert_eq!(host.metrics.get(0, Event::PermitExpired), 1);
    // Dated from when the renewal was sent.
    host.now.set(NOW + 2599);
    w.on_tick(&host);
    assert_eq!(host.sent.borrow().len(), 3);
    host.now.set(NOW + 2600);
    w.on_tick(&host);
    assert_eq!(op_of(&host, 3), ("n".to_string(), id));
}

#[test]
#[wasm_bindgen_test]
fn a_slot_taken_for_a_stream_already_gone_is_released_when_the_answer_comes() {
    let host = FakeHost::new();
    let mut w = worker();
    w.on_request(&host, 1, &user("/", "a"));
    let id = op_of(&host, 0).1;
    w.on_stream_end(&host, 1);
    w.on_answer(&host, host.token(0), slot(true, 1));
    assert_eq!(op_of(&host, 1), ("r".to_string(), id));
    // Refused: nothing was taken, nothing to release.
    w.on_request(&host, 2, &user("/", "a"));
    w.on_stream_end(&host, 2);
    w.on_answer(&host, host.token(2), slot(false, 0));
    assert_eq!(host.sent.borrow().len(), 3);
}

#[test]
#[wasm_bindgen_test]
fn while_the_store_fails_an_open_rule_holds_slots_of_the_local_share() {
    let host = FakeHost::new();
    host.fail_send.set(true);
    let mut w = worker();
    assert_eq!(w.on_request(&host, 1, &user("/", "a")), Action::Continue);
    assert_eq!(w.on_request(&host, 2, &user("/", "a")), Action::Continue);
    assert_eq!(w.on_request(&host, 3, &user("/", "a")), Action::Pause);
    assert_eq!(host.replied.borrow()[0].1.status, 429);
    assert_eq!(host.metrics.get(0, Event::PermitTakenLocally), 2);
    w.on_stream_end(&host, 1);
    assert_eq!(host.metrics.get(0, Event::PermitReleased), 1);
    assert_eq!(w.on_request(&host, 4, &user("/", "a")), Action::Continue, "a slot freed locally");
    // Streams never renewed (a reloaded VM's) free the share after max_hold.
    host.now.set(NOW + 3_001);
    let mut fresh = worker();
    assert_eq!(fresh.on_request(&host, 5, &user("/", "a")), Action::Continue);
}

#[test]
#[wasm_bindgen_test]
fn a_stream_ending_while_its_renewal_is_out_is_released_after_the_renewal() {
    let host = FakeHost::new();
    let mut w = worker();
    w.on_request(&host, 1, &user("/", "a"));
    let id = op_of(&host, 0).1;
    w.on_answer(&host, host.token(0), slot(true, 1));
    host.now.set(NOW + 1000);
    w.on_tick(&host);
    assert_eq!(op_of(&host, 1).0, "n");
    w.on_stream_end(&host, 1);
    assert_eq!(host.sent.borrow().len(), 2, "the release waits for the renewal");
    w.on_answer(&host, host.token(1), slot(true, 1));
    assert_eq!(op_of(&host, 2), ("r".to_string(), id));
    w.on_answer(&host, host.token(2), slot(true, 2));
    assert_eq!(host.metrics.get(0, Event::PermitReleased), 1);
    assert_eq!(w.sizes(), (0, 0, 0));
}

#[test]
#[wasm_bindgen_test]
fn a_local_slot_of_a_request_another_rule_refuses_is_given_back_and_counted() {
    let host = FakeHost::new();
    host.fail_send.set(true);
    let closed = r#"{"name":"gate","key":["header:x-user"],"failure_mode":"closed",
        "limits":[{"algorithm":"fixed_window","limit":100,"window":"1m"}]}"#;
    let one = LLM.replace(r#""limit":2"#, r#""limit":1"#);
    let mut w = Worker::new(config("", &format!("{one},{closed}")), Instant::from_ms(NOW));
    for stream in 1..=2 {
        assert_eq!(w.on_request(&host, stream, &user("/", "a")), Action::Pause);
    }
    // Both 503 (the gate fails closed), never a 429: the one local slot was
    // given back each time.
    let statuses: Vec<u32> = host.replied.borrow().iter().map(|(_, r)| r.status).collect();
    assert_eq!(statuses, [503, 503]);
    assert_eq!((host.metrics.get(0, Event::PermitTakenLocally), host.metrics.get(0, Event::PermitReleased)), (2, 2));
}

/// The amount of the n-th call's only limit.
fn amount_of(host: &FakeHost, n: usize) -> String {
    let body = host.body(n);
    let parts: Vec<&str> = body.split('/').collect();
    parts[parts.len() - 4].to_string()
}

#[test]
#[wasm_bindgen_test]
fn a_stream_held_locally_counts_in_the_stores_decisions_until_a_renewal_moves_it_there() {
    let host = FakeHost::new();
    host.fail_send.set(true);
    let mut w = worker();
    assert_eq!(w.on_request(&host, 1, &user("/", "a")), Action::Continue);
    assert_eq!(host.metrics.get(0, Event::PermitTakenLocally), 1);
    // The store is back: a take counts the stream it cannot see.
    host.fail_send.set(false);
    host.now.set(NOW + 500);
    assert_eq!(w.on_request(&host, 2, &user("/", "a")), Action::Pause);
    assert_eq!(op_of(&host, 0).0, "u");
    assert_eq!(amount_of(&host, 0), "2", "this take and the local stream");
    w.on_answer(&host, host.token(0), slot(true, 0));
    // The local slot's renewal, due after a third of max_hold, goes to the store.
    host.now.set(NOW + 1000);
    w.on_tick(&host);
    let (op, local_id) = op_of(&host, 1);
    assert_eq!(op, "n");
    let stored_id = op_of(&host, 0).1;
    assert_ne!(local_id, stored_id);
    assert_eq!(host.sent.borrow().len(), 2, "stream 2's renewal is not due yet");
    w.on_answer(&host, host.token(1), ints(&[0, 0, 0, 0]));
    assert_eq!(host.metrics.get(0, Event::PermitExpired), 0, "a move is no expiry");
    // In the store now: a take counts itself alone, and the stream's end
    // releases it there.
    assert_eq!(w.on_request(&host, 3, &user("/", "a")), Action::Pause);
    assert_eq!(amount_of(&host, 2), "1");
    w.on_stream_end(&host, 1);
    assert_eq!(op_of(&host, 3), ("r".to_string(), local_id));
}

#[test]
#[wasm_bindgen_test]
fn a_local_stream_that_ends_while_it_moves_is_released_from_the_store_once() {
    let host = FakeHost::new();
    host.fail_send.set(true);
    let mut w = worker();
    assert_eq!(w.on_request(&host, 1, &user("/", "a")), Action::Continue);
    host.fail_send.set(false);
    host.now.set(NOW + 1000);
    w.on_tick(&host);
    let (op, id) = op_of(&host, 0);
    assert_eq!(op, "n");
    w.on_stream_end(&host, 1);
    assert_eq!(host.metrics.get(0, Event::PermitReleased), 1, "given back to the local share at once");
    assert_eq!(host.sent.borrow().len(), 1);
    w.on_answer(&host, host.token(0), ints(&[0, 1, 0, 0]));
    assert_eq!(op_of(&host, 1), ("r".to_string(), id), "then released from the store");
    w.on_answer(&host, host.token(1), slot(true, 2));
    assert_eq!(host.sent.borrow().len(), 2);
    assert_eq!(w.sizes(), (0, 0, 0));
}

#[test]
#[wasm_bindgen_test]
fn a_slot_taken_by_a_decision_that_answered_is_released_when_the_stream_ends_before_the_others() {
    // Two identities, one call each: the slot's decision answers first.
    let gate =
        r#"{"name":"gate","key":["header:x-gate"],"limits":[{"algorithm":"fixed_window","limit":5,"window":"1m"}]}"#;
    let host = FakeHost::new();
    let mut w = Worker::new(config(r#","batch":{"max_decisions":1}"#, &format!("{LLM},{gate}")), Instant::from_ms(NOW));
    let req = user("/", "a").with("x-gate", "g");
    assert_eq!(w.on_request(&host, 1, &req), Action::Pause);
    assert_eq!(host.sent.borrow().len(), 2, "one call per decision");
    let (op, id) = op_of(&host, 0);
    assert_eq!(op, "u");
    w.on_answer(&host, host.token(0), slot(true, 1));
    // The client leaves while the gate's decision is out.
    w.on_stream_end(&host, 1);
    assert_eq!(op_of(&host, 2), ("r".to_string(), id), "released at once");
    w.on_answer(&host, host.token(1), ints(&[1, 4, 60_000, 0]));
    w.on_answer(&host, host.token(2), slot(true, 2));
    assert_eq!(host.sent.borrow().len(), 3, "released once");
    assert_eq!(host.metrics.get(0, Event::PermitReleased), 1);
    assert_eq!(w.sizes(), (0, 0, 0));
}

#[test]
#[wasm_bindgen_test]
fn a_slot_whose_answer_was_lost_is_released_in_case_the_script_ran() {
    let host = FakeHost::new();
    let mut w = worker();
    assert_eq!(w.on_request(&host, 1, &user("/", "a")), Action::Pause);
    let id = op_of(&host, 0).1;
    // Envoy's 504: the call timed out, and Redis may have taken the slot.
    w.on_answer(&host, host.token(0), Answer::Http { status: Some(504), body: Vec::new() });
    assert_eq!(*host.resumed.borrow(), [1], "fail open: the local share admits");
    assert_eq!(op_of(&host, 1), ("r".to_string(), id));
    // A stream gone before its lost answer: the same.
    assert_eq!(w.on_request(&host, 2, &user("/", "b")), Action::Pause);
    let id = op_of(&host, 2).1;
    w.on_stream_end(&host, 2);
    w.on_answer(&host, host.token(2), Answer::Http { status: Some(504), body: Vec::new() });
    assert_eq!(op_of(&host, 3), ("r".to_string(), id));
}
