//! The table `make demo` and `make demo-nginx` print: what each request got.

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
