//! `make demo`: Redis, webdis, Envoy with envoy-config/envoy.yaml as shipped
//! and an upstream, all on loopback; a short burst; a table of what the
//! clients saw; then everything is stopped.

// A demo driver: a failure to start a server ends it with that message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use host_tests::demo_table::table;
use host_tests::stack::Stack;

fn main() {
    println!("Starting redis-server, webdis, an upstream and Envoy 1.40 (2 workers) with envoy-config/envoy.yaml ...");
    let stack = match Stack::start_shipped(2) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("Envoy refused to start:\n{}", e.log);
            std::process::exit(1);
        }
    };
    println!(
        "  redis 127.0.0.1:{}  webdis 127.0.0.1:{}  envoy 127.0.0.1:{} (admin {})\n",
        stack.redis.port, stack.webdis.port, stack.envoy.port, stack.envoy.admin
    );

    println!("Rule \"api\": GET /api/*, per client address, sliding window 10/min (+ 10000/day), fails open.");
    table((1..=12).map(|i| (i, "GET /api/items", stack.get("/api/items"))).collect());

    println!("\nRule \"login\": POST /login, per client address, sliding log 5/hour, fails closed.");
    table((1..=7).map(|i| (i, "POST /login", stack.send("POST", "/login", &[]))).collect());

    println!("\nA path no rule matches passes untouched:");
    table(vec![(1, "GET /health", stack.get("/health"))]);

    println!("\nEnvoy /stats (the filter's counters):");
    for line in stack.envoy.stats("wasmcustom.ratelimit").lines().filter(|l| !l.contains("No recorded values")) {
        println!("  {line}");
    }
    println!("\nRedis keys (one client, its hash tag in braces):");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut stack.redis.connect()).unwrap();
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut stack.redis.connect()).unwrap();
        println!("  {key:<44} expires in {:.1} s", ttl as f64 / 1000.0);
    }
    drop(stack);
    println!("\nStopped everything.");
}
