//! Many connections at one key: exactly `limit` admitted, for every algorithm.

use std::sync::{Arc, Barrier};

use host_tests::script::evalsha;
use ratelimit::algorithm::Algorithm;
use ratelimit::script::{sha1_hex, SCRIPT};

use crate::fixture::{spec, Fixture};

const CONNECTIONS: usize = 32;
const ATTEMPTS_EACH: usize = 5;
const LIMIT: u64 = 50;

#[test]
fn thirty_two_connections_admit_exactly_the_limit() {
    let f = Fixture::new();
    host_tests::script::load(&mut f.redis.connect(), SCRIPT);
    // The production script: TIME is the clock. An hour window keeps the
    // refill of the token bucket and GCRA below one request during the test.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let window = 3_600_000;
    let now = now - now % window + 1000; // far from a window edge
    for algo in Algorithm::RATES {
        let limit = spec(algo, LIMIT, window, LIMIT);
        let call = Arc::new(Fixture::call(algo.code(), now, &[limit], 1));
        let barrier = Arc::new(Barrier::new(CONNECTIONS));
        let threads: Vec<_> = (0..CONNECTIONS)
            .map(|_| {
                let (call, barrier, url) = (call.clone(), barrier.clone(), f.redis.url());
                std::thread::spawn(move || {
                    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
                    barrier.wait();
                    (0..ATTEMPTS_EACH)
                        .filter(|_| evalsha(&mut conn, sha1_hex(), &call, None).unwrap()[0][0].allowed)
                        .count()
                })
            })
            .collect();
        let admitted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(admitted as u64, LIMIT, "{}: {} attempts", algo.name(), CONNECTIONS * ATTEMPTS_EACH);
    }
}
