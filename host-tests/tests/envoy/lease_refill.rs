//! A token-bucket lease never outlives the refill of what it took: units
//! leased before a pause are not spent on top of a bucket that filled up
//! meanwhile (the case of issue 32: 104 admitted at once of a burst of 100).

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use host_tests::stack::Stack;

use crate::plugin_config;

const THREADS: usize = 10;
const PER_THREAD: usize = 15;

#[test]
fn units_leased_before_a_pause_never_add_to_a_refilled_bucket() {
    // 1 token a second, capacity 100.
    let rules = r#"{"name":"tb","key":["header:x-user"],"lease":{"max_units":50,"max_age":"30s"},
        "limits":[{"algorithm":"token_bucket","limit":100,"window":"100s","burst":100}]}"#;
    let stack = Arc::new(Stack::start(&plugin_config(rules)));
    // Hot after 4 (the 4th's answer sizes the ask): the 5th request
    // brings a lease of 5, none of it spent.
    for _ in 0..5 {
        assert_eq!(stack.send("GET", "/", &[("x-user", "u")]).status, 200);
    }
    assert_eq!(stack.envoy.stat("wasmcustom.ratelimit.tb.leases"), 1, "one lease granted");
    // 10 tokens out: full again after 10 s; 12 s idle.
    std::thread::sleep(Duration::from_secs(12));
    let barrier = Arc::new(Barrier::new(THREADS));
    let started = Instant::now();
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (stack, barrier) = (stack.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                (0..PER_THREAD).filter(|_| stack.send("GET", "/", &[("x-user", "u")]).status == 200).count()
            })
        })
        .collect();
    let admitted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    // A full bucket, and what refills while the burst lasts (1 a second).
    let refilled = started.elapsed().as_secs() as usize + 1;
    assert!(admitted >= 100, "{admitted} of {} admitted: the bucket was full", THREADS * PER_THREAD);
    assert!(admitted <= 100 + refilled, "{admitted} admitted at once, more than 100 + {refilled} refilled");
}
