//! `envoy-config/llm-gateway.yaml` as shipped combines a concurrency limit
//! (8 completions in flight per API key and model) with requests per minute and
//! tokens per hour: a 9th completion while 8 run is refused for
//! concurrency and costs neither requests nor tokens, and once they end
//! the key is admitted again with every token of the 8 charged.

use std::time::{Duration, Instant};

use host_tests::llm_gateway::{LlmGateway, TEST_TIMEOUT};

const IN_FLIGHT: usize = 8;

#[test]
fn a_ninth_completion_while_eight_run_is_refused_for_concurrency_and_costs_nothing() {
    let gw = std::sync::Arc::new(LlmGateway::start(&[TEST_TIMEOUT]));
    let key = "Bearer sk-eight-at-once";
    let slow: Vec<_> = (0..IN_FLIGHT)
        .map(|_| {
            let gw = gw.clone();
            std::thread::spawn(move || {
                gw.chat(&[("authorization", key), ("x-usage", "100"), ("x-delay-ms", "4000")]).status
            })
        })
        .collect();
    // The eight hold their slots once the store counted them.
    let deadline = Instant::now() + Duration::from_secs(30);
    while gw.stat("slots_taken") < IN_FLIGHT as u64 {
        assert!(Instant::now() < deadline, "the eight never all started: {}", gw.stat("slots_taken"));
        std::thread::sleep(Duration::from_millis(20));
    }
    let ninth = gw.chat(&[("authorization", key), ("x-usage", "100")]);
    assert_eq!(ninth.status, 429);
    // A second, spread by the shipped jitter (up to 25% later): 1 or 2.
    let retry = ninth.header("retry-after").unwrap().to_string();
    assert!(retry == "1" || retry == "2", "{retry}");
    let body = format!(
        r#"{{"error":{{"message":"Rate limit reached for rule llm: limit 8 concurrent requests. Please try again in {retry}s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}}}"#
    );
    assert_eq!(ninth.body, body);
    assert_eq!(gw.stat("slots_refused"), 1);
    let statuses: Vec<u16> = slow.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(statuses, [200; IN_FLIGHT]);
    // Released as each stream ended: the key is admitted again.
    while gw.stat("slots_released") < IN_FLIGHT as u64 {
        assert!(Instant::now() < deadline, "released {}", gw.stat("slots_released"));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(gw.chat(&[("authorization", key), ("x-usage", "100")]).status, 200);
    // Nine admitted in all, never the refused one: 9 requests of the
    // minute's 60 and 900 tokens charged.
    while gw.stat("charged_units") < 900 {
        assert!(Instant::now() < deadline, "charged {}", gw.stat("charged_units"));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!((gw.stat("allowed"), gw.stat("charges"), gw.stat("charged_units")), (9, 9, 900));
}
