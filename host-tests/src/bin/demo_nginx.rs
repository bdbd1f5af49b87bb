//! `make demo-nginx`: Redis, webdis, NGINX with ngx_wasm_module and
//! envoy-config/nginx.conf as shipped, and an upstream, all on loopback; a
//! short burst; a table of what the clients saw; then everything is stopped.

// A demo driver: a failure to start a server ends it with that message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use host_tests::demo_table::table;
use host_tests::nginx::NginxStack;

fn main() {
    println!(
        "Starting redis-server, webdis, an upstream and NGINX (2 worker processes) with envoy-config/nginx.conf ..."
    );
    let stack = match NginxStack::try_start(None) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("NGINX refused to start:\n{}", e.log);
            std::process::exit(1);
        }
    };
    println!(
        "  redis 127.0.0.1:{}  webdis 127.0.0.1:{}  nginx 127.0.0.1:{}\n",
        stack.redis.port, stack.webdis.port, stack.nginx.port
    );
    println!("Rule \"api\": GET /api/*, per client address, sliding window 10/min (+ 10000/day), fails open.");
    table((1..=12).map(|i| (i, "GET /api/items", stack.send("GET", "/api/items", &[]))).collect());
    println!("\nRule \"login\": POST /login, per client address, sliding log 5/hour, fails closed.");
    table((1..=7).map(|i| (i, "POST /login", stack.send("POST", "/login", &[]))).collect());
    println!("\nA path no rule matches passes untouched:");
    table(vec![(1, "GET /health", stack.send("GET", "/health", &[]))]);
    println!("\nRedis keys (one client, its hash tag in braces):");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut stack.redis.connect()).unwrap();
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut stack.redis.connect()).unwrap();
        println!("  {key:<44} expires in {:.1} s", ttl as f64 / 1000.0);
    }
    drop(stack);
    println!("\nStopped everything.");
}
