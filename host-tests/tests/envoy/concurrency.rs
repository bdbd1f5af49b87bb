//! Many requests at once: exactly the limit passes.

use std::sync::{Arc, Barrier};

use host_tests::stack::Stack;

use crate::plugin_config;

#[test]
fn sixty_four_concurrent_requests_against_limit_twenty_admit_exactly_twenty() {
    let rules = r#"{"name":"burst","key":["literal:everyone"],"limits":[{"algorithm":"sliding_window","limit":20,"window":"1h"}]}"#;
    let stack = Arc::new(Stack::start(&plugin_config(rules)));
    let barrier = Arc::new(Barrier::new(64));
    let threads: Vec<_> = (0..64)
        .map(|_| {
            let (stack, barrier) = (stack.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                stack.get("/").status
            })
        })
        .collect();
    let statuses: Vec<u16> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 20, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 429).count(), 44, "{statuses:?}");
}
