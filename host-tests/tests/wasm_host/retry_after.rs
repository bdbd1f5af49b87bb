//! The exact retry instant: a denial names it; one millisecond before it
//! the deny cache still answers (no store call); at it the store is asked.

use crate::both_transports;
use crate::fixture::{at, get_at, rule, Kind, Servers};

both_transports!(denied_until_the_exact_retry_instant, a_cached_denial_counts_down_to_it);

/// fixed_window 2 per 10 s; the clock starts on a window boundary.
fn setup(kind: Kind) -> (Servers, host_tests::wasm_host::Host) {
    let servers = Servers::start(kind);
    let config = kind.config(&rule("api", "/api", "closed", "fixed_window", 2, "10s"));
    let host = servers.host(&config, 1).start();
    (servers, host)
}

fn denied_until_the_exact_retry_instant(kind: Kind) {
    let (_servers, mut host) = setup(kind);
    assert_eq!(get_at(&mut host, 1_000, 0, "/api").header("x-ratelimit-remaining"), Some("1"));
    assert_eq!(get_at(&mut host, 2_000, 0, "/api").header("x-ratelimit-remaining"), Some("0"));
    let denied = get_at(&mut host, 3_000, 0, "/api");
    assert_eq!((denied.status, denied.local), (429, true));
    // The window ends at 10 000: 7 000 ms from now.
    assert_eq!(denied.header("retry-after"), Some("7"));
    assert_eq!(denied.body, r#"{"error":"rate_limited","rule":"api","retry_after":7}"#);
    assert_eq!(denied.header("x-ratelimit-limit"), Some("2"));
    assert_eq!(denied.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(denied.header("x-ratelimit-reset"), Some(&*(at(10_000) / 1000).to_string()));
    assert_eq!(denied.header("ratelimit-reset"), Some("7"));
    assert_eq!(host.calls().len(), 3);

    // 1 ms before the instant: the deny cache, not the store.
    let cached = get_at(&mut host, 9_999, 0, "/api");
    assert_eq!(cached.status, 429);
    assert_eq!(cached.header("retry-after"), Some("1"));
    assert_eq!(host.calls().len(), 3, "no store call before the retry instant");
    assert_eq!(host.counter("ratelimit.api.deny_cache_hits"), 1);

    // At the instant: the store is asked, and the new window admits.
    let again = get_at(&mut host, 10_000, 0, "/api");
    assert_eq!(again.status, 200);
    assert_eq!(again.header("x-ratelimit-remaining"), Some("1"));
    assert_eq!(host.calls().len(), 4);
    assert_eq!(host.calls()[3].dispatched_ms, at(10_000));
    assert_eq!(host.counter("ratelimit.api.allowed"), 3);
    assert_eq!(host.counter("ratelimit.api.denied"), 2);
}

fn a_cached_denial_counts_down_to_it(kind: Kind) {
    let (_servers, mut host) = setup(kind);
    for ms in [0, 1] {
        assert_eq!(get_at(&mut host, ms, 0, "/api").status, 200);
    }
    assert_eq!(get_at(&mut host, 500, 0, "/api").header("retry-after"), Some("10"));
    // Retry-After rounds the remaining wait up to whole seconds.
    for (ms, retry) in [(501, "10"), (1_000, "9"), (1_001, "9"), (8_999, "2"), (9_000, "1"), (9_999, "1")] {
        let r = get_at(&mut host, ms, 0, "/api");
        assert_eq!((r.status, r.header("retry-after")), (429, Some(retry)), "at {ms} ms");
    }
    assert_eq!(host.calls().len(), 3, "every later denial came from the deny cache");
    assert_eq!(host.counter("ratelimit.api.deny_cache_hits"), 6);
}
