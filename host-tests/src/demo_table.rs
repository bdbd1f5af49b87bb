//! What `make demo` and `make demo-nginx` print: what each request of a
//! burst against the shipped rules got, and the keys left in Redis.

use crate::http::Answer;

/// Prints one row per request: its status, rate-limit fields and (denied)
/// body.
pub fn table(rows: Vec<(usize, &str, Answer)>) {
    println!(
        "  {:>2}  {:<15} {:>6}  {:>5}  {:>9}  {:>5}  {:>11}  body",
        "#", "request", "status", "limit", "remaining", "reset", "retry-after"
    );
    for (i, what, a) in rows {
        let h = |n: &str| a.header(n).unwrap_or("-").to_string();
        let body = if a.status == 200 { String::new() } else { a.body.trim_end().to_string() };
        println!(
            "  {:>2}  {:<15} {:>6}  {:>5}  {:>9}  {:>5}  {:>11}  {}",
            i,
            what,
            a.status,
            h("ratelimit-limit"),
            h("ratelimit-remaining"),
            h("ratelimit-reset"),
            h("retry-after"),
            body
        );
    }
}

/// Sends the burst against the shipped rules through `send` (method,
/// path) and prints what each request got.
pub fn show_shipped_rules(send: impl Fn(&str, &str) -> Answer) {
    println!("Rule \"api\": GET /api/*, per client address, sliding window 10/min (+ 10000/day), fails open.");
    table((1..=12).map(|i| (i, "GET /api/items", send("GET", "/api/items"))).collect());
    println!("\nRule \"login\": POST /login, per client address, sliding log 5/hour, fails closed.");
    table((1..=7).map(|i| (i, "POST /login", send("POST", "/login"))).collect());
    println!("\nA path no rule matches passes untouched:");
    table(vec![(1, "GET /health", send("GET", "/health"))]);
}

/// Prints the keys in `redis` with their expiry.
pub fn show_keys(redis: &mut redis::Connection) {
    println!("\nRedis keys (one client, its hash tag in braces):");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(redis).unwrap_or_default();
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(redis).unwrap_or(-1);
        println!("  {key:<44} expires in {:.1} s", ttl as f64 / 1000.0);
    }
}
