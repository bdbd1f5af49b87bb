//! Every algorithm exact over NGINX's two worker processes: requests on
//! many connections at once, exactly the limit admitted.

use std::sync::Arc;

use host_tests::http::{agent, send};
use host_tests::nginx::NginxStack;
use host_tests::windows::{start_clear_of_boundary, HOUR};

use crate::plugin;

const LIMIT: usize = 12;
const THREADS: usize = 6;
const PER_THREAD: usize = 5;

#[test]
fn every_algorithm_admits_exactly_its_limit_across_both_worker_processes() {
    let rules = [
        ("fw", r#"{"algorithm":"fixed_window","limit":12,"window":"1h"}"#),
        ("sw", r#"{"algorithm":"sliding_window","limit":12,"window":"1h"}"#),
        ("sl", r#"{"algorithm":"sliding_log","limit":12,"window":"1h"}"#),
        ("tb", r#"{"algorithm":"token_bucket","limit":12,"window":"1h","burst":12}"#),
        ("gc", r#"{"algorithm":"gcra","limit":12,"window":"1h","burst":12}"#),
    ];
    let text: Vec<String> = rules
        .iter()
        .map(|(name, limit)| {
            format!(
                r#"{{"name":"{name}","match":{{"path_prefix":"/{name}/"}},"key":["header:x-user"],"limits":[{limit}]}}"#
            )
        })
        .collect();
    start_clear_of_boundary(HOUR, std::time::Duration::from_secs(120));
    let stack = Arc::new(NginxStack::start(&plugin(&text.join(","))));
    let port = stack.nginx.port;
    for (name, _) in rules {
        // Each thread its own keep-alive connection (a request after the
        // first on a connection must wait for its decision too), and half
        // of them a new connection per request: the kernel spreads
        // connections over both worker processes.
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                std::thread::spawn(move || {
                    let kept = agent(std::time::Duration::from_secs(10));
                    (0..PER_THREAD)
                        .filter(|i| {
                            let fresh = agent(std::time::Duration::from_secs(10));
                            let a = if t % 2 == 0 { &kept } else { &fresh };
                            let url = format!("http://127.0.0.1:{port}/{name}/x?{t}-{i}");
                            send(a, "GET", &url, &[("x-user", "u")]).status == 200
                        })
                        .count()
                })
            })
            .collect();
        let admitted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(admitted, LIMIT, "{name}: {admitted} of {} admitted", THREADS * PER_THREAD);
    }
    assert!(!stack.nginx.workers_crashed() && !stack.nginx.store_failed(), "{}", stack.nginx.log());
}
