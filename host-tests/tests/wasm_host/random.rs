//! A seeded random run across several VMs: requests from a few clients,
//! random faults on the store calls, clients that leave, the clock moving
//! by random steps. The module must never trap (a trap fails the test
//! with its message), every answer must be one the filter can give, and
//! everything must settle once the clock passes every deadline.

use host_tests::prng::Rng;
use host_tests::wasm_host::{Fault, Host, Request, State, StreamId};

use crate::both_transports;
use crate::fixture::{Kind, Servers};

both_transports!(the_module_never_traps_under_random_faults);

const RULES: &str = r#"
  {"name":"ip","match":{"path_prefix":"/a"},"key":["client_ip"],"failure_mode":"open","fleet_size":2,
   "limits":[{"algorithm":"fixed_window","limit":4,"window":"1s"},{"algorithm":"sliding_window","limit":10,"window":"5s"}]},
  {"name":"key","match":{"path_prefix":"/a"},"key":["header:x-api-key"],"failure_mode":"closed",
   "limits":[{"algorithm":"token_bucket","limit":3,"window":"1s","burst":3}]},
  {"name":"gcra","match":{"path_prefix":"/b"},"key":["client_ip","path"],"failure_mode":"closed",
   "limits":[{"algorithm":"gcra","limit":5,"window":"1s","burst":2}]}"#;

fn fault(rng: &mut Rng, kind: Kind) -> Fault {
    let garbage = |rng: &mut Rng| {
        let n = rng.below(64) as usize;
        match (kind, rng.below(3)) {
            (_, 0) => rng.bytes(n),
            (Kind::Webdis, 1) => {
                format!(r#"{{"EVALSHA":[{},{},{},{}]}}"#, rng.below(3), rng.below(9), rng.below(99), rng.below(99))
                    .into_bytes()
            }
            (Kind::Redis, 1) => {
                format!("*4\r\n:{}\r\n:{}\r\n:{}\r\n:{}\r\n", rng.below(3), rng.below(9), rng.below(99), rng.below(99))
                    .into_bytes()
            }
            (Kind::Webdis, _) => br#"{"EVALSHA":[false,"NOSCRIPT No matching script"]}"#.to_vec(),
            (Kind::Redis, _) => b"*4\r\n$1\r\n1\r\n:1\r\n".to_vec(),
        }
    };
    match rng.below(14) {
        0..=4 => Fault::Pass,
        5 => Fault::Delay(rng.below(40)),
        6 => Fault::Drop,
        7 => Fault::Timeout,
        8 => Fault::ConnectFailure,
        9 => Fault::Error(
            ["NOSCRIPT No matching script", "ERR oops", "NOAUTH Authentication required."][rng.below(3) as usize]
                .into(),
        ),
        10 => Fault::Raw(garbage(rng)),
        11 if kind == Kind::Webdis => Fault::Http(500 + rng.below(5) as u32, rng.bytes(8)),
        11 => Fault::Raw(Vec::new()),
        12 if kind == Kind::Webdis => Fault::Reset,
        12 => Fault::Delay(20 + rng.below(20)),
        _ => Fault::DispatchStatus([2, 10][rng.below(2) as usize]),
    }
}

fn request(rng: &mut Rng) -> Request {
    let path = ["/a", "/a/x", "/b", "/b/y", "/c"][rng.below(5) as usize];
    let mut r = Request::get(path).from(&format!("10.0.0.{}:1", rng.below(4)));
    if rng.below(2) == 0 {
        r = r.header("x-api-key", ["k1", "k2"][rng.below(2) as usize]);
    }
    r
}

/// Finishes every decided stream; checks what the client got.
fn settle(host: &mut Host, open: &mut Vec<StreamId>, answered: &mut [u32; 3]) {
    let (decided, waiting): (Vec<StreamId>, Vec<StreamId>) =
        open.iter().partition(|id| host.state(**id) != State::Waiting);
    *open = waiting;
    for id in decided {
        let r = host.finish(id);
        match r.status {
            200 => answered[0] += 1,
            429 => {
                let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
                assert!(retry >= 1);
                assert!(r.body.starts_with(r#"{"error":"rate_limited","rule":""#), "{}", r.body);
                answered[1] += 1;
            }
            503 => {
                assert_eq!(r.body, r#"{"error":"rate_limiter_unavailable"}"#);
                answered[2] += 1;
            }
            s => panic!("the filter answered {s}: {r:?}"),
        }
    }
}

fn run(kind: Kind, servers: &Servers, seed: u64) -> [u32; 3] {
    let mut rng = Rng::new(seed);
    let mut host = servers.host(&kind.config(RULES), 3).start();
    let mut open: Vec<StreamId> = Vec::new();
    let mut answered = [0u32; 3];
    for _ in 0..400 {
        match rng.below(10) {
            0..=4 => {
                host.faults([fault(&mut rng, kind)]);
                let vm = rng.below(3) as usize;
                open.push(host.begin(vm, request(&mut rng)));
            }
            5 | 6 => host.run_until_idle(),
            7 | 8 => host.advance(rng.below(60)),
            _ => {
                if !open.is_empty() {
                    let id = open.swap_remove(rng.below(open.len() as u64) as usize);
                    host.close(id);
                }
            }
        }
        settle(&mut host, &mut open, &mut answered);
    }
    // Past every deadline, nothing is left waiting.
    host.advance(1_000);
    settle(&mut host, &mut open, &mut answered);
    assert!(open.is_empty(), "streams still waiting: {open:?}");
    assert_eq!(host.pending_calls(), 0);
    for vm in 0..3 {
        assert_eq!(host.live_streams(vm), 0);
    }
    answered
}

fn the_module_never_traps_under_random_faults(kind: Kind) {
    let servers = Servers::start(kind);
    for seed in [0x9e37_79b9_7f4a_7c15, 42, 7_777_777] {
        let answered = run(kind, &servers, seed);
        assert!(answered.iter().all(|n| *n > 0), "seed {seed}: every kind of answer was seen: {answered:?}");
    }
}
