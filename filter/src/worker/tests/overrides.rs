//! The index of overrides as the worker polls it: a decision reads its
//! client's overrides only when the index names one of its rules, or
//! while the index is unknown, failed or older than `within`.

use super::*;
use crate::identity::digest;
use crate::keys::override_key;
use crate::store::override_index::{MAX_INDEX_BYTES, MAX_MEMBERS};

const OVERRIDES: &str = r#"},"overrides":{"within":"1s""#;

/// The override keys the n-th call reads (its keys, decoded).
fn read(host: &FakeHost, n: usize) -> Vec<String> {
    let body = host.body(n);
    let parts: Vec<&str> = body.split('/').collect();
    assert_eq!(parts[0], "EVALSHA", "{body}");
    let keys: usize = parts[2].parse().unwrap();
    let keys = parts[3..3 + keys].iter().map(|k| String::from_utf8(crate::percent::decode(k.as_bytes(), false)));
    keys.map(Result::unwrap).filter(|k| k.ends_with(":override")).collect()
}

/// webdis's answer to SMEMBERS with these members.
fn members(members: &[&str]) -> Answer {
    let list: Vec<String> = members.iter().map(|m| format!("{m:?}")).collect();
    Answer::Http { status: Some(200), body: format!(r#"{{"SMEMBERS":[{}]}}"#, list.join(",")).into_bytes() }
}

fn key(u: &str) -> String {
    override_key("t", &digest(u), "api")
}

/// Sends `u`'s request as stream `s`, answers it; the override keys its call read.
fn decide(w: &mut Worker, host: &FakeHost, s: u32, u: &str) -> Vec<String> {
    let call = host.sent.borrow().len();
    assert_eq!(w.on_request(host, s, &user("/api", u)), Action::Pause);
    assert_eq!(host.sent.borrow().len(), call + 1, "one call");
    w.on_answer(host, host.token(call), ints(&ALLOW));
    assert_eq!(host.resumed.borrow().last(), Some(&s));
    read(host, call)
}

/// Ticks at `at` (ms after NOW); the poll it sent, if any: its call's index.
fn tick(w: &mut Worker, host: &FakeHost, at: u64) -> Option<usize> {
    host.now.set(NOW + at);
    let call = host.sent.borrow().len();
    w.on_tick(host);
    match host.sent.borrow().len() - call {
        0 => None,
        1 => Some(call),
        n => panic!("{n} calls from one tick"),
    }
}

#[test]
#[wasm_bindgen_test]
fn only_a_client_the_index_names_reads_its_override_once_the_index_answered() {
    let host = FakeHost::new();
    let mut w = Worker::new(config(OVERRIDES, API), Instant::from_ms(NOW));
    assert!(w.tick_period_ms() <= 250, "a quarter of within: {}", w.tick_period_ms());
    // The first tick polls: SMEMBERS of the domain's index, through webdis.
    let poll = tick(&mut w, &host, 0).unwrap();
    assert_eq!(
        host.sent.borrow()[poll].1,
        Wire::Http { method: "POST", path: "/", body: b"SMEMBERS/t%3Aoverrides".to_vec() }
    );
    assert_eq!(tick(&mut w, &host, 10), None, "one poll at a time");
    // Not answered yet: every decision reads, as without the index.
    assert_eq!(decide(&mut w, &host, 1, "alice"), [key("alice")]);
    assert_eq!(decide(&mut w, &host, 2, "bob"), [key("bob")]);
    assert_eq!(w.max_answer_bytes(host.token(poll)), MAX_INDEX_BYTES);
    w.on_answer(&host, host.token(poll), members(&[]));
    // An empty index: nobody reads.
    assert_eq!(decide(&mut w, &host, 3, "alice"), Vec::<String>::new());
    // The next poll half of within after the last.
    assert_eq!(tick(&mut w, &host, 499), None);
    let poll = tick(&mut w, &host, 500).unwrap();
    w.on_answer(&host, host.token(poll), members(&[&key("alice"), "t:{x}:other:override"]));
    assert_eq!(decide(&mut w, &host, 4, "alice"), [key("alice")]);
    assert_eq!(decide(&mut w, &host, 5, "bob"), Vec::<String>::new());
    // A poll in flight while the index ages: fresh until within after its
    // poll was sent (NOW + 500), then every decision reads.
    let stuck = tick(&mut w, &host, 1_000).unwrap();
    host.now.set(NOW + 1_500);
    assert_eq!(decide(&mut w, &host, 6, "bob"), Vec::<String>::new(), "at the bound");
    host.now.set(NOW + 1_501);
    assert_eq!(decide(&mut w, &host, 7, "bob"), [key("bob")], "past it");
    // Answered late: fresh again from when it was sent (NOW + 1000). The
    // next request finds a poll due: it goes first.
    w.on_answer(&host, host.token(stuck), members(&[]));
    let call = host.sent.borrow().len();
    w.on_request(&host, 8, &user("/api", "bob"));
    assert_eq!(host.body(call), "SMEMBERS/t%3Aoverrides");
    assert_eq!(read(&host, call + 1), Vec::<String>::new());
    w.on_answer(&host, host.token(call + 1), ints(&ALLOW));
    // That poll refused by webdis's ACL: every decision reads.
    w.on_answer(&host, host.token(call), Answer::Http { status: Some(403), body: Vec::new() });
    assert_eq!(decide(&mut w, &host, 9, "bob"), [key("bob")]);
    assert!(host.warnings.borrow().is_empty(), "{:?}", host.warnings.borrow());
}

#[test]
#[wasm_bindgen_test]
fn an_unanswered_poll_is_forgotten_after_the_store_timeout_and_polled_again() {
    let host = FakeHost::new();
    let mut w = Worker::new(config(OVERRIDES, API), Instant::from_ms(NOW));
    let poll = tick(&mut w, &host, 0).unwrap();
    w.on_answer(&host, host.token(poll), members(&[]));
    let lost = tick(&mut w, &host, 500).unwrap();
    let deadline = w.config().store.timeout.ms() + UNANSWERED_GRACE_MS;
    assert_eq!(tick(&mut w, &host, 500 + deadline), None, "still waited for");
    let again = tick(&mut w, &host, 501 + deadline).expect("forgotten, polled again");
    // The lost poll's answer is no one's now; the new one's counts.
    w.on_answer(&host, host.token(lost), members(&[&key("bob")]));
    assert_eq!(decide(&mut w, &host, 1, "bob"), [key("bob")], "unknown until the new poll answers");
    w.on_answer(&host, host.token(again), members(&[]));
    assert_eq!(decide(&mut w, &host, 2, "bob"), Vec::<String>::new());
}

#[test]
#[wasm_bindgen_test]
fn without_overrides_nothing_is_polled_and_nothing_read() {
    let host = FakeHost::new();
    let mut w = Worker::new(config("", API), Instant::from_ms(NOW));
    for at in [0, 500, 1_000, 60_000] {
        host.now.set(NOW + at);
        w.on_tick(&host);
    }
    let polls = host
        .sent
        .borrow()
        .iter()
        .filter(|(_, wire)| matches!(wire, Wire::Http { body, .. } if body.starts_with(b"SMEMBERS")))
        .count();
    assert_eq!(polls, 0);
    assert_eq!(decide(&mut w, &host, 1, "alice"), Vec::<String>::new());
}

#[test]
#[wasm_bindgen_test]
fn hostile_index_replies_make_every_decision_read() {
    let many: Vec<String> = (0..=MAX_MEMBERS).map(|i| format!("\"{i}\"")).collect();
    let replies: Vec<Vec<u8>> = vec![
        br#"{"SMEMBERS":"a"}"#.to_vec(),
        br#"{"SMEMBERS":{"a":"b"}}"#.to_vec(),
        br#"{"SMEMBERS":[1,2]}"#.to_vec(),
        br#"{"SMEMBERS":[false,"NOPERM no permissions"]}"#.to_vec(),
        br#"{"GET":[]}"#.to_vec(),
        b"{\"SMEMBERS\":[\"\xff\"]}".to_vec(),
        b"[".to_vec(),
        format!(r#"{{"SMEMBERS":[{}]}}"#, many.join(",")).into_bytes(),
    ];
    for body in replies {
        let host = FakeHost::new();
        let mut w = Worker::new(config(OVERRIDES, API), Instant::from_ms(NOW));
        let poll = tick(&mut w, &host, 0).unwrap();
        w.on_answer(&host, host.token(poll), members(&[]));
        let poll = tick(&mut w, &host, 500).unwrap();
        w.on_answer(&host, host.token(poll), Answer::Http { status: Some(200), body: body.clone() });
        assert_eq!(
            decide(&mut w, &host, 1, "bob"),
            [key("bob")],
            "{}",
            String::from_utf8_lossy(&body[..body.len().min(40)])
        );
    }
}

#[test]
#[wasm_bindgen_test]
fn a_due_poll_goes_with_a_request_when_the_timer_is_late() {
    let host = FakeHost::new();
    let mut w = Worker::new(config(OVERRIDES, API), Instant::from_ms(NOW));
    let call = host.sent.borrow().len();
    w.on_request(&host, 1, &user("/api", "alice"));
    assert_eq!(host.body(call), "SMEMBERS/t%3Aoverrides", "the first poll, before the decision");
    w.on_answer(&host, host.token(call), members(&[]));
    w.on_answer(&host, host.token(call + 1), ints(&ALLOW));
    host.now.set(NOW + 499);
    assert_eq!(decide(&mut w, &host, 2, "alice"), Vec::<String>::new(), "no poll due");
    host.now.set(NOW + 500);
    let call = host.sent.borrow().len();
    w.on_request(&host, 3, &user("/api", "alice"));
    assert_eq!(host.body(call), "SMEMBERS/t%3Aoverrides");
    assert_eq!(read(&host, call + 1), Vec::<String>::new());
}

#[test]
#[wasm_bindgen_test]
fn a_pinned_host_polls_on_the_timer_only() {
    let host = FakeHost::new();
    let mut w = Worker::new(config(OVERRIDES, API), Instant::from_ms(NOW));
    w.pin_calls_to_streams();
    assert!(w.tick_period_ms() <= 250, "set once: at most a quarter of within");
    // A request's call carries its decision only (its answer comes back in
    // that request's context).
    assert_eq!(decide(&mut w, &host, 1, "alice"), [key("alice")]);
    let poll = tick(&mut w, &host, 0).unwrap();
    assert_eq!(host.body(poll), "SMEMBERS/t%3Aoverrides");
    w.on_answer(&host, host.token(poll), members(&[]));
    host.now.set(NOW + 600);
    assert_eq!(decide(&mut w, &host, 2, "alice"), Vec::<String>::new(), "a poll due, not sent with it");
}

#[test]
#[wasm_bindgen_test]
fn a_client_the_index_does_not_name_sends_the_call_it_would_without_overrides() {
    let (on, off) = (FakeHost::new(), FakeHost::new());
    let mut with = Worker::new(config(OVERRIDES, API), Instant::from_ms(NOW));
    let mut without = Worker::new(config("", API), Instant::from_ms(NOW));
    let poll = tick(&mut with, &on, 0).unwrap();
    with.on_answer(&on, on.token(poll), members(&[&key("alice")]));
    let call = on.sent.borrow().len();
    decide(&mut with, &on, 1, "bob");
    decide(&mut without, &off, 1, "bob");
    assert_eq!(on.sent.borrow()[call].1, off.sent.borrow()[0].1, "byte for byte");
}
