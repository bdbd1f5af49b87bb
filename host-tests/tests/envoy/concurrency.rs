//! Many requests at once: exactly the limit passes.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use host_tests::stack::Stack;
use host_tests::windows::{start_clear_of_boundary, HOUR};

use crate::plugin_config;

#[test]
fn sixty_four_concurrent_requests_against_limit_twenty_admit_exactly_twenty() {
    let rules = r#"{"name":"burst","key":["literal:everyone"],"limits":[{"algorithm":"sliding_window","limit":20,"window":"1h"}]}"#;
    // Counted in an hour's window: all of it in one.
    start_clear_of_boundary(HOUR, Duration::from_secs(60));
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

/// Batching on (the default: 2 calls in flight per worker, the rest
/// queued into shared calls): 64 concurrent requests over 10 identities on
/// 2 workers admit exactly each identity's limit, for each algorithm.
#[test]
fn sixty_four_concurrent_requests_over_ten_identities_admit_exactly_each_limit() {
    for algorithm in ["sliding_window", "fixed_window", "token_bucket", "sliding_log", "gcra"] {
        let burst = if algorithm == "gcra" { r#","burst":3"# } else { "" };
        let rules = format!(
            r#"{{"name":"per-key","key":["header:x-api-key"],"limits":[{{"algorithm":"{algorithm}","limit":3,"window":"1h"{burst}}}]}}"#
        );
        // Counted in an hour's window: all of it in one.
        start_clear_of_boundary(HOUR, Duration::from_secs(60));
        let stack = Arc::new(Stack::start(&plugin_config(&rules)));
        let barrier = Arc::new(Barrier::new(64));
        let threads: Vec<_> = (0..64)
            .map(|i| {
                let (stack, barrier) = (stack.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let key = format!("client-{}", i % 10);
                    barrier.wait();
                    (key.clone(), stack.send("GET", "/", &[("x-api-key", &key)]).status)
                })
            })
            .collect();
        let answers: Vec<(String, u16)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        for c in 0..10 {
            let key = format!("client-{c}");
            let admitted = answers.iter().filter(|(k, s)| *k == key && *s == 200).count();
            let sent = answers.iter().filter(|(k, _)| *k == key).count();
            assert_eq!(admitted, 3.min(sent), "{algorithm}: {key} sent {sent}");
        }
        assert!(answers.iter().all(|(_, s)| *s == 200 || *s == 429), "{algorithm}: {answers:?}");
    }
}
