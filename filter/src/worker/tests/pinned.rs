//! A host that ignores `proxy_set_effective_context` (NGINX): each
//! request's decisions go out in a call of their own, from its own
//! callback; what belongs to no request waits for the next request's call
//! or the timer; a stream is resumed only from its own call's answer.

use super::*;

const CC: &str = r#"{"name":"cc","key":["header:x-user"],
    "limits":[{"algorithm":"concurrency","limit":2,"max_hold":"30s"}]}"#;

fn pinned(rules: &str) -> Worker {
    let mut w = Worker::new(config("", rules), Instant::from_ms(NOW));
    w.pin_calls_to_streams();
    w
}

/// Client "a"'s stream 1 admitted with a slot, then ended outside any
/// callback that may start a call: its release waits, nothing is sent.
fn a_stream_ended() -> (FakeHost, Worker) {
    let host = FakeHost::new();
    let mut w = pinned(CC);
    w.on_request(&host, 1, &user("/", "a"));
    w.on_answer(&host, host.token(0), ints(&[1, 1, 0, 0]));
    w.on_stream_end(&host, 1);
    assert_eq!(host.sent.borrow().len(), 1);
    (host, w)
}

#[test]
#[wasm_bindgen_test]
fn each_request_gets_its_own_call_and_is_resumed_from_its_answer_only() {
    let host = FakeHost::new();
    let mut w = pinned(CC);
    assert_eq!(w.on_request(&host, 1, &user("/", "a")), Action::Pause);
    assert_eq!(w.on_request(&host, 2, &user("/", "b")), Action::Pause);
    // Two calls, one decision each (Envoy would batch the second behind
    // the first one in flight).
    assert_eq!(host.sent.borrow().len(), 2);
    assert_eq!((host.decisions_in(0), host.decisions_in(1)), (1, 1));
    w.on_answer(&host, host.token(1), ints(&[1, 1, 0, 0]));
    assert_eq!(*host.resumed.borrow(), [2]);
    w.on_answer(&host, host.token(0), ints(&[1, 1, 0, 0]));
    assert_eq!(*host.resumed.borrow(), [2, 1]);
}

#[test]
#[wasm_bindgen_test]
fn a_release_waits_for_the_next_request_and_rides_in_its_call_ahead_of_its_take() {
    let (host, mut w) = a_stream_ended();
    // The next request's call carries the release first, then its take.
    w.on_request(&host, 2, &user("/", "a"));
    assert_eq!(host.sent.borrow().len(), 2);
    assert_eq!(host.decisions_in(1), 2);
    let body = host.body(1);
    let (release, take) = (body.find("/r/1/").unwrap(), body.find("/u/1/").unwrap());
    assert!(release < take, "{body}");
}

#[test]
#[wasm_bindgen_test]
fn with_no_request_coming_the_timer_sends_it() {
    let (host, mut w) = a_stream_ended();
    w.on_tick(&host);
    assert_eq!(host.sent.borrow().len(), 2);
    assert!(host.body(1).contains("/r/1/"), "{}", host.body(1));
}
