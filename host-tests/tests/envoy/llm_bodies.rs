//! What a request body makes the shipped `llm-gateway.yaml` reserve, and
//! bodies that would make it reserve less than the upstream serves: `n`
//! completions, a worst case past the bucket, keys in another letter case,
//! made-up model names.

use std::sync::Arc;
use std::time::Duration;

use host_tests::llm_gateway::{LlmGateway, TEST_TIMEOUT};
use host_tests::windows::start_clear_of_boundary;

fn key(k: &str) -> String {
    format!("Bearer {k}")
}

/// Sends `bodies` at once, each with `headers`; their statuses.
fn at_once(gw: &Arc<LlmGateway>, headers: &[(&'static str, String)], bodies: Vec<String>) -> Vec<u16> {
    let threads: Vec<_> = bodies
        .into_iter()
        .map(|body| {
            let (gw, headers) = (gw.clone(), headers.to_vec());
            std::thread::spawn(move || {
                let h: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
                gw.chat_body(&h, &body).status
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn each_of_n_completions_is_reserved_its_output_bound() {
    let gw = Arc::new(LlmGateway::start(&[TEST_TIMEOUT]));
    // 8 completions of at most 3,000 tokens each: 24,000 and the body's
    // bytes; four fit in the bucket's 100,000, whatever the interleaving
    // (the upstream holds them until all are decided).
    let body = r#"{"model":"gpt-4o","n":8,"max_tokens":3000,"messages":[]}"#.to_string();
    let headers = [("authorization", key("sk-n")), ("x-usage", "10".into()), ("x-delay-ms", "2000".into())];
    let statuses = at_once(&gw, &headers, vec![body; 12]);
    let admitted = statuses.iter().filter(|s| **s == 200).count();
    assert_eq!((admitted, statuses.len() - admitted), (4, 8), "{statuses:?}");
}

#[test]
fn a_worst_case_past_the_bucket_takes_the_whole_bucket_instead_of_never_fitting() {
    let gw = LlmGateway::start(&[TEST_TIMEOUT]);
    // No output bound, 120,000 bytes of prompt: 124,096 reserved would
    // never fit a bucket of 100,000; capped at the bucket, it fits a full one.
    let body = format!(r#"{{"model":"gpt-4o","messages":[{{"role":"user","content":"{}"}}]}}"#, "x".repeat(120_000));
    let a = gw.chat_body(&[("authorization", &key("sk-big")), ("x-usage", "30000")], &body);
    assert_eq!(a.status, 200, "{}", a.body);
}

#[test]
fn a_key_the_rule_reads_given_again_in_another_case_is_refused() {
    let gw = LlmGateway::start(&[TEST_TIMEOUT]);
    let decoy = r#"{"model":"decoy-1","Model":"gpt-4o","max_tokens":1,"MAX_TOKENS":100000}"#;
    let a = gw.chat_body(&[("authorization", &key("sk-case"))], decoy);
    assert_eq!(a.status, 400);
    let error: serde_json::Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(error["detail"], "body:model is also given as a key spelled in another letter case");
    assert_eq!(gw.upstream.served.load(std::sync::atomic::Ordering::Relaxed), 0);
}

#[test]
fn made_up_model_names_share_one_budget_per_api_key() {
    start_clear_of_boundary(Duration::from_secs(60), Duration::from_secs(40));
    let gw = LlmGateway::start(&[TEST_TIMEOUT]);
    let mut statuses = Vec::new();
    for i in 0..130 {
        let body = format!(r#"{{"model":"made-up-{i}","max_tokens":1,"messages":[]}}"#);
        statuses.push(gw.chat_body(&[("authorization", &key("sk-models")), ("x-usage", "1")], &body).status);
    }
    let admitted = statuses.iter().filter(|s| **s == 200).count();
    assert_eq!((admitted, statuses.len() - admitted), (120, 10), "120 a minute per API key over all models");
    assert_eq!(statuses[120..], [429; 10]);
}

#[test]
fn a_client_refused_its_worst_case_is_let_in_again_once_its_refunds_landed() {
    let gw = Arc::new(LlmGateway::start(&[TEST_TIMEOUT]));
    // 20,500 output tokens and the body: four fit in the bucket's 100,000.
    let body = r#"{"model":"gpt-4o","max_tokens":20500,"messages":[]}"#.to_string();
    let headers = [("authorization", key("sk-refunds")), ("x-usage", "3000".into()), ("x-delay-ms", "1500".into())];
    let first = at_once(&gw, &headers, vec![body.clone(); 12]);
    assert_eq!(first.iter().filter(|s| **s == 200).count(), 4, "{first:?}");
    // Each of the four used 3,000 and gave the rest back: 88,000 are free,
    // room for four more worst cases, and none is refused from the cache.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while gw.stat("charges") < 4 {
        assert!(std::time::Instant::now() < deadline, "settled: {}", gw.stat("charges"));
        std::thread::sleep(Duration::from_millis(20));
    }
    let hits = gw.stat("deny_cache_hits");
    let second = at_once(&gw, &headers, vec![body; 12]);
    assert_eq!(second.iter().filter(|s| **s == 200).count(), 4, "{second:?}");
    assert_eq!(gw.stat("deny_cache_hits"), hits, "every refusal came from the store");
}
