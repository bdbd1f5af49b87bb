//! Replies the store should never send: every one is a store error that
//! the rule's failure policy answers (503 closed, fallback open), with the
//! reason logged, and never a trap.

use host_tests::wasm_host::Fault;

use crate::fixture::{both_policies, Kind, Servers};

#[test]
fn webdis_malformed_replies_are_store_errors() {
    let servers = Servers::start(Kind::Webdis);
    let cases: Vec<(Fault, &str)> = vec![
        (Fault::Raw(b"not json".to_vec()), "malformed store reply: not JSON"),
        (Fault::Raw(br#"{"EVALSHA":[1,4"#.to_vec()), "malformed store reply: not JSON"),
        (Fault::Raw(vec![0xff; 70_000]), "malformed store reply: answer larger than any reply to the call"),
        (Fault::Raw(vec![0xff; 100]), "malformed store reply: not JSON"),
        (Fault::Raw(br#"{"GET":[1,4,0,0]}"#.to_vec()), "malformed store reply: reply names another command"),
        (Fault::Raw(br#"{"EVALSHA":"OK"}"#.to_vec()), "malformed store reply: the decision is not an array"),
        (
            Fault::Raw(br#"{"EVALSHA":[1,4,0]}"#.to_vec()),
            "malformed store reply: wrong number of values for the limits asked",
        ),
        (
            Fault::Raw(br#"{"EVALSHA":[]}"#.to_vec()),
            "malformed store reply: wrong number of values for the limits asked",
        ),
        (Fault::Raw(br#"{"EVALSHA":[1,"4",0,0]}"#.to_vec()), "malformed store reply: non-integer in the decision"),
        (Fault::Raw(br#"{"EVALSHA":[1,4.5,0,0]}"#.to_vec()), "malformed store reply: non-integer in the decision"),
        (Fault::Raw(br#"{"EVALSHA":[7,4,0,0]}"#.to_vec()), "malformed store reply: impossible decision values"),
        (Fault::Raw(br#"{"EVALSHA":[1,-4,0,0]}"#.to_vec()), "malformed store reply: impossible decision values"),
        (
            Fault::Raw(br#"{"EVALSHA":[1,4,0,99999999999999999999]}"#.to_vec()),
            "malformed store reply: non-integer in the decision",
        ),
        (
            Fault::Error("ERR ratelimit: limit 1: cost must be a positive integer".into()),
            "redis error: ERR ratelimit: limit 1: cost must be a positive integer",
        ),
        (Fault::Error("WRONGTYPE \u{1}\u{2}".into()), "redis error: WRONGTYPE ??"),
        (Fault::Http(500, b"oops".to_vec()), "store answered HTTP 500"),
        (Fault::Http(200, Vec::new()), "malformed store reply: not JSON"),
        (Fault::Reset, "malformed store reply: no :status"),
        (Fault::ConnectFailure, "store answered HTTP 503"),
    ];
    for (client, (fault, reason)) in cases.into_iter().enumerate() {
        let (closed, open) = both_policies(&servers, client, &fault);
        let expected = format!("ratelimit: {reason} (1 store errors on this worker since the last such line)");
        let what = format!("{:.80?}", format!("{fault:?}"));
        assert_eq!(closed.logs_containing("store errors"), std::slice::from_ref(&expected), "{what}");
        assert_eq!(open.logs_containing("store errors"), [expected], "{what}");
    }
}

/// Replies that are not a decision, in RESP: truncated, of the wrong
/// types, with absurd lengths, or not RESP at all.
#[test]
fn redis_malformed_replies_are_store_errors() {
    let servers = Servers::start(Kind::Redis);
    let cases: Vec<&[u8]> = vec![
        b"",
        b"*4\r\n:1\r\n:4\r\n",
        b"*4\r\n:1\r\n:4\r\n:0\r",
        b"+OK\r\n",
        b"$5\r\nhello\r\n",
        b"*4\r\n$1\r\n1\r\n:4\r\n:0\r\n:0\r\n",
        b"*4\r\n:7\r\n:4\r\n:0\r\n:0\r\n",
        b"*4\r\n:1\r\n:-4\r\n:0\r\n:0\r\n",
        b"*3\r\n:1\r\n:4\r\n:0\r\n",
        b"*0\r\n",
        b"*-1\r\n",
        b"$-1\r\n",
        b"$999999999999\r\nabc\r\n",
        b"*99999999999\r\n",
        b"*2147483648\r\n:1\r\n",
        b"$-5\r\n",
        b":99999999999999999999999\r\n",
        b"*4\r\n:1\r\n:4\r\n:0\r\n:99999999999999999999\r\n",
        b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n",
        b"hello",
        b"-\r\n",
        b"\0\0\0\0",
    ];
    let mut faults: Vec<Fault> = cases.into_iter().map(|b| Fault::Raw(b.to_vec())).collect();
    faults.push(Fault::Error("ERR ratelimit: limit 1: cost must be a positive integer".into()));
    faults.push(Fault::ConnectFailure);
    faults.push(Fault::Timeout);
    for (client, fault) in faults.iter().enumerate() {
        both_policies(&servers, client, fault);
    }
}
